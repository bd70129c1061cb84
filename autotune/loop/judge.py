"""Pure decisions on one trial's runs: the screen, the verdict on interleaved pairs, whether more pairs
could decide it, the smallest gain worth a trial, and parity with the baseline's losses.

Each asks the step budget's keep rule (keep_rule.KeepRule): the loop's is keep_rule.Sequential, over
probes.sequential and the run-to-run spread pooled from the tune's records; bench/floor_rule.py holds
the rule before it, which `python -m bench.extra_pairs` compares with it.
"""

from __future__ import annotations

from typing import Sequence

from . import keep_rule
from ..config.job import Job
from ..config.knobs import CATALOG, NUMERICS, Knobs, numerics_changes
from ..config.measurement import Measurement, Parity
from ..config.messages import RunResult
from ..config.records import TrialRecord
from .outcome import Incumbent
from ..probes import parity, row_parity, stats
from .trial_spec import StepBudget


def interleaved(steps: StepBudget, records: Sequence[TrialRecord], incumbent_runs: Sequence[Measurement],
                candidate_runs: Sequence[Measurement], batch: int, floor: float, last: bool,
                earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> stats.Comparison:
    """The verdict on one trial's interleaved runs. `last`: the time budget allows no further pair.
    `earlier`: the incumbent's samples/s before this trial (from trial `incumbent_trial` on), which the
    sequential rule counts while a drift check on this trial's runs holds (keep_rule.incumbent_side)."""
    return steps.keep_rule.compare(records, incumbent_runs, candidate_runs, batch, floor, most_pairs(steps, records),
                                   last, earlier, incumbent_trial)


def stop_floor(steps: StepBudget, records: Sequence[TrialRecord], floor: float) -> float:
    """The smallest gain the keep rule can show: a proposal expected to gain less is not tried."""
    return steps.keep_rule.smallest_gain(records, most_pairs(steps, records), floor)


def most_pairs(steps: StepBudget, records: Sequence[TrialRecord]) -> int:
    """The most interleaved pairs a trial may take: the step budget's, more on a noisy machine under
    the sequential rule (keep_rule.most_pairs), where sixteen pairs cannot show a 5% gain."""
    return steps.keep_rule.most_pairs(records, 2 + steps.extra_pairs)


def could_close(steps: StepBudget, records: Sequence[TrialRecord], verdict: stats.Comparison,
                fresh: Sequence[Measurement], results: Sequence[Measurement], left: int,
                earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> bool:
    """Whether `left` more pairs could decide what the pairs so far leave open."""
    return steps.keep_rule.could_close(records, verdict, fresh, results, left, most_pairs(steps, records),
                                       earlier, incumbent_trial)


def screen(steps: StepBudget, records: Sequence[TrialRecord], reference: list[list[float]],
           measurement: Measurement, batch: int, floor: float, incumbent_trial: int | None = None,
           min_gain: float = keep_rule.MIN_GAIN) -> stats.Comparison:
    """One candidate run against the incumbent's runs on its card (from trial `incumbent_trial`): under
    the sequential rule a look of its own, which may keep a gain far beyond the noise (keep_rule.reuse_look)."""
    return steps.keep_rule.screen(records, reference, measurement, batch, floor, incumbent_trial,
                                  most_pairs(steps, records), min_gain)


def second_look(steps: StepBudget, records: Sequence[TrialRecord], reference: list[list[float]],
                candidate: Sequence[Measurement], batch: int, incumbent_trial: int, min_gain: float) -> stats.Comparison | None:
    """The rule's look after a trial's second run, against the incumbent's runs so far (None where the
    rule takes none; where the spread so far leaves it no share of the false-keep rate, it only discards)."""
    if not reference:
        return None
    return steps.keep_rule.second_look(records, reference, candidate, batch, incumbent_trial,
                                       most_pairs(steps, records), min_gain)


def decided_on_one_run(steps: StepBudget, verdict: stats.Comparison) -> bool:
    """Whether the first run alone shows the candidate faster (the sequential rule's first look)."""
    return steps.keep_rule.kept_on_one_run(verdict)


def screened_out(steps: StepBudget, verdict: stats.Comparison) -> bool:
    """Whether one run already says the candidate is not worth confirming."""
    return steps.keep_rule.screened_out(verdict)


def fits(measurement: Measurement) -> str:
    """A kept change's note on its worst-case batch, where its first run measured one."""
    ceiling = measurement.ceiling
    if not ceiling:
        # A script whose batches never reached its model at max_len: said, not passed over in silence.
        unchecked = measurement.ceiling_unchecked
        return f"; worst-case batch not checked: {unchecked}" if unchecked else ""
    return f"; worst-case batch fits ({ceiling.bytes / 2**30:.2f} of {ceiling.limit_bytes / 2**30:.2f} GiB)"


def work_note(runs: Sequence[RunResult]) -> str:
    """What a kept change's note says where its runs trained other rows than the baseline's."""
    factors = [r.measurement.work_factor for r in runs if r.measurement is not None]
    seen = [f for f in factors if f is not None]
    if not seen:
        return ""
    return (f"; its measured steps trained other rows than the baseline's (x{min(seen):.2f}-x{max(seen):.2f} the "
            "real tokens): compared per real token, at the baseline's work")


def min_gain(job: Job) -> float:
    """The gain worth a trial's device time (the job's `min_gain`): one that cannot reach it stops being measured."""
    return getattr(job, "min_gain", keep_rule.MIN_GAIN)


def parity_check(base: Measurement, measurement: Measurement, incumbent: Incumbent, knobs: Knobs,
                 start: Knobs, records: Sequence[TrialRecord], strict: bool = False) -> Parity:
    """Per-row losses against the baseline's; a change the user allowed to alter what is trained (an
    image resolution cap) is exempt, and once one is kept, later changes are held to its losses. A script's
    rows are matched by content (probes/row_parity.py); `strict`: another weighting is refused too."""
    if base.parity_losses is None or measurement.parity_losses is None:
        return Parity.from_dict({"ok": True, "checked": False, "worst": None, "tolerance": None,
                                 "reason": measurement.parity_note or base.parity_note
                                 or "parity not checked: the script's per-row losses are out of reach"})
    retrained = [name for name in knobs.diff(incumbent.knobs) if CATALOG[name].changes_training]
    if retrained:
        return Parity.from_dict({"ok": True, "checked": False, "worst": None, "tolerance": None,
                                 "reason": f"parity not required: you allowed {', '.join(retrained)} to change "
                                           "what is trained, so its losses differ by design"})
    reference, reference_knobs = base, start
    if any(CATALOG[name].changes_training for name in incumbent.knobs.diff(start)):
        kept = next(r for r in reversed(records) if r.trial == incumbent.trial)
        reference, reference_knobs = kept.measurements[-1], incumbent.knobs
    tolerance = parity.tolerance(reference_knobs.precision, knobs.precision)
    # A numerics-changing setting the user allowed is held to its own, looser tolerance, stated with its
    # reason; only one the reference's losses were made without: a QLoRA start keeps precision's tolerance.
    already = set(numerics_changes(reference_knobs))
    looser = [(NUMERICS[change], change) for change in numerics_changes(knobs) if change not in already]
    tol = max([tolerance] + [tol for (tol, _), _ in looser])
    if reference.parity_rows and measurement.parity_rows:
        # The reference's repeated runs (the baseline's, where it is the reference) give the statistical
        # check its spread when the script draws other rows.
        runs = records[0].measurements[1:] if reference is base and records else ()
        baselines = [reference.parity_rows] + [m.parity_rows for m in runs if m.parity_rows]
        result = Parity.from_dict(row_parity.compare(baselines, measurement.parity_rows, tol, strict))
    else:
        assert reference.parity_losses is not None  # the reference of a check is a run that read its losses
        result = Parity.from_dict(parity.compare(reference.parity_losses, measurement.parity_losses, tol))
    if looser:
        result = result.noted("; " + "; ".join(f"{name}={value}: tolerance {tol:.0e}, as {why}"
                                               for (tol, why), (name, value) in looser))
    return result
