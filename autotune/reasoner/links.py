"""Which knobs a change's effect depends on, and what the trials so far refute.

A change measured on one incumbent says something about it on another only where the two differ in
knobs that do not touch its effect. Two sources say which knobs do:
- the knob table's `interacts` (config/knobs/table.py): pairs whose effects are known to depend on each other (the cost of an
  attention kernel depends on how much padding it computes and on the batch; a larger micro-batch pads more, fits
  only with checkpointing, changes what compile traces, and moves the optimizer's share of a step);
- the beliefs: a claim about the change whose condition reads another knob (`padding == longest`),
  or one that relates the two (`enables`, `conflicts`).

A change that lost by more than the noise on an incumbent is refuted on every incumbent that differs
from that one only in knobs unlinked to it: it is not tried again there (no trial spent on what is
known). It is re-tried once an incumbent differs in a linked knob: the loss may not hold there.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from ..kb.features import FeatureView
from ..config.types import Device
from ..kb.claims import Claim
from ..config.knobs import CATALOG_ORDER, INTERACTIONS, Knobs, not_applicable
from ..config.records import RecordLike, Source, TrialRecord, typed
from .combine import repaired
from .rank import (EXPLORATION, UNKNOWN_RATIO, UNKNOWN_UNCERTAINTY, Hypothesis, _cost, _enabling,
                   _weight, key)

# INTERACTIONS: pairs whose effects depend on each other, from each knob's `interacts` in the table.

# Feature names that are knobs (kb.features.knob_features renames the micro-batch).
_FEATURE_KNOB = {"micro_batch": "per_device_train_batch_size"}


def linked(knob: str, claims: Iterable[Claim] = ()) -> set[str]:
    """The knobs whose value may change the effect of changing `knob` (the knob itself included)."""
    found = {knob} | {other for pair in INTERACTIONS if knob in pair for other in pair}
    knobs = set(Knobs().to_dict())
    for claim in claims:
        if not claim.active:
            continue
        read = {_FEATURE_KNOB.get(c.feature, c.feature) for c in claim.condition} & knobs
        related = {change.partition("=")[0] for _, change in claim.relations} & knobs
        if claim.knob == knob:
            found |= read | related
        elif knob in read | related:
            found.add(claim.knob)
    return found


def incumbents(records: Sequence[RecordLike]) -> list[tuple[Knobs, TrialRecord]]:
    """(the incumbent it was tried on, record) for every trial, in order: the incumbent is the config
    of the latest kept trial before it (the baseline's at first)."""
    trials = typed(records)
    if not trials:
        return []
    current, out = Knobs.from_dict(trials[0].knobs), []
    for record in trials[1:]:
        out.append((current, record))
        if record.decision == "keep":
            current = Knobs.from_dict(record.knobs)
    return out


def lost(record: RecordLike) -> bool:
    """Did this trial measure its change slower than its incumbent beyond the noise floor?"""
    return typed([record])[0].lost


def refuted(hypothesis: Hypothesis, incumbent: Knobs, records: Sequence[RecordLike],
            claims: Iterable[Claim] = ()) -> str | None:
    """Why `hypothesis` need not be tried on `incumbent`: the same change lost by more than the noise
    on an incumbent that differs from this one only in knobs unlinked to it; None if none did."""
    if hypothesis.also:
        return None  # a combined change is judged whole: its parts lost alone, not together
    claims = list(claims)
    near = linked(hypothesis.knob, claims)
    for tried_on, record in incumbents(records):
        if record.change != hypothesis.change or not record.lost:
            continue
        differs = set(incumbent.diff(tried_on))
        if not differs & near:
            low, high = record.interval or (0.0, 0.0)   # a lost trial has its interval
            where = ("this incumbent" if not differs else
                     f"an incumbent that differs only in {', '.join(sorted(differs))}, which nothing links to it")
            return (f"refuted: lost x{record.ratio:.3f} [{low:.3f}, {high:.3f}] in trial {record.trial} "
                    f"on {where}")
    return None


def unrefuted(hypotheses: list[Hypothesis], incumbent: Knobs, records: Sequence[RecordLike],
              claims: Iterable[Claim], skipped: list[tuple[str, str]]) -> list[Hypothesis]:
    """The hypotheses not refuted here; each refuted one joins `skipped` with why."""
    claims, records = list(claims), typed(records)
    return _passing(hypotheses, skipped, lambda h: refuted(h, incumbent, records, claims))


def untried_here(hypotheses: list[Hypothesis], incumbent: Knobs, records: Sequence[RecordLike],
                 skipped: list[tuple[str, str]]) -> list[Hypothesis]:
    """The hypotheses `tried_here` does not leave to the model; each one it does joins `skipped` with why."""
    tried = incumbents(records)
    return _passing(hypotheses, skipped, lambda h: tried_here(h, incumbent, records, tried))


def _passing(hypotheses: list[Hypothesis], skipped: list[tuple[str, str]],
             why_not: Callable[[Hypothesis], str | None]) -> list[Hypothesis]:
    kept = []
    for hypothesis in hypotheses:
        why = why_not(hypothesis)
        if why:
            skipped.append((hypothesis.change, why))
        else:
            kept.append(hypothesis)
    return kept


# A loss whose whole interval lies below exp(-FAR_LOSS) (x0.74) is not re-tried from the beliefs where
# a linked knob changed. The largest turn an interaction made on the recorded tables is about this
# much in log: on cpu-lora micro-batch 4 lost x0.81 with eager attention and gained x1.10 with sdpa.
# Losses of x0.45-0.6 (padding back to longest from padding-free, checkpointing on a roomy card) were
# re-tried after every kept micro-batch or kernel change and lost each time.
FAR_LOSS = 0.3
# Intervals below this confidence come from a trial's first or second run (a screen, 90%), not from
# its pairs (99% and up). On cpu-byo-plain-yaml micro-batch 8 screened out at x0.89 [0.78, 1.02] with
# max_length padding, then gained x1.13 once padding was `longest`: a screen after which a linked knob
# changed is re-tried. Leaving it to the model stopped 8 of 20 warm tunes at 88% of the best.
PAIRS_CONFIDENCE = 0.95


def tried_here(hypothesis: Hypothesis, incumbent: Knobs, records: Sequence[RecordLike],
               tried: list[tuple[Knobs, TrialRecord]] | None = None) -> str | None:
    """Why `hypothesis` is left to the model of all trials (reasoner.surrogate) rather than tried again
    from the beliefs: this run measured the same change, from the same values, on an earlier incumbent,
    did not keep it, and either
    - its interval rules out the gain the beliefs expect of it (sdpa at x0.98 [0.89, 1.08] on a 2%
      machine, where an unknown change is expected to gain x1.1), or
    - it lost so far (FAR_LOSS) that no interaction seen so far would turn it into a gain.
    That measurement says more of this job than the beliefs do. The model weighs it with the links (a
    change may gain on an incumbent that differs in a knob it interacts with) and proposes it again,
    after the changes not yet measured here, only where its expected gain clears the noise floor.
    A smaller loss beyond the noise is re-tried where a linked knob changed (`refuted` judges it), and
    so is a discard whose interval is wide enough to hold the expected gain (a noisy machine's
    discards miss real gains), or that a first- or second-run screen decided before a knob the table
    links to it (`INTERACTIONS`) changed. None when none of this holds. `tried`: `incumbents(records)`,
    where the caller has it."""
    for tried_on, record in tried if tried is not None else incumbents(records):
        if record.change != hypothesis.change or record.decision != "discard" or record.outcome != "complete":
            continue
        if record.ratio is None or record.interval is None:
            continue
        if any(getattr(tried_on, knob) != getattr(incumbent, knob) for knob, _ in hypothesis.changes):
            continue  # from another value (a micro-batch climbed past): another change
        low, high = record.interval
        if record.lost and high < math.exp(-FAR_LOSS):
            return (f"lost x{record.ratio:.3f} [{low:.3f}, {high:.3f}] in trial {record.trial}, more than a linked "
                    "knob has been seen to turn around: left to the model of all trials")
        # A first- or second-run look's interval speaks for the incumbent it was measured on only.
        screened = (record.decided.confidence or 1.0) < PAIRS_CONFIDENCE
        moved = bool(set(incumbent.diff(tried_on)) & {k for knob, _ in hypothesis.changes for k in linked(knob)})
        if not record.lost and high < hypothesis.expected_ratio and not (screened and moved):
            return (f"measured x{record.ratio:.3f} [{low:.3f}, {high:.3f}] in trial {record.trial}, short of the "
                    f"x{hypothesis.expected_ratio:.2f} the beliefs expect: left to the model of all trials")
    return None


WARM = (Source.WARM_START, Source.WARM_CHECK)


def combined_kept(records: Sequence[RecordLike]) -> tuple[Knobs, TrialRecord] | None:
    """(the incumbent before, record) of the trial that made the current incumbent, when it was a
    combined change whose parts were never measured alone here (a warm start, its check, a pooled
    change); None otherwise."""
    kept = [(before, record) for before, record in incumbents(records) if record.decision == "keep"]
    if not kept:
        return None
    before, record = kept[-1]
    if record.source not in (*WARM, Source.POOLED) or not record.combined:
        return None
    return before, record


def reverts(incumbent: Knobs, records: Sequence[RecordLike], measured: set[tuple[Any, ...]], device: Device,
            effective_batch: int, claims: Iterable[Claim] = (), features: FeatureView | None = None) -> list[Hypothesis]:
    """After a combined change was kept (a warm start, a pooled change), each of its parts undone on
    its own: it was judged only together with the others, and one of them may cost here what the
    rest gain (a warm start's padding from another job's data). Each is scored by the beliefs
    (`undo_score`), so the loop can rank a warm start's undo trials against the single changes."""
    found = combined_kept(records)
    if found is None:
        return []
    before, record = found
    claims = [c for c in claims if c.active]
    order = [knob for knob, _ in CATALOG_ORDER]
    out = []
    for knob, (value, _) in sorted(before.diff(incumbent).items(),
                                   key=lambda item: order.index(item[0]) if item[0] in order else len(order)):
        changes = repaired(incumbent, ((knob, value),), device, effective_batch)
        if changes is None or not_applicable(knob, value, incumbent, device, effective_batch):
            continue
        p, ratio, cost, score, ids, why = undo_score(knob, value, incumbent, claims, features or {},
                                                     order.index(knob) if knob in order else len(order))
        hypothesis = Hypothesis(knob, value, f"undo {knob} of the combined change kept in trial {record.trial}: "
                                f"it was measured only together with the others; {why}", p_helps=p,
                                expected_ratio=ratio, cost=cost, score=score, claims=ids, also=changes[1:],
                                source=Source.REVERT)
        if key(hypothesis.apply(incumbent)) not in measured:
            out.append(hypothesis)
    return out


def undo_score(knob: str, value: Any, incumbent: Knobs, claims: list[Claim], features: FeatureView,
               order: int) -> tuple[float, float, float, float, tuple[str, ...], str]:
    """P(helps), expected ratio, cost, score, claim ids and why, for setting `knob` back to `value`
    from the incumbent's: as rank.score does for a single change, from the claims about this change
    and, turned around, those about the change being undone (a claim that padding_free helps here is
    one that going back to max_length does not). Without any claim it is an unknown, as in rank."""
    now = getattr(incumbent, knob)
    direct = [c for c in claims if not _enabling(c) and c.matches(knob, value, now, features)]
    undone = [c for c in claims if not _enabling(c) and c not in direct and c.matches(knob, now, value, features)]
    # (claim, says the undo helps, ratio of the undo if that side holds)
    sides = [(c, c.direction == "helps", c.expected_ratio) for c in direct] + \
            [(c, c.direction == "hurts", 1 / c.expected_ratio) for c in undone]
    if not sides:
        p, ratio, uncertainty = 0.5, UNKNOWN_RATIO, UNKNOWN_UNCERTAINTY
        why = "no claim speaks of it here"
    else:
        weights = [_weight(c) for c, _, _ in sides]
        total = sum(weights)
        p = sum(w * (c.confidence if helps else 1 - c.confidence) for w, (c, helps, _) in zip(weights, sides)) / total
        uncertainty = sum(w * c.uncertainty for w, (c, _, _) in zip(weights, sides)) / total
        gains = [(w, r) for w, (_, helps, r) in zip(weights, sides) if helps and r > 1]
        ratio = math.exp(sum(w * math.log(r) for w, r in gains) / sum(w for w, _ in gains)) if gains else UNKNOWN_RATIO
        why = "; ".join([f"{c.id} says {c.change} {c.direction} here (confidence {c.confidence:.2f})" for c in direct]
                        + [f"{c.id} says {c.change} {c.direction} (confidence {c.confidence:.2f}): its undo "
                           f"{'helps' if c.direction == 'hurts' else 'does not'}" for c in undone])
    optimistic = min(1.0, p + EXPLORATION * uncertainty)
    cost = _cost(knob, optimistic, ratio)
    score = optimistic * math.log(max(ratio, 1.0001)) / cost - order * 1e-9
    return p, ratio, cost, score, tuple(c.id for c, _, _ in sides), why


def undecided_pair(incumbent: Knobs, records: Sequence[RecordLike], device: Device, effective_batch: int,
                   measured: set[tuple[Any, ...]]) -> tuple[tuple[tuple[str, Any], ...], tuple[float, float]] | None:
    """The two best single changes on this incumbent that the noise left undecided (none lost beyond
    the noise floor, `lost`), made together; with their ratios. Where the model of
    all trials expects too little of any config to clear the floor, its additive view of two such
    changes is the least sure thing it holds: one trial settles it before the loop stops. None when
    fewer than two are undecided, their pair does not apply here or was measured."""
    best: dict[str, tuple[float, Any]] = {}
    for record in typed(records):
        if record.decision != "discard" or record.outcome != "complete" or record.interval is None or record.combined:
            continue
        if record.lost or record.ratio is None:
            continue
        diff = incumbent.diff(Knobs.from_dict(record.knobs))
        if len(diff) != 1:
            continue  # tried on another incumbent: it says nothing of this one
        (knob, (_, value)), = diff.items()
        if knob not in best or record.ratio > best[knob][0]:
            best[knob] = (record.ratio, value)
    if len(best) < 2:
        return None
    (k1, (r1, v1)), (k2, (r2, v2)) = sorted(best.items(), key=lambda item: -item[1][0])[:2]
    changes = repaired(incumbent, ((k1, v1), (k2, v2)), device, effective_batch)
    if changes is None:
        return None
    final = incumbent
    for knob, value in changes:
        final = final.with_change(knob, value)
    if key(final) in measured:
        return None
    return changes, (r1, r2)
