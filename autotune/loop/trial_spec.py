"""What the loop asks a child process to do: the spec of one run, and how long it may take.

A spec is the whole of a run's input (the runner reads nothing else): the job, the knobs, the shared
inputs the frame wrote (rows, model config), or for a user's script, copies of its configs edited to
say the knobs. The timeout follows the slowest complete run so far and never outlasts the time budget.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.job import Job
from ..workloads.jobs import kind_of
from ..config.knobs import Knobs
from ..config.messages import rows_needed
from ..probes.timing import median


@dataclass(frozen=True)
class StepBudget:
    """Steps per measurement: smoke keeps a CPU dry run within minutes."""

    measure_steps: int
    warmup_max: int
    baseline_repeats: int = 3
    # Interleaved pairs added, at most, to a comparison that two pairs leave undecided.
    extra_pairs: int = 14
    # "sequential": run-level test on a pooled spread, looked at after each pair (probes.sequential);
    # "floor": the bootstrap interval must clear the baseline's A/A floor, at most 2 extra pairs (before
    # issue 19; kept so `python -m bench.extra_pairs` can compare the two).
    keep_rule: str = "sequential"

    @classmethod
    def for_job(cls, job: Job) -> "StepBudget":
        return cls(measure_steps=4, warmup_max=3) if job.smoke else cls(measure_steps=8, warmup_max=8)


FRAME_TIMEOUT_S = 1800
# Steps after the measured window that are timed phase by phase (where the time goes).
PROFILE_STEPS = 1
# A trial may take this many times the slowest complete trial so far before it is stopped.
TIMEOUT_FACTOR = 4
MIN_TIMEOUT_S = 120


def runner_for(job: Job) -> str:
    """Which runner module trains this job: its kind's (the user's script, the framework-free MLP, or
    Hugging Face; engine.RUNNER_MODULES names the module)."""
    return kind_of(job).name


def spec(tuner: Any, kind: str, knobs: Knobs, trial: int, ceiling: bool = False,
         peak_cache: dict[str, Any] | None = None, workdir: Path | None = None) -> dict[str, Any]:
    """The spec of one run of `knobs` (a "frame" or a "trial") for the tuner's job and run folder: the one
    place a spec is built (messages.TrialSpec is its form; the executor checks it as it writes it).

    `peak_cache` (the frame only): peaks measured before on this device; `workdir` (a script's trial):
    the folder its mirror of the user's tree goes in."""
    extra: dict[str, Any] = {"peak_cache": peak_cache} if peak_cache is not None else {}
    if tuner.script is not None:
        if workdir is not None:
            extra["workdir"] = str(workdir.resolve())
        return {**script_spec(tuner, kind, knobs, trial), **extra}
    return {
        "schema_version": 1, "kind": kind, "runner": runner_for(tuner.job), "job": tuner.job.to_dict(),
        "knobs": knobs.to_dict(), "rows_path": str(tuner.folder.rows.resolve()),
        "model_config_path": str(tuner.folder.model_config.resolve()),
        "rows_needed": rows_needed(tuner.job.effective_batch, tuner.steps.measure_steps),
        "measure_steps": tuner.steps.measure_steps, "warmup_max": tuner.steps.warmup_max,
        "ceiling": ceiling, "inject_fault": tuner.inject.get(trial) if kind == "trial" else None,
        "peaks": tuner.state.peaks, "profile_steps": PROFILE_STEPS, **extra,
    }


def script_spec(tuner: Any, kind: str, knobs: Knobs, trial: int) -> dict[str, Any]:
    """A trial of the user's script: copies of its configs edited to say `knobs`, or its own flags."""
    job, script, cwd = tuner.job, tuner.script, tuner.cwd
    edits, flags = script.edits(knobs)
    return {
        "schema_version": 1, "kind": kind, "runner": "script", "job": job.to_dict(), "knobs": knobs.to_dict(),
        "script": {"path": job.script, "cwd": str(cwd),
                   "configs": [{"label": label, "path": str((cwd / Path(label).expanduser()).resolve())}
                               for label in job.script_configs],
                   "edits": edits, "args": shlex.split(job.script_args),
                   "expect": script.expected(knobs),
                   "exclude": [str(tuner.folder.path.parent.resolve())], "listing": script.listing()},
        "flags": flags, "measure_steps": tuner.steps.measure_steps, "warmup_max": tuner.steps.warmup_max,
        "ceiling": False, "inject_fault": tuner.inject.get(trial) if kind == "trial" else None,
        "peaks": tuner.state.peaks, "profile_steps": 0,
    }


def timeout(job: Job, started: float, slowest_s: float) -> tuple[float, bool]:
    """Seconds a measurement may take, and whether the time budget (not slowness) sets that limit."""
    limit = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * slowest_s) if slowest_s else FRAME_TIMEOUT_S
    if job.time_budget_s is not None:
        # The budget is a promise: a trial that would overrun it is stopped, not waited for.
        left = job.time_budget_s - (time.monotonic() - started)
        if left < limit:
            return max(1.0, left), True
    return limit, False


def room_for(job: Job, started: float, walls: list[float], budget_spent: bool, runs: int) -> bool:
    """Whether `runs` more measurements fit in the time budget. They build on the incumbent, so a
    typical measurement, not the slowest, is the estimate."""
    if budget_spent:
        return False
    if job.time_budget_s is None or not walls:
        return True
    return time.monotonic() - started + runs * median(walls[-3:]) <= job.time_budget_s
