"""Pure decisions on one trial's runs: the screen, the verdict on interleaved pairs, whether more pairs
could decide it, the smallest gain worth a trial, and parity with the baseline's losses.

Each follows the step budget's keep rule: "sequential" (autotune/loop/keep_rule.py over probes.sequential,
the run-to-run spread pooled from the tune's records) or "floor" (probes.stats: a bootstrap interval
that must clear the baseline's A/A floor).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from . import keep_rule
from ..config.knobs import CATALOG, NUMERICS, Knobs, numerics_changes
from .outcome import Incumbent
from ..probes import parity, row_parity, stats
from .trial_spec import StepBudget


def interleaved(steps: StepBudget, records: Sequence[dict[str, Any]], incumbent_runs: list[dict[str, Any]],
                candidate_runs: list[dict[str, Any]], batch: int, floor: float, last: bool,
                earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> stats.Comparison:
    """The verdict on one trial's interleaved runs. `last`: the time budget allows no further pair.
    The floor rule takes this trial's incumbent runs only (older ones would turn the machine's drift
    into a gain); the sequential rule counts the incumbent's `earlier` samples/s (from trial
    `incumbent_trial` on) too, while a drift check on this trial's runs holds (keep_rule.incumbent_side)."""
    if steps.keep_rule == "sequential":
        # The look after which the time budget allows no further pair spends the looks left.
        return keep_rule.verdict(records, [r["measurement"] for r in incumbent_runs],
                                 [r["measurement"] for r in candidate_runs], most_pairs(steps, records), last=last,
                                 earlier=earlier, skip=incumbent_trial)
    return stats.compare([r["measurement"]["step_times_s"] for r in incumbent_runs],
                         [r["measurement"]["step_times_s"] for r in candidate_runs], batch, floor)


def stop_floor(steps: StepBudget, records: Sequence[dict[str, Any]], floor: float) -> float:
    """The smallest gain the keep rule can show: a proposal expected to gain less is not tried."""
    if steps.keep_rule == "sequential":
        return keep_rule.detectable(records, most_pairs(steps, records))
    return floor


def most_pairs(steps: StepBudget, records: Sequence[dict[str, Any]]) -> int:
    """The most interleaved pairs a trial may take: the step budget's, more on a noisy machine under
    the sequential rule (keep_rule.most_pairs), where sixteen pairs cannot show a 5% gain."""
    least = 2 + steps.extra_pairs
    return keep_rule.most_pairs(records, least) if steps.keep_rule == "sequential" else least


