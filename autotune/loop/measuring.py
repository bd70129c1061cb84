"""Measuring for the loop: one run of a config in a fresh child process, and the interleaved
(candidate, incumbent) pairs added to a comparison that the first two pairs leave undecided.

Plain functions on the tuner, whose state's counters (runs, slowest and typical wall times, whether
the time budget is spent, where the latest run ran: loop/state.py) they update.
"""

from __future__ import annotations

from typing import Any

from . import trial_spec, verdict as decide
from ..config.knobs import Knobs
from .outcome import Incumbent
from ..probes import stats
from ..reasoner import Hypothesis


def measure(tuner: Any, knobs: Knobs, trial: int, label: str, ceiling: bool = False) -> dict[str, Any]:
    """One run of `knobs` in a fresh child process (with the worst-case batch when `ceiling`)."""
    state = tuner.state
    state.runs += 1
    if tuner.display:
        tuner.display.running(trial, label)
    timeout, by_budget = trial_spec.timeout(tuner.job, state.started, state.slowest_s)
    trial_dir = tuner.folder.trial_dir(f"{trial:03d}-{state.runs:03d}")
    result = tuner.executor.run(trial_spec.spec(tuner, "trial", knobs, trial, ceiling, workdir=trial_dir / "work"),
                                trial_dir, timeout)
    if result["state"] == "invalid" and result.get("remeasure"):
        # The GPU slowed itself (thermal, power brake): that window measured the cooling. Once more.
        again = tuner.folder.trial_dir(f"{trial:03d}-{state.runs:03d}-again")
        result = tuner.executor.run(trial_spec.spec(tuner, "trial", knobs, trial, ceiling, workdir=again / "work"),
                                    again, timeout)
    state.placement = result.get("placement", state.placement)
    if result["state"] == "complete" and result.get("placement"):
        result["measurement"]["placement"] = result["placement"]  # which card: comparisons stay on one
    if result["state"] == "timeout" and by_budget:
        result["reason"] = f"stopped at the end of the time budget ({tuner.job.time_budget_s}s)"
        state.budget_spent = True
    if result["state"] == "complete":
        state.slowest_s = max(state.slowest_s, result["wall_s"])
        state.walls.append(result["wall_s"])
    done: dict[str, Any] = result
    return done


def more_pairs(tuner: Any, trial: int, hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
               results: list[dict[str, Any]], fresh: list[dict[str, Any]], floor: float,
               verdict: stats.Comparison) -> stats.Comparison:
    """More interleaved (candidate, incumbent) pairs while the pairs so far leave it open and more
    could close it (`verdict.could_close`). A change that looks like noise costs no more runs, and at
    most `extra_pairs` (more on a noisy machine: `verdict.most_pairs`); the sequential rule decides only at its looks, each at its share of the
    false-keep rate, so waiting for a lucky draw cannot turn noise into a gain (`python -m
    bench.extra_pairs`: whole simulated tunes, false keeps and false discards per noise level, both rules)."""
    steps = tuner.steps
    added = 0
    extra = decide.most_pairs(steps, tuner.state.records) - 2  # set from earlier trials, before this one's runs
    # With a time budget, extra pairs take at most a quarter of the time left: room for four times
    # the extra runs so far and the next pair (one trial must not spend what the others need).
    while verdict.verdict == "no difference" and added < extra \
            and tuner._room_for(8 * (added + 1)):
        if not decide.could_close(steps, tuner.state.records, verdict, fresh, results, extra - added):
            break  # even the most pairs allowed would leave the interval inside the floor
        added += 1
        total = 2 + added
        candidate = tuner.measure(knobs, trial, f"{hypothesis.change} ({total}/{total}, undecided)")
        if candidate["state"] != "complete":
            results.append(candidate)  # the trial ends in its state: an undecided change is not kept
            break
        again = tuner.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent ({total}/{total})")
        if again["state"] != "complete":
            break  # decided on the pairs it has, as when a confirmation's incumbent run fails
        results.append(candidate)
        fresh.append(again)
        incumbent.add(again["measurement"])
        verdict = interleaved(tuner, fresh, results, floor)
    return verdict


def interleaved(tuner: Any, incumbent_runs: list[dict[str, Any]], candidate_runs: list[dict[str, Any]],
                floor: float) -> stats.Comparison:
    """`verdict.interleaved` on the tuner's records, its last look when the budget has no room for
    another pair."""
    return decide.interleaved(tuner.steps, tuner.state.records, incumbent_runs, candidate_runs, tuner.job.effective_batch,
                              floor, last=not tuner._room_for(8 * (len(candidate_runs) - 1)))


def second_look(tuner: Any, results: list[dict[str, Any]], reference: list[list[float]],
                incumbent: Incumbent) -> stats.Comparison | None:
    """The look after a trial's second run against the incumbent's runs so far (verdict.second_look),
    None where it has no share or a run did not complete."""
    if any(r["state"] != "complete" for r in results):
        return None
    return decide.second_look(tuner.steps, tuner.state.records, reference, [r["measurement"] for r in results],
                              tuner.job.effective_batch, incumbent.trial, decide.min_gain(tuner.job))
