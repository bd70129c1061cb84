"""The MLP job's words: `model=mlp` and its keys, checked against what the framework-free loop can run."""

from __future__ import annotations

import dataclasses

from ...config.job import Job, MlpShape
from ...config.job_common import common_fields, start_knobs
from ...config.job_keys import MLP_MODEL
from ...config.job_values import whole
from ...config.knobs import CATALOG
from ...util.errors import JobError

# model=mlp checks an install in a minute: everything but the model has a default. Its rows are
# `max_len` features each (the MLP's input size), from a seeded generator, so dataset= is synthetic.
MLP_DEFAULTS = {"dataset": "synthetic", "max_len": "512", "effective_batch": "64", "mlp_width": "1024",
                "mlp_depth": "4", "mlp_rows": "8192"}
# Its smoke run (the install check) ends within two minutes, frame and baseline included.
MLP_SMOKE_TIME_BUDGET_S = 90
MLP_KEYS = ("mlp_width", "mlp_depth", "mlp_rows")
# The knobs of any PyTorch loop: all that apply to the MLP (its rows have no length, no attention, no
# images, and it checkpoints no layers).
MLP_KNOBS = ("per_device_train_batch_size", "precision", "torch_compile", "dataloader_num_workers",
             "dataloader_pin_memory", "optim")


def mlp_job(run: str, pairs: dict[str, str], smoke: bool, place: object = None) -> Job:
    """The framework-free MLP: its own seeded rows and weights; the knobs of any PyTorch loop
    (`place`: unused, nothing of this kind runs before the tune takes the run's lock)."""
    for key, why in (("method", "LoRA adapts a pretrained transformer; the MLP trains all its weights"),
                     ("weights", "the MLP starts from seeded random weights"),
                     ("realize", "its best config is a plain loop's settings, not a `trl sft` file")):
        if key in pairs:
            raise JobError(f"{key}= does not apply with model=mlp: {why}; drop {key}=")
    if pairs.get("dataset", "synthetic") != "synthetic":
        raise JobError(f"dataset={pairs['dataset']!r}: model=mlp trains on its own seeded random rows; "
                       "use dataset=synthetic or drop dataset=")
    fixed = [k for k in CATALOG if k in pairs and k not in MLP_KNOBS]
    if fixed:
        raise JobError(f"{', '.join(fixed)} does not apply with model=mlp (its rows are fixed-size vectors); drop it")
    if smoke and "time" not in pairs:
        pairs = {**pairs, "time": f"{MLP_SMOKE_TIME_BUDGET_S}s"}
    pairs = {**MLP_DEFAULTS, **pairs}
    effective_batch = whole("effective_batch", pairs["effective_batch"], 1)
    return complete(Job(**common_fields(run, pairs, smoke), model=MLP_MODEL, dataset="synthetic",
               max_len=whole("max_len", pairs["max_len"], 8), effective_batch=effective_batch, weights="random",
               mlp=MlpShape(width=whole("mlp_width", pairs["mlp_width"], 1), depth=whole("mlp_depth", pairs["mlp_depth"], 1),
                            rows=whole("mlp_rows", pairs["mlp_rows"], 1)),
               start=start_knobs(pairs, effective_batch)))


def complete(job: Job, check: bool = True) -> Job:
    """An MLP job as built in Python (`autotune.Job(model="mlp", ...)`), checked as its words are: what
    the framework-free loop cannot do is refused, its shape and a smoke run's budget get their defaults.
    A job built from words passes through unchanged. `check`: unused (nothing here reads a file)."""
    for wrong, why in ((job.method != "sft", f"method={job.method}: LoRA adapts a pretrained transformer; the MLP "
                        "trains all its weights"),
                       (job.weights == "pretrained", "weights=pretrained: the MLP starts from seeded random weights"),
                       (job.dataset != "synthetic", f"dataset={job.dataset!r}: model=mlp trains on its own seeded "
                        "random rows; use dataset=synthetic")):
        if wrong:
            raise JobError(f"{why}")
    fixed = [name for name in job.start.diff(type(job.start)()) if name not in MLP_KNOBS]
    if fixed:
        raise JobError(f"{', '.join(sorted(fixed))} does not apply with model=mlp (its rows are fixed-size vectors); "
                       "leave it at its default")
    filled: dict[str, object] = {"weights": "random"} if job.weights != "random" else {}
    if job.mlp is None:
        filled["mlp"] = MlpShape(*(int(MLP_DEFAULTS[key]) for key in MLP_KEYS))
    if job.smoke and job.time_budget_s is None:
        filled["time_budget_s"] = MLP_SMOKE_TIME_BUDGET_S
    return dataclasses.replace(job, **filled) if filled else job
