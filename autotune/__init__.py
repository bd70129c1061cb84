"""autotune: makes a single-GPU fine-tuning job faster by experiment.

The library API (the CLI is a client of it):

    import logging, autotune
    logging.basicConfig(level=logging.INFO)         # one line per trial on the "autotune" logger
    job = autotune.Job(run="demo", model="mlp", dataset="synthetic", max_len=512, effective_batch=64,
                       smoke=True, start=autotune.Knobs(per_device_train_batch_size=8))
    outcome = autotune.tune(job, runs_dir="runs", callbacks=[MyCallback()])   # runs/demo/: report, configs
    advice = autotune.suggest(model="Qwen/Qwen2.5-7B", max_len=2048, effective_batch=16, gpu="4090")
    advice.best.change                              # the change most worth a device run, from the beliefs

`Job(...)` takes typed keyword arguments (its groups: `MlpShape`, `ScriptJob`, `SshSettings`, ...), checked
and given the defaults its words would get when the tune starts; `job_from_dict` / `job_from_words` read the
command's keys (a script job is read from its files that way). `Callback` (on_trial, on_end, on_stop) observes a tune; `Tuner` is the ask / run_trial / tell loop
that `tune` drives.

Names are imported on first use, so `import autotune` stays cheap (no torch, no transformers).
"""

from __future__ import annotations

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {"tune": "api", "suggest": "api", "Job": "config.job", "job_from_dict": "api",
            "job_from_words": "api", "Knobs": "config.knobs", "Outcome": "loop.outcome",
            "Callback": "loop.callbacks", "Advice": "loop.suggestion", "SuggestedChange": "loop.suggestion",
            "TrialRecord": "config.records", "Tuner": "loop.tuner", "MlpShape": "config.job",
            "ScriptJob": "config.job", "SshSettings": "config.job", "LlmProposer": "config.job", "Tracking": "config.job",
            "AutotuneError": "util.errors", "JobError": "util.errors"}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # once: later lookups are plain attributes
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

