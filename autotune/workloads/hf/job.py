"""A Hugging Face model's words (text or image-text): model, dataset, length, batch, method, weights."""

from __future__ import annotations

import dataclasses

from ...config.job import SMOKE_TIME_BUDGET_S, Job, parse_flag
from ...config.job_common import common_fields, start_knobs
from ...config.job_keys import JOB_KEYS
from ...config.job_values import check_dataset, check_model, whole
from ...config.presets import DEMO_PRESET, PRESETS, is_vision_preset
from ...util.errors import JobError

REQUIRED = ("model", "dataset", "max_len", "effective_batch")
# What `smoke` fills in when a key is missing: the embedded default job.
SMOKE_DEFAULTS = {"model": DEMO_PRESET, "dataset": "synthetic", "max_len": "512", "effective_batch": "16"}
# An image-text preset's steps carry images through a vision tower and the processor: its smoke run
# gets longer than config.job.SMOKE_TIME_BUDGET_S, still within five minutes.
VLM_SMOKE_TIME_BUDGET_S = 285


def hf_job(run: str, pairs: dict[str, str], smoke: bool, place: object = None) -> Job:
    """A causal LM or a VLM trained by the built-in runner; `smoke` fills in the embedded demo job
    (`place`: unused, nothing of this kind runs before the tune takes the run's lock)."""
    if smoke:
        pairs = {**SMOKE_DEFAULTS, **pairs}
        if "time" not in pairs and is_vision_preset(pairs["model"]):
            pairs["time"] = f"{VLM_SMOKE_TIME_BUDGET_S}s"
    for key in REQUIRED:
        if key not in pairs:
            raise JobError(f"missing required key '{key}': expected {key}=<{JOB_KEYS[key]}> (or add 'smoke' for the built-in demo job)")
    check_model(pairs["model"])
    check_dataset(pairs["dataset"])
    effective_batch = whole("effective_batch", pairs["effective_batch"], 1)
    # Checked above (the names, a local file's rows): complete() only fills in what the words left out.
    return complete(Job(**common_fields(run, pairs, smoke), model=pairs["model"], dataset=pairs["dataset"],
               max_len=whole("max_len", pairs["max_len"], 8), effective_batch=effective_batch,
               method=pairs.get("method", "sft"),
               weights=pairs.get("weights", "random" if pairs["model"] in PRESETS else "pretrained"),
               allow_image_resize=parse_flag("allow_image_resize", pairs.get("allow_image_resize", "false")),
               realize=parse_flag("realize", pairs.get("realize", "true")), start=start_knobs(pairs, effective_batch)), check=False)


def complete(job: Job, check: bool = True) -> Job:
    """A Hugging Face job as built in Python (`autotune.Job(...)`), checked as its words are and with
    the defaults they get: the model and dataset names, the weights (a preset has none to load), a
    smoke run's time budget. A job built from words passes through unchanged. `check`: look at the
    model and dataset names (a local dataset must exist); a stored job read back (a resume, a replayed
    benchmark table) was checked when it was made, and its file may have moved since."""
    if check:
        check_model(job.model)
        check_dataset(job.dataset)
    filled: dict[str, object] = {}
    if not job.weights:
        filled["weights"] = "random" if job.model in PRESETS else "pretrained"
    if job.smoke and job.time_budget_s is None:
        filled["time_budget_s"] = VLM_SMOKE_TIME_BUDGET_S if is_vision_preset(job.model) else SMOKE_TIME_BUDGET_S
    return dataclasses.replace(job, **filled) if filled else job
