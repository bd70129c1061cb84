"""The training-step machinery the runners share: the child's entry, the step log and timing, batching,
the own training loop, the data, the instruments. Importing this package loads no runner (they import
torch).

What a trial runs: each runner is `python -m MODULE SPEC RESULT` (or forked by the local executor
through `common.run_forked`), its module named by RUNNER_MODULES from the spec's `runner`.
"""

# The spec's `runner` -> the module that trains it (each kind of job owns its runner under workloads/).
# Names only: the executors start these in a child, and the parent never imports torch for them.
RUNNER_MODULES = {
    "hf": "autotune.workloads.hf.runner",
    "mlp": "autotune.workloads.mlp.runner",
    "script": "autotune.workloads.script.runner",
    "realize": "autotune.workloads.hf.realize",
}

__all__ = ["RUNNER_MODULES"]
