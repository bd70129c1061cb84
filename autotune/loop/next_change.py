"""What the loop tries next, beyond the ranked single changes, and when it may stop.

Pure: from the ranked hypotheses, the trials so far and the beliefs, the hypotheses to try in order,
or why there is nothing left worth a trial. In order:
1. the ranked single changes, less those refuted here (reasoner.links: a change that lost beyond the
   noise on an incumbent differing only in knobs unlinked to it) and those this run measured and did
   not keep, where the measurement rules out the gain the beliefs expect or lost by more than a
   linked knob has been seen to turn around (links.tried_here: left to 3), and after a combined
   change was kept, each of its parts undone alone first;
2. when those are spent: the changes that each measured faster within the noise, pooled;
3. then a model of every trial (reasoner.surrogate) over every config one or two changes away:
   interacting pairs, changes that lost on an incumbent since changed in a knob they interact with.
   Its best proposal is tried while its expected improvement clears the noise floor;
4. below it, once: the two best changes the noise left undecided on this incumbent, together (the
   model's additive view of them is what it is least sure of); then the loop stops and says so.
Every proposal passes `allowed` (the user's `only=`, the frame's limits, the script's settings).
Before all of these, right after a warm start was kept: `warm_check`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from ..kb.features import FeatureView
from ..config.types import Device
from ..kb.claims import Claim
from ..config.records import RecordLike, Source, typed
from ..config.knobs import Knobs
from ..reasoner import Hypothesis, key, pooled
from ..reasoner.links import WARM, combined_kept, incumbents, reverts, undecided_pair, unrefuted, untried_here
from ..reasoner.surrogate import proposals

Allowed = Callable[[list[Hypothesis], list[tuple[str, str]]], tuple[list[Hypothesis], list[tuple[str, str]]]]


def next_hypotheses(incumbent: Knobs, ranked: list[Hypothesis], records: Sequence[RecordLike], device: Device,
                    effective_batch: int, measured: set[tuple[Any, ...]], claims: Iterable[Claim], features: FeatureView,
                    floor: float, allowed: Allowed, skipped: list[tuple[str, str]]) -> tuple[list[Hypothesis], str | None]:
    """The hypotheses to try, best first, and (when there are none) why the search stops."""
    claims, records = list(claims), typed(records)   # read once, typed, by every rule below
    undo = allowed(reverts(incumbent, records, measured, device, effective_batch, claims, features), [])[0]
    singles = [h for h in unrefuted(ranked, incumbent, records, claims, skipped) if h.change not in {u.change for u in undo}]
    singles = untried_here(singles, incumbent, records, skipped)
    hypotheses = _with_undo(undo, singles, records)
    if hypotheses:
        return hypotheses, None
    combined = pooled(incumbent, records, device, effective_batch, measured)
    if combined is not None:
        hypotheses = allowed([combined], skipped)[0]
        if hypotheses:
            return hypotheses, None
    proposed = allowed(proposals(incumbent, records, device, effective_batch, measured, claims, features), [])[0]
    proposed = unrefuted(proposed, incumbent, records, claims, [])
    threshold = math.log1p(floor)
    if proposed and proposed[0].score >= threshold:
        return [proposed[0]], None
    last = _undecided(incumbent, records, device, effective_batch, measured, allowed)
    if last is not None:
        return [last], None
    if not proposed:
        return [], "every applicable change and every pair of changes was tried"
    best = proposed[0]
    return [], (f"the best proposal left ({best.change}) expects an improvement of x{math.exp(best.score):.4f}, "
                f"below the {floor:.2%} noise floor")


def _with_undo(undo: list[Hypothesis], singles: list[Hypothesis], records: Sequence[RecordLike]) -> list[Hypothesis]:
    """The undo trials of a kept combined change, placed among the single changes. A pooled change's
    parts each measured faster here, within the noise: they are checked first. A warm start's parts
    were never measured on this job, but its whole measured faster than the user's config beyond the
    noise: each part is presumed to help here, and undoing it waits until the single changes on top
    are spent, unless the beliefs say the undo helps here (links.undo_score: P(helps) over a half,
    padding_free where rows are all one length); then it is ranked among them by its score."""
    found = combined_kept(records)
    if not undo or found is None or found[1].source not in WARM:
        return undo + singles
    believed = [h for h in undo if h.p_helps > 0.5]
    ranked = sorted(believed + singles, key=lambda h: -h.score)  # stable: ties keep the ranking's order
    return ranked + [h for h in undo if h not in believed]


def _undecided(incumbent: Knobs, records: Sequence[RecordLike], device: Device, effective_batch: int,
               measured: set[tuple[Any, ...]], allowed: Allowed) -> Hypothesis | None:
    """Before stopping: the two best changes the noise left undecided on this incumbent, together."""
    found = undecided_pair(incumbent, records, device, effective_batch, measured)
    if found is None:
        return None
    ((knob, value), *rest), ratios = found
    shown = " and ".join(f"x{r:.3f}" for r in ratios)
    hypothesis = Hypothesis(knob, value, f"the two best changes the noise left undecided here ({shown}, each "
                            "interval holding 1), together: one trial before stopping", p_helps=0.5,
                            expected_ratio=ratios[0] * ratios[1], also=tuple(rest), source=Source.POOLED)
    return next(iter(allowed([hypothesis], [])[0]), None)


def warm_check(incumbent: Knobs, start: Knobs, records: Sequence[RecordLike], measured: set[tuple[Any, ...]],
               first: Callable[[], Hypothesis | None]) -> Hypothesis | None:
    """While the incumbent is a kept warm start: the config the cold search would have tried first (`first`:
    the ranking's best change on the user's config), as one change against it. A warm start is another
    job's best config; this job's own first step may beat it (rows of one length gain nothing from the
    padding another job's data needed, and a larger micro-batch may be what this one wants), and no
    change on top of the warm start can reach it when it undoes several of the warm start's knobs."""
    trials = typed(records)
    kept = [record for _, record in incumbents(trials) if record.decision == "keep"]
    # Once, in the trial right after the warm start: a check that lost leaves the warm start to the rest.
    if len(kept) != 1 or kept[0] is not trials[-1] or kept[0].source != Source.WARM_START:
        return None
    cold = first()
    if cold is None:
        return None
    # The check is a trial only where the cold first step could beat the warm start: when the warm
    # start already measured more over the user's config than the beliefs expect of that step even if
    # it helps, the check is expected to lose and the trial goes to what could improve the warm start.
    if (kept[0].ratio or 0.0) >= cold.expected_ratio:
        return None
    target = cold.apply(start)
    changes = [(knob, value) for knob, (_, value) in incumbent.diff(target).items()]
    if not changes or key(target) in measured:
        return None
    (knob, value), *rest = changes
    return Hypothesis(knob, value, f"warm-start check: the config a cold search tries first ({cold.change} on your "
                      "config) against the warm start, another job's best", p_helps=cold.p_helps,
                      expected_ratio=cold.expected_ratio, also=tuple(rest), source=Source.WARM_CHECK)