def could_close(steps: StepBudget, records: Sequence[dict[str, Any]], verdict: stats.Comparison,
                fresh: list[dict[str, Any]], results: list[dict[str, Any]], left: int,
                earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> bool:
    """Whether `left` more pairs could make the interval clear the floor, were the ratio to hold."""
    if steps.keep_rule == "sequential":
        return keep_rule.could_close(records, [r["measurement"] for r in fresh], [r["measurement"] for r in results],
                                     left, most_pairs(steps, records), earlier, incumbent_trial)
    runs = min(len(results), len(fresh))
    narrowed = math.sqrt(runs / (runs + left))
    return verdict.ratio - (verdict.ratio - verdict.low) * narrowed > 1 + verdict.noise_floor


def screen(steps: StepBudget, records: Sequence[dict[str, Any]], reference: list[list[float]],
           measurement: dict[str, Any], batch: int, floor: float, incumbent_trial: int | None = None,
           min_gain: float = keep_rule.MIN_GAIN) -> stats.Comparison:
    """One candidate run against the incumbent's runs on its card (from trial `incumbent_trial`): under
    the sequential rule a look of its own, which may keep a gain far beyond the noise (keep_rule.first_look)."""
    if steps.keep_rule == "sequential":
        return keep_rule.reuse_look(records, reference, incumbent_trial, [measurement], batch,
                                    most_pairs(steps, records), min_gain)
    return stats.compare(reference, [measurement["step_times_s"]], batch, floor)


def second_look(steps: StepBudget, records: Sequence[dict[str, Any]], reference: list[list[float]],
                candidate: list[dict[str, Any]], batch: int, incumbent_trial: int, min_gain: float) -> stats.Comparison | None:
    """The sequential rule's look after a trial's second run, against the incumbent's runs so far (None
    under the floor rule). Where the spread so far leaves this look no share of the false-keep rate
    (a noisy machine, keep_rule.reusing) it only discards: a change slower, or futile, beyond the noise
    costs no pairs there either, and a discard adds no false keep."""
    if steps.keep_rule != "sequential" or not reference:
        return None
    return keep_rule.reuse_look(records, reference, incumbent_trial, candidate, batch, most_pairs(steps, records),
                                min_gain)


def decided_on_one_run(steps: StepBudget, verdict: stats.Comparison) -> bool:
    """Whether the first run alone shows the candidate faster (the sequential rule's first look)."""
    return steps.keep_rule == "sequential" and verdict.verdict == "faster"


def screened_out(steps: StepBudget, verdict: stats.Comparison) -> bool:
    """Whether one run already says the candidate is not worth confirming."""
    if steps.keep_rule == "sequential":
        return verdict.verdict == "slower"
    return verdict.ratio <= 1 or verdict.verdict == "slower"


def fits(measurement: dict[str, Any]) -> str:
    """A kept change's note on its worst-case batch, where its first run measured one."""
    ceiling = measurement.get("ceiling")
    if not ceiling:
        # A script whose batches never reached its model at max_len: said, not passed over in silence.
        unchecked = measurement.get("ceiling_unchecked")
        return f"; worst-case batch not checked: {unchecked}" if unchecked else ""
    return f"; worst-case batch fits ({ceiling['bytes'] / 2**30:.2f} of {ceiling['limit_bytes'] / 2**30:.2f} GiB)"


def min_gain(job: Any) -> float:
    """The gain worth a trial's device time (the job's `min_gain`): one that cannot reach it stops being measured."""
    return getattr(job, "min_gain", keep_rule.MIN_GAIN)


def parity_check(base: dict[str, Any], measurement: dict[str, Any], incumbent: Incumbent, knobs: Knobs,
                 start: Knobs, records: Sequence[dict[str, Any]], strict: bool = False) -> dict[str, Any]:
    """Per-row losses against the baseline's; a change the user allowed to alter what is trained (an
    image resolution cap) is exempt, and once one is kept, later changes are held to its losses. A script's
    rows are matched by content (probes/row_parity.py); `strict`: another weighting is refused too."""
    if base.get("parity_losses") is None or measurement.get("parity_losses") is None:
        return {"ok": True, "checked": False, "worst": None, "tolerance": None,
                "reason": measurement.get("parity_note") or base.get("parity_note")
                or "parity not checked: the script's per-row losses are out of reach"}
    retrained = [name for name in knobs.diff(incumbent.knobs) if CATALOG[name].changes_training]
    if retrained:
        return {"ok": True, "checked": False, "worst": None, "tolerance": None,
                "reason": f"parity not required: you allowed {', '.join(retrained)} to change what is "
                          "trained, so its losses differ by design"}
    reference, reference_knobs = base, start
    if any(CATALOG[name].changes_training for name in incumbent.knobs.diff(start)):
        kept = next(r for r in reversed(records) if r["trial"] == incumbent.trial)
        reference, reference_knobs = kept["measurements"][-1], incumbent.knobs
    tolerance = parity.tolerance(reference_knobs.precision, knobs.precision)
    # A numerics-changing setting the user allowed is held to its own, looser tolerance, stated with its
    # reason; only one the reference's losses were made without: a QLoRA start keeps precision's tolerance.
    already = set(numerics_changes(reference_knobs))
    looser = [(NUMERICS[change], change) for change in numerics_changes(knobs) if change not in already]
    tol = max([tolerance] + [tol for (tol, _), _ in looser])
    if reference.get("parity_rows") and measurement.get("parity_rows"):
        # The reference's repeated runs (the baseline's, where it is the reference) give the statistical
        # check its spread when the script draws other rows.
        runs = records[0]["measurements"][1:] if reference is base and records else []
        baselines = [reference["parity_rows"]] + [m["parity_rows"] for m in runs if m.get("parity_rows")]
        result = row_parity.compare(baselines, measurement["parity_rows"], tol, strict)
    else:
        result = parity.compare(reference["parity_losses"], measurement["parity_losses"], tol)
    if looser:
        result["reason"] += "; " + "; ".join(f"{name}={value}: tolerance {tol:.0e}, as {why}"
                                             for (tol, why), (name, value) in looser)
    return result
