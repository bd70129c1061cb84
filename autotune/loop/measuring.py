"""Measuring for the loop: one run of a config in a fresh child process (`Meter`), and the interleaved
(candidate, incumbent) pairs added to a comparison that the first two pairs leave undecided.

A Meter counts its runs in its own RunCounts (runs, slowest and typical wall times, whether the time
budget is spent, where the latest run ran: loop/state.py), a copy of the loop's: the trial that
measured hands them back with its record, and `Tuner.tell` takes them in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from . import judge, trial_spec
from ..config.job import Job
from ..config.knobs import Knobs
from ..config.measurement import Measurement
from ..config.messages import RunResult
from ..config.records import TrialRecord
from ..config.types import JsonObject
from ..executors.base import Executor
from .outcome import Incumbent
from ..probes import stats
from ..reasoner import Hypothesis
from .state import RunCounts
from .trial_spec import Specs, StepBudget


@dataclass
class Meter:
    """Runs configs through `executor` into the run folder's trial folders, counting them in `counts`."""

    executor: Executor
    specs: Specs
    peaks: JsonObject
    counts: RunCounts
    display: Any = None
    # A script's baseline window's real tokens: its trials are measured at that work (Measurement.at_work).
    work: int | None = None

    @property
    def job(self) -> Job:
        return self.specs.job

    def measure(self, knobs: Knobs, trial: int, label: str, ceiling: bool = False) -> RunResult:
        """One run of `knobs` in a fresh child process (with the worst-case batch when `ceiling`)."""
        counts, folder = self.counts, self.specs.folder
        counts.runs += 1
        if self.display:
            self.display.running(trial, label)
        timeout, by_budget = trial_spec.timeout(self.job, counts.started, counts.slowest_s)
        trial_dir = folder.trial_dir(f"{trial:03d}-{counts.runs:03d}")
        # Read unchecked: every executor checked what its child wrote (messages.read_result).
        result = RunResult.from_dict(self.executor.run(
            self.specs.spec("trial", knobs, trial, self.peaks, ceiling, workdir=trial_dir / "work"), trial_dir, timeout),
            check=False)
        if result.state == "invalid" and result.remeasure:
            # The GPU slowed itself (thermal, power brake): that window measured the cooling. Once more.
            again = folder.trial_dir(f"{trial:03d}-{counts.runs:03d}-again")
            result = RunResult.from_dict(self.executor.run(
                self.specs.spec("trial", knobs, trial, self.peaks, ceiling, workdir=again / "work"), again, timeout),
                check=False)
        if "placement" in result.details:
            counts.placement = result.placement
        if result.measurement is not None and result.state == "complete" and result.placement:
            # Which card: comparisons stay on one.
            result = replace(result, measurement=result.measurement.placed(result.placement))
        result = at_baseline_work(result, self.work, self.job.script is not None)
        if result.state == "timeout" and by_budget:
            result = replace(result, reason=f"stopped at the end of the time budget ({self.job.time_budget_s}s)")
            counts.budget_spent = True
        if result.state == "complete":
            counts.slowest_s = max(counts.slowest_s, result.wall_s)
            counts.walls.append(result.wall_s)
        return result

    def room_for(self, runs: int) -> bool:
        """Whether `runs` more measurements fit in the time budget (trial_spec.room_for)."""
        counts = self.counts
        return trial_spec.room_for(self.job, counts.started, counts.walls, counts.budget_spent, runs)


def at_baseline_work(result: RunResult, work: int | None, script: bool) -> RunResult:
    """A complete run of a user's script at the baseline window's work (`work`, its real tokens:
    Measurement.at_work). Only a script draws its own rows; the built-in runners measure the same rows
    in every trial, and an allowed image-size cap trains fewer tokens per row by design."""
    if not (script and work and result.state == "complete" and result.measurement is not None):
        return result
    scaled = result.measurement.at_work(work)
    return result if scaled is result.measurement else replace(result, measurement=scaled)


def more_pairs(meter: Meter, steps: StepBudget, records: Sequence[TrialRecord], trial: int, hypothesis: Hypothesis,
               incumbent: Incumbent, knobs: Knobs, results: list[RunResult], fresh: list[RunResult],
               floor: float, verdict: stats.Comparison, earlier: Sequence[float] = ()) -> stats.Comparison:
    """More interleaved (candidate, incumbent) pairs while the pairs so far leave it open and more
    could close it (`judge.could_close`). A change that looks like noise costs no more runs, and at
    most `extra_pairs` (more on a noisy machine: `judge.most_pairs`); the sequential rule decides only at its looks, each at its share of the
    false-keep rate, so waiting for a lucky draw cannot turn noise into a gain (`python -m
    bench.extra_pairs`: whole simulated tunes, false keeps and false discards per noise level, both rules).
    `earlier`: the incumbent's samples/s before this trial, which the sequential looks count while they
    agree with this trial's incumbent runs (keep_rule.incumbent_side)."""
    added = 0
    extra = judge.most_pairs(steps, records) - 2  # set from earlier trials, before this one's runs
    # With a time budget, extra pairs take at most a quarter of the time left: room for four times
    # the extra runs so far and the next pair (one trial must not spend what the others need).
    while verdict.verdict == "no difference" and added < extra and meter.room_for(8 * (added + 1)):
        if not judge.could_close(steps, records, verdict, measured(fresh), measured(results), extra - added, earlier,
                                 incumbent.trial):
            break  # even the most pairs allowed would leave the interval inside the floor
        added += 1
        total = 2 + added
        candidate = meter.measure(knobs, trial, f"{hypothesis.change} ({total}/{total}, undecided)")
        if candidate.state != "complete":
            results.append(candidate)  # the trial ends in its state: an undecided change is not kept
            break
        again = meter.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent ({total}/{total})")
        if again.state != "complete":
            break  # decided on the pairs it has, as when a confirmation's incumbent run fails
        results.append(candidate)
        fresh.append(again)
        incumbent.add(again.measured())
        verdict = interleaved(meter, steps, records, fresh, results, floor, earlier, incumbent.trial)
    return verdict


def measured(runs: Sequence[RunResult]) -> list[Measurement]:
    """The measurements of complete runs (a trial compares only those)."""
    return [run.measured() for run in runs]


def interleaved(meter: Meter, steps: StepBudget, records: Sequence[TrialRecord], incumbent_runs: list[RunResult],
                candidate_runs: list[RunResult], floor: float, earlier: Sequence[float] = (),
                incumbent_trial: int | None = None) -> stats.Comparison:
    """`judge.interleaved` on the records, its last look when the budget has no room for another pair."""
    return judge.interleaved(steps, records, measured(incumbent_runs), measured(candidate_runs),
                             meter.job.effective_batch, floor, not meter.room_for(8 * (len(candidate_runs) - 1)),
                             earlier, incumbent_trial)


def second_look(steps: StepBudget, records: Sequence[TrialRecord], job: Job, results: list[RunResult],
                reference: list[list[float]], incumbent: Incumbent) -> stats.Comparison | None:
    """The look after a trial's second run against the incumbent's runs so far (judge.second_look),
    None where the rule takes none or a run did not complete."""
    if any(r.state != "complete" for r in results):
        return None
    return judge.second_look(steps, records, reference, measured(results),
                             job.effective_batch, incumbent.trial, judge.min_gain(job))
