"""What the loop asks a child process to do: the spec of one run, and how long it may take.

A spec is the whole of a run's input (the runner reads nothing else): the job, the knobs, the shared
inputs the frame wrote (rows, model config), or for a user's script, copies of its configs edited to
say the knobs. The timeout follows the slowest complete run so far and never outlasts the time budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..config.job import Job
from ..config.types import JsonObject
from .keep_rule import SEQUENTIAL, KeepRule
from ..workloads.jobs import kind_of
from ..workloads.spec import SpecInputs
from ..config.knobs import Knobs
from ..config.messages import RunResult
from ..output.records import RunFolder
from ..probes.timing import median


@dataclass(frozen=True)
class StepBudget:
    """Steps per measurement: smoke keeps a CPU dry run within minutes."""

    measure_steps: int
    warmup_max: int
    baseline_repeats: int = 3
    # Interleaved pairs added, at most, to a comparison that two pairs leave undecided.
    extra_pairs: int = 14
    # How the runs decide: the sequential rule (keep_rule.py), or another KeepRule a benchmark compares
    # with it (bench/floor_rule.py: the rule before issue 19).
    keep_rule: KeepRule = SEQUENTIAL

    @classmethod
    def for_job(cls, job: Job) -> "StepBudget":
        return cls(measure_steps=4, warmup_max=3) if job.smoke else cls(measure_steps=8, warmup_max=8)


FRAME_TIMEOUT_S = 1800
# A trial may take this many times the slowest complete trial so far before it is stopped.
TIMEOUT_FACTOR = 4
MIN_TIMEOUT_S = 120


def runner_for(job: Job) -> str:
    """Which runner module trains this job: its kind's (the user's script, the framework-free MLP, or
    Hugging Face; engine.runner_module finds its module from the name)."""
    return kind_of(job).name


@dataclass(frozen=True)
class Specs:
    """What every spec of one tune is built from: the job, the step budget, the run folder's shared
    inputs, a script's adapter and where it was started, and the faults a test injects per trial."""

    job: Job
    steps: StepBudget
    folder: RunFolder
    script: Any = None
    cwd: Path | None = None
    inject: Mapping[int, str] = field(default_factory=dict)

    def spec(self, kind: str, knobs: Knobs, trial: int, peaks: Mapping[str, Any], ceiling: bool = False,
             peak_cache: JsonObject | None = None, workdir: Path | None = None) -> JsonObject:
        """The spec of one run of `knobs` (a "frame" or a "trial"): the one place a spec is built
        (messages.TrialSpec is its form; the executor checks it as it writes it). The fields every
        runner reads are made here, the rest by the job's kind (`Kind.spec_fields`).

        `peaks`: the device's measured peaks (the frame's); `peak_cache` (the frame only): peaks measured
        before on this device; `workdir` (a script's trial): the folder its mirror of the user's tree goes in."""
        job, folder = self.job, self.folder
        own = kind_of(job).spec_fields(SpecInputs(
            job=job, knobs=knobs, measure_steps=self.steps.measure_steps, rows_path=folder.rows,
            model_config_path=folder.model_config, runs_path=folder.path.parent, script=self.script,
            cwd=self.cwd, workdir=workdir))
        return {
            "schema_version": 1, "kind": kind, "runner": runner_for(job), "job": job.to_dict(), "knobs": knobs.to_dict(),
            "measure_steps": self.steps.measure_steps, "warmup_max": self.steps.warmup_max, "ceiling": ceiling,
            "inject_fault": self.inject.get(trial) if kind == "trial" else None, "peaks": dict(peaks),
            **({"peak_cache": peak_cache} if peak_cache is not None else {}), **own,
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


def baseline_budget_hint(job: Job, results: Sequence[RunResult]) -> str:
    """How to get past a time budget that ended inside the baseline: the time its repeats need here."""
    if job.time_budget_s is None or not any(r.state == "timeout" for r in results):
        return ""
    runs = [r.wall_s for r in results if r.state == "complete"] or [job.time_budget_s]
    need = max(runs) * (len(results) + 2)  # the repeats, then room for one trial's two runs
    minutes = max(1, -(-int(need) // 60))
    return (f"; the baseline's {len(results)} runs and one trial need about {minutes} minutes on this machine "
            f"now: give time={minutes}m or more")
