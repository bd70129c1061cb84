"""Measuring for the loop: one run of a config in a fresh child process (`Meter`), and the interleaved
(candidate, incumbent) pairs added to a comparison that the first two pairs leave undecided.

A Meter counts its runs in its own RunCounts (runs, slowest and typical wall times, whether the time
budget is spent, where the latest run ran: loop/state.py), a copy of the loop's: the trial that
measured hands them back with its record, and `Tuner.tell` takes them in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from . import trial_spec, verdict as decide
from ..config.job import Job
from ..config.knobs import Knobs
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
    peaks: dict[str, Any]
    counts: RunCounts
    display: Any = None

    @property
    def job(self) -> Job:
        return self.specs.job

    def measure(self, knobs: Knobs, trial: int, label: str, ceiling: bool = False) -> dict[str, Any]:
        """One run of `knobs` in a fresh child process (with the worst-case batch when `ceiling`)."""
        counts, folder = self.counts, self.specs.folder
        counts.runs += 1
        if self.display:
            self.display.running(trial, label)
        timeout, by_budget = trial_spec.timeout(self.job, counts.started, counts.slowest_s)
        trial_dir = folder.trial_dir(f"{trial:03d}-{counts.runs:03d}")
        result = self.executor.run(self.specs.spec("trial", knobs, trial, self.peaks, ceiling, workdir=trial_dir / "work"),
                                   trial_dir, timeout)
        if result["state"] == "invalid" and result.get("remeasure"):
            # The GPU slowed itself (thermal, power brake): that window measured the cooling. Once more.
            again = folder.trial_dir(f"{trial:03d}-{counts.runs:03d}-again")
            result = self.executor.run(self.specs.spec("trial", knobs, trial, self.peaks, ceiling, workdir=again / "work"),
                                       again, timeout)
        counts.placement = result.get("placement", counts.placement)
        if result["state"] == "complete" and result.get("placement"):
            result["measurement"]["placement"] = result["placement"]  # which card: comparisons stay on one
        if result["state"] == "timeout" and by_budget:
            result["reason"] = f"stopped at the end of the time budget ({self.job.time_budget_s}s)"
            counts.budget_spent = True
        if result["state"] == "complete":
            counts.slowest_s = max(counts.slowest_s, result["wall_s"])
            counts.walls.append(result["wall_s"])
        return result

    def room_for(self, runs: int) -> bool:
        """Whether `runs` more measurements fit in the time budget (trial_spec.room_for)."""
        counts = self.counts
        return trial_spec.room_for(self.job, counts.started, counts.walls, counts.budget_spent, runs)


def more_pairs(meter: Meter, steps: StepBudget, records: Sequence[dict[str, Any]], trial: int, hypothesis: Hypothesis,
               incumbent: Incumbent, knobs: Knobs, results: list[dict[str, Any]], fresh: list[dict[str, Any]],
               floor: float, verdict: stats.Comparison, earlier: Sequence[float] = ()) -> stats.Comparison:
    """More interleaved (candidate, incumbent) pairs while the pairs so far leave it open and more
    could close it (`verdict.could_close`). A change that looks like noise costs no more runs, and at
    most `extra_pairs` (more on a noisy machine: `verdict.most_pairs`); the sequential rule decides only at its looks, each at its share of the
    false-keep rate, so waiting for a lucky draw cannot turn noise into a gain (`python -m
    bench.extra_pairs`: whole simulated tunes, false keeps and false discards per noise level, both rules).
    `earlier`: the incumbent's samples/s before this trial, which the sequential looks count while they
    agree with this trial's incumbent runs (keep_rule.incumbent_side)."""
    added = 0
    extra = decide.most_pairs(steps, records) - 2  # set from earlier trials, before this one's runs
    # With a time budget, extra pairs take at most a quarter of the time left: room for four times
    # the extra runs so far and the next pair (one trial must not spend what the others need).
    while verdict.verdict == "no difference" and added < extra and meter.room_for(8 * (added + 1)):
        if not decide.could_close(steps, records, verdict, fresh, results, extra - added, earlier, incumbent.trial):
            break  # even the most pairs allowed would leave the interval inside the floor
        added += 1
        total = 2 + added
        candidate = meter.measure(knobs, trial, f"{hypothesis.change} ({total}/{total}, undecided)")
        if candidate["state"] != "complete":
            results.append(candidate)  # the trial ends in its state: an undecided change is not kept
            break
        again = meter.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent ({total}/{total})")
        if again["state"] != "complete":
            break  # decided on the pairs it has, as when a confirmation's incumbent run fails
        results.append(candidate)
        fresh.append(again)
        incumbent.add(again["measurement"])
        verdict = interleaved(meter, steps, records, fresh, results, floor, earlier, incumbent.trial)
    return verdict


def interleaved(meter: Meter, steps: StepBudget, records: Sequence[dict[str, Any]], incumbent_runs: list[dict[str, Any]],
                candidate_runs: list[dict[str, Any]], floor: float, earlier: Sequence[float] = (),
                incumbent_trial: int | None = None) -> stats.Comparison:
    """`verdict.interleaved` on the records, its last look when the budget has no room for another pair."""
    return decide.interleaved(steps, records, incumbent_runs, candidate_runs, meter.job.effective_batch,
                              floor, last=not meter.room_for(8 * (len(candidate_runs) - 1)), earlier=earlier,
                              incumbent_trial=incumbent_trial)


def second_look(steps: StepBudget, records: Sequence[dict[str, Any]], job: Job, results: list[dict[str, Any]],
                reference: list[list[float]], incumbent: Incumbent) -> stats.Comparison | None:
    """The look after a trial's second run against the incumbent's runs so far (verdict.second_look),
    None where it has no share or a run did not complete."""
    if any(r["state"] != "complete" for r in results):
        return None
    return decide.second_look(steps, records, reference, [r["measurement"] for r in results],
                              job.effective_batch, incumbent.trial, decide.min_gain(job))
