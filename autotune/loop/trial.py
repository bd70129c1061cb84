"""One trial: a change measured against the incumbent and decided, written nowhere.

Screen on one run, then interleave (incumbent, candidate) in fresh processes and keep the change only
when the interval on the ratio clears the noise floor, parity holds and the worst case fits. A plain
function of the trial's inputs: it measures through its own Meter (a copy of the loop's run counters)
and on its own copy of the incumbent, and returns both in the Trial; `Tuner.tell` writes the record and
takes them into the loop's state.
"""

from __future__ import annotations

import copy
from typing import Sequence

from . import judge
from ..config.measurement import Decision, Parity
from ..config.messages import RunResult
from ..config.records import TrialRecord
from ..config.types import JsonObject
from .limits import cannot_apply_here
from .measuring import Meter, interleaved, measured, more_pairs, second_look
from .outcome import Incumbent
from ..probes import stats
from ..reasoner import Hypothesis
from .recording import Trial, record
from .trial_spec import StepBudget


def run_trial(meter: Meter, steps: StepBudget, records: Sequence[TrialRecord], trial: int,
              hypothesis: Hypothesis, incumbent: Incumbent, floor: float) -> Trial:
    """Trial `trial`: `hypothesis` on `incumbent` (left as it is), with the tune's `records` so far (the
    baseline's first measurement is every parity check's reference) and the A/A noise `floor`."""
    job = meter.job
    base = records[0].measurements[0]
    incumbent = copy.deepcopy(incumbent)  # the trial's own: its incumbent runs join it (Trial.incumbent)
    knobs = hypothesis.apply(incumbent.knobs)
    results = [meter.measure(knobs, trial, f"{hypothesis.change} (1/2)", hypothesis.affects_memory)]
    first = results[0]
    verdict: stats.Comparison | None = None
    parity_result: Parity | None = None

    def finish(decision: str, reason: str, state: str = "complete", limit: JsonObject | None = None) -> Trial:
        runs = measured([r for r in results if r.state == "complete"])
        judged = Decision(decision, reason, incumbent_samples_per_s=incumbent.speed, noise_floor=floor,
                          parity=parity_result)
        if verdict:
            judged = Decision(decision, reason, verdict.ratio, (verdict.low, verdict.high), verdict.confidence,
                              floor, incumbent.speed, parity_result)
        entry = record(job.run, trial, hypothesis.change, knobs, state, judged, runs,
                       wall=sum(r.wall_s for r in results), placement=meter.counts.take_placement(),
                       stderr=first.stderr_tail, ceiling=runs[0].ceiling if runs else None)
        return Trial(entry, hypothesis, incumbent, knobs, runs, meter.counts, limit)

    if first.state != "complete":
        return finish("discard", first.reason, first.state, cannot_apply_here(hypothesis, first))
    measurement = first.measured()
    parity_result = judge.parity_check(base, measurement, incumbent, knobs, job.start, records, job.strict_parity)
    if not parity_result.ok:
        return finish("discard", parity_result.reason)
    # Interleaved in fresh processes, B A B A: drift of the machine hits both sides alike, and the
    # verdict uses only this trial's incumbent runs (older ones would turn drift into a gain). The
    # screen compares with the incumbent's runs on the candidate's card only; on a card with none yet
    # (trials in parallel), the incumbent's first paired run comes before the screen and is its reference.
    fresh: list[RunResult] = []
    reference = incumbent.runs_on(measurement.placement)
    earlier = incumbent.samples_on(measurement.placement)  # the pair looks' (keep_rule.incumbent_side)
    if not reference:
        fresh.append(meter.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent (1/2)"))
        reference = [list(m.step_times_s) for m in measured([r for r in fresh if r.state == "complete"])]
    if reference:
        verdict = judge.screen(steps, records, reference, measurement, job.effective_batch,
                                floor, incumbent.trial, judge.min_gain(job))
        screened, kept = judge.screened_out(steps, verdict), judge.decided_on_one_run(steps, verdict)
        if screened or kept:
            for result in fresh:
                if result.state == "complete":
                    incumbent.add(result.measured())  # a reference on this card for the next trials
        if screened:
            return finish("discard", f"not faster after one run: {verdict.reason}")
        if kept:
            return finish("keep", f"{verdict.reason}; {parity_result.reason}{judge.fits(measurement)}{judge.work_note(results)}")
    if not fresh and steps.keep_rule.looks_at_second_run:
        # The second run first: against the incumbent's runs so far it may decide (keep_rule.reuse_look).
        results.append(meter.measure(knobs, trial, f"{hypothesis.change} (2/2)"))
        look = second_look(steps, records, job, results, reference, incumbent)
        if look is not None and look.verdict != "no difference":
            verdict = look
            if look.verdict == "faster":
                return finish("keep", f"{look.reason}; {parity_result.reason}{judge.fits(measurement)}{judge.work_note(results)}")
            return finish("discard", f"not faster after two runs: {look.reason}")
    second = results[-1] if len(results) > 1 else None
    if second is not None and second.state != "complete":
        return finish("discard", f"the confirmation run ended {second.state}: {second.reason}", second.state)
    if not fresh:
        fresh.append(meter.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent (1/2)"))
    if second is None:
        results.append(meter.measure(knobs, trial, f"{hypothesis.change} (2/2)"))
    fresh.append(meter.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent (2/2)"))
    fresh = [r for r in fresh if r.state == "complete"]
    for result in fresh:
        incumbent.add(result.measured())
    second = results[1]
    if second.state != "complete":
        return finish("discard", f"the confirmation run ended {second.state}: {second.reason}", second.state)
    if not fresh:
        return finish("discard", "the incumbent could not be measured again beside the candidate")
    verdict = interleaved(meter, steps, records, fresh, results, floor, earlier, incumbent.trial)
    verdict = more_pairs(meter, steps, records, trial, hypothesis, incumbent, knobs, results, fresh, floor, verdict,
                         earlier)
    failed = results[-1]
    if failed.state != "complete":
        return finish("discard", f"an extra run ended {failed.state}: {failed.reason}", failed.state)
    if verdict.verdict != "faster":
        return finish("discard", verdict.reason)
    return finish("keep", f"{verdict.reason}; {parity_result.reason}{judge.fits(measurement)}{judge.work_note(results)}")
