"""The training-step machinery the runners share: the child's entry, the step log and timing, batching,
the own training loop, the data, the instruments. Importing this package loads no runner (they import
torch).

What a trial runs: each runner is `python -m MODULE SPEC RESULT` (or forked by the local executor
through `common.run_forked`), its module the one `runner_module` names for the spec's `runner`.
"""

# The hand-over step (the best config run in `trl sft`'s own code) is not a kind of job: its runner
# lives with the Hugging Face kind.
_OWN_MODULES = {"realize": "autotune.workloads.hf.realize"}


def runner_module(runner: str) -> str:
    """The module that trains the spec's `runner`: each kind of job (workloads/jobs.py KINDS, whose name
    is the spec's `runner`) keeps its runner at workloads/KIND/runner.py. A name only: the executors
    start it in a child, and the parent never imports torch for it."""
    if not runner.isidentifier():
        raise ValueError(f"runner {runner!r} is not a kind of job")
    return _OWN_MODULES.get(runner, f"autotune.workloads.{runner}.runner")


__all__ = ["runner_module"]
