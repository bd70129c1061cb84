"""Hypotheses for the next trial: one knob change on top of the incumbent, ranked by the beliefs.

Each applicable change gets, from the active claims that match the job's features (model, data,
device, the incumbent's profile and knobs):
- P(helps): the claims' confidences (a `hurts` claim counts against), weighted by how much stands
  behind each (pseudo-counts plus evidence) and how specific its condition is;
- the expected ratio if it helps: the `helps` claims' ratios, pulled toward what was measured;
- an exploration bonus: the claims' uncertainty lifts P(helps) toward what it might be (UCB), so a
  claim with little evidence gets tested rather than trusted or ignored forever;
- a cost: the trial's expected time in runs of the incumbent (reasoner/cost.py: a first run, then
  half a run for a large expected gain, three more for a small one, compile time for torch.compile).
score = P_ucb(helps) * log(expected ratio) / cost. With no claim at all, a change scores as an
unknown (P 0.5, a modest ratio) and ties keep the catalog order: the largest typical effects first.
Numeric knobs are climbed one neighbour at a time (micro-batch to the next divisor up or down).

The profile steers through the claims' conditions: a high data wait matches the workers claims, a
high padding share the padding-free and length-grouping claims, memory headroom the larger
micro-batch, no headroom the claim that checkpointing enables a larger micro-batch, which is then
proposed as one combined change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from ..kb.features import FeatureView
from ..config.types import Device, JsonObject
from ..kb.claims import Claim, change_value
# CATALOG_ORDER: the knobs tried and their values, in the table's tie order (config/knobs/table.py).
from ..config.knobs import CATALOG, CATALOG_ORDER, Knobs, divisors, not_applicable, parse_knob_value
from ..config.records import Changes, RecordLike, Source, change_text, parse_change, typed
from ..util.errors import RecordError
from .cost import trial_cost
from .combine import repaired, together



@dataclass(frozen=True)
class Hypothesis:
    """One change to try (or two made together, when a claim says the first enables the second)."""

    knob: str
    value: Any
    reason: str
    p_helps: float = 0.5
    expected_ratio: float = 1.0
    cost: float = 1.0
    score: float = 0.0
    claims: tuple[str, ...] = ()
    also: tuple[tuple[str, Any], ...] = ()
    source: Source = Source.RANK         # who proposed it (a word in records: rank, warm_start, ...)

    def __post_init__(self) -> None:
        if not isinstance(self.source, Source):  # a word, as older callers and records give it
            object.__setattr__(self, "source", Source(self.source))

    @property
    def changes(self) -> Changes:
        """The single changes it makes, in order: one, or several for a combined change."""
        return ((self.knob, self.value),) + self.also

    @property
    def change(self) -> str:
        return change_text(self.changes)

    @property
    def affects_memory(self) -> bool:
        return any(CATALOG[knob].affects_memory for knob, _ in self.changes)

    def apply(self, knobs: Knobs) -> Knobs:
        for knob, value in self.changes:
            knobs = knobs.with_change(knob, value)
        return knobs

    def to_dict(self) -> JsonObject:
        return {"change": self.change, "p_helps": round(self.p_helps, 4), "expected_ratio": round(self.expected_ratio, 4),
                "cost": round(self.cost, 3), "score": round(self.score, 5), "claims": list(self.claims),
                "rationale": self.reason, "source": self.source.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Hypothesis":
        """A record's hypothesis read back (`to_dict`'s form): its change split into typed single changes."""
        changes = [(knob, parse_knob_value(knob, text) if knob in CATALOG else text)
                   for knob, text in parse_change(data.get("change"))]
        if not changes:
            raise RecordError(f"a hypothesis without a change: {dict(data)}")
        (knob, value), *also = changes
        source = data.get("source") or Source.RANK
        return cls(knob, value, data.get("rationale") or "", p_helps=data.get("p_helps", 0.5),
                   expected_ratio=data.get("expected_ratio", 1.0), cost=data.get("cost", 1.0),
                   score=data.get("score", 0.0), claims=tuple(data.get("claims") or ()), also=tuple(also),
                   source=Source(source) if source in Source._value2member_map_ else Source.RANK)


# A jump in micro-batch goes at most this many times the incumbent's: memory per row is measured at
# one size only, and a much larger batch is another regime (kernels, allocator).
MAX_JUMP = 8


def _values(knob: str, listed: tuple[Any, ...], incumbent: Knobs, effective_batch: int,
            features: FeatureView) -> Iterable[Any]:
    if CATALOG[knob].vision and not features.get("vlm"):
        return ()
    if CATALOG[knob].climb != "divisors":
        return listed
    options = divisors(effective_batch)
    current = getattr(incumbent, knob)
    position = options.index(current)
    # Larger first: a larger micro-batch is the usual win; smaller is tried when larger lost.
    values = [options[i] for i in (position + 1, position - 1) if 0 <= i < len(options)]
    headroom = features.get("headroom")  # a share, where the incumbent's worst-case batch was measured
    measured = float(headroom) if isinstance(headroom, (int, float)) and not isinstance(headroom, bool) else None
    jump = _largest_fitting(current, options, measured)
    if jump is not None and values and jump > values[0]:
        values.insert(0, jump)
    return values


def _largest_fitting(micro: int, options: list[int], headroom: float | None) -> int | None:
    """The largest micro-batch the measured headroom says fits, taking all of the incumbent's peak to
    grow with the micro-batch (it does not: weights and optimizer state stay), so it errs small.
    Where one step up at a time would need several trials, each gain within the noise on its own,
    one jump shows the whole gain in one trial; the worst-case check still guards memory."""
    if headroom is None or headroom <= 0:
        return None
    fits = micro / max(1e-9, 1.0 - headroom)
    larger = [d for d in options if micro < d <= min(fits, MAX_JUMP * micro)]
    return larger[-1] if larger else None


def rank(incumbent: Knobs, device: Device, effective_batch: int, measured: set[tuple[Any, ...]],
         claims: Iterable[Claim] = (), features: FeatureView | None = None,
         blocked: Iterable[str] = ()) -> tuple[list[Hypothesis], list[tuple[str, str]]]:
    """Untried changes, best first, and the (change, why not) of those that cannot apply here.

    `measured` holds the knob sets (as sorted item tuples) already measured in this run; `claims` the
    active beliefs and `features` the job's (see kb.features.context); `blocked` the changes that did
    not fit in memory on top of this incumbent (what checkpointing may enable). Without claims the
    order is the catalog's.
    """
    claims = [c for c in claims if c.active]
    features = features or {}
    ready: list[Hypothesis] = []
    skipped: list[tuple[str, str]] = []
    for order, (knob, listed) in enumerate(CATALOG_ORDER):
        for value in _values(knob, listed, incumbent, effective_batch, features):
            if getattr(incumbent, knob) == value:
                continue
            why_not = not_applicable(knob, value, incumbent, device, effective_batch)
            if why_not:
                skipped.append((f"{knob}={value}", why_not))
                continue
            hypothesis = score(knob, value, incumbent, claims, features, order)
            changes = repaired(incumbent, hypothesis.changes, device, effective_batch)
            if changes is None:
                continue
            hypothesis = replace(hypothesis, also=changes[1:])  # e.g. padding off longest ends group_by_length
            if key(hypothesis.apply(incumbent)) not in measured:
                ready.append(hypothesis)
    ready += _enabled(incumbent, device, effective_batch, measured, claims, features, set(blocked))
    ready.sort(key=lambda h: -h.score)
    return ready, skipped


# An unknown change: a coin flip on a modest gain.
UNKNOWN_RATIO = 1.1
EXPLORATION = 1.0          # standard deviations of the claims' Beta added to P(helps)
UNKNOWN_UNCERTAINTY = math.sqrt(1 / 12)   # Beta(1, 1)


def _weight(claim: Claim) -> float:
    return (claim.alpha + claim.beta + len(claim.evidence)) * (1 + len(claim.condition))


def _cost(knob: str, p_helps: float, ratio: float = UNKNOWN_RATIO) -> float:
    return trial_cost(knob, p_helps, ratio)  # reasoner/cost.py: runs to decide it, compile time


def _combine(claims: list[Claim], against: Sequence[Claim] = ()) -> tuple[float, float, float]:
    """P(helps), expected ratio if it helps, and uncertainty, from the matching claims (and the claims
    that say the change needs another made with it here, which count as saying it does not help alone)."""
    if not claims and not against:
        return 0.5, UNKNOWN_RATIO, UNKNOWN_UNCERTAINTY
    sides = [(c, c.direction == "helps") for c in claims] + [(c, False) for c in against]
    weights = [_weight(c) for c, _ in sides]
    total = sum(weights)
    p = sum(w * (c.confidence if helps else 1 - c.confidence) for w, (c, helps) in zip(weights, sides)) / total
    uncertainty = sum(w * c.uncertainty for w, (c, _) in zip(weights, sides)) / total
    helping = [(w, c) for w, c in zip(weights, claims) if c.direction == "helps"]
    if helping:
        log_ratio = sum(w * math.log(c.expected_ratio) for w, c in helping) / sum(w for w, _ in helping)
        ratio = math.exp(log_ratio)
    else:
        ratio = UNKNOWN_RATIO
    return p, ratio, uncertainty


def _when(claim: Claim, features: FeatureView) -> str:
    """The claim's condition, with this job's value beside each numeric clause: why it matches."""
    clauses = [f"{c} [{features.get(c.feature)}]" if isinstance(c.value, (int, float)) and not isinstance(c.value, bool)
               else str(c) for c in claim.condition]
    return "when " + ", ".join(clauses) if clauses else "always"


def _why(claims: list[Claim], features: FeatureView, against: Sequence[Claim] = ()) -> str:
    if not claims and not against:
        return "no claim speaks of this change for this job: tried to find out"
    parts = []
    for claim in sorted(claims, key=_weight, reverse=True):
        parts.append(f"{claim.id} {claim.direction} x{claim.expected_ratio:.2f}, confidence {claim.confidence:.2f} "
                     f"over {len(claim.evidence)} result(s), {_when(claim, features)}")
    for claim in against:
        if _enabling(claim):
            parts.append(f"{claim.id}: needs {claim.change} with it (confidence {claim.confidence:.2f}), "
                         f"{_when(claim, features)}")
        else:
            conflict = next(change for kind, change in claim.relations if kind == "conflicts")
            parts.append(f"{claim.id}: {claim.change} conflicts with {conflict} (confidence {claim.confidence:.2f})")
    return "; ".join(parts)


def _scored(knob: str, value: Any, matched: list[Claim], features: FeatureView, order: int,
            also: tuple[tuple[str, Any], ...] = (), against: Sequence[Claim] = (), steps: float = 1.0) -> Hypothesis:
    p, ratio, uncertainty = _combine(matched, against)
    ratio = ratio ** steps
    optimistic = min(1.0, p + EXPLORATION * uncertainty)
    # The cost takes the same P(helps) as the gain: with the plain P here and P + exploration above,
    # results that agree with a claim (P up, uncertainty down) made its change less attractive.
    cost = _cost(knob, optimistic, ratio)
    # Ties (no claims anywhere) keep the catalog order through a vanishing tie-breaker.
    value_score = optimistic * math.log(max(ratio, 1.0001)) / cost - order * 1e-9
    return Hypothesis(knob, value, _why(matched, features, against), p_helps=p, expected_ratio=ratio, cost=cost,
                      score=value_score, claims=tuple(c.id for c in [*matched, *against]), also=also)


def score(knob: str, value: Any, incumbent: Knobs, claims: list[Claim], features: FeatureView,
          order: int = 0) -> Hypothesis:
    """One single change, scored from the claims that match it here (not those about combinations).

    A claim that another change enables this one, where it matches, says this one does not fit alone
    here (checkpointing -> a larger micro-batch when memory is short): it counts against it."""
    start = getattr(incumbent, knob)
    matched = [c for c in claims if not _enabling(c) and c.matches(knob, value, start, features)]
    needs = [c for c in claims if _enabling(c) == f"{knob}={change_value(knob, start, value)}"
             and getattr(incumbent, c.knob) != c.value
             and c.matches(c.knob, c.value, getattr(incumbent, c.knob), features)]
    conflicting = [c for c in claims if c not in matched and c not in needs and _conflicts(c, knob, value, incumbent)]
    # A micro-batch claim speaks of one doubling; a jump of several makes the expected gain several times.
    steps = max(1.0, math.log2(value / start)) if CATALOG[knob].climb == "divisors" and value > start else 1.0
    return _scored(knob, value, matched, features, order, against=needs + conflicting, steps=steps)


def _conflicts(claim: Claim, knob: str, value: Any, incumbent: Knobs) -> bool:
    """Does the claim say this change and something in the incumbent do not combine?
    Either the claim is about this change and the incumbent holds what it conflicts with, or this
    change is what it conflicts with and the incumbent holds the claim's change."""
    if not claim.active:
        return False
    for kind, change in claim.relations:
        other_knob, _, other_text = change.partition("=")
        if kind != "conflicts" or other_knob not in CATALOG:
            continue
        about_this = claim.knob == knob and claim.value == change_value(knob, getattr(incumbent, knob), value)
        if about_this and str(getattr(incumbent, other_knob)) == other_text:
            return True
        # A claim about an int knob speaks of `up` or `down`, never a value the incumbent holds.
        claim_in_place = CATALOG[claim.knob].kind != "int" \
            and getattr(incumbent, claim.knob) == claim.value
        if knob == other_knob and str(value) == other_text and claim_in_place:
            return True
    return False


def _enabling(claim: Claim) -> str | None:
    return next((change for kind, change in claim.relations if kind == "enables"), None)


def _enabled(incumbent: Knobs, device: Device, effective_batch: int, measured: set[tuple[Any, ...]],
             claims: list[Claim], features: FeatureView, blocked: set[str]) -> list[Hypothesis]:
    """Combined changes: a change a claim says enables another (checkpointing -> a larger micro-batch)
    made together with it, when the claim matches here or the enabled change already did not fit."""
    found: list[Hypothesis] = []
    for claim in claims:
        target = _enabling(claim)
        if target is None or getattr(incumbent, claim.knob) == claim.value:
            continue
        target_knob, _, target_value = target.partition("=")
        value = _target_value(target_knob, target_value, incumbent, effective_batch)
        if value is None:
            continue
        start = getattr(incumbent, claim.knob)
        fits_claim = claim.matches(claim.knob, claim.value, start, features)
        was_blocked = f"{target_knob}={value}" in blocked
        if not (fits_claim or was_blocked):
            continue
        if not_applicable(claim.knob, claim.value, incumbent, device, effective_batch) or \
                not_applicable(target_knob, value, incumbent.with_change(claim.knob, claim.value), device, effective_batch):
            continue
        hypothesis = _scored(claim.knob, claim.value, [claim], features, len(CATALOG_ORDER),
                             also=((target_knob, value),))
        if was_blocked:
            hypothesis = Hypothesis(**{**hypothesis.__dict__, "reason": f"{target_knob}={value} did not fit alone; "
                                       + hypothesis.reason})
        if key(hypothesis.apply(incumbent)) not in measured:
            found.append(hypothesis)
    return found


def _target_value(knob: str, text: str, incumbent: Knobs, effective_batch: int) -> Any:
    current = getattr(incumbent, knob)
    entry = CATALOG[knob]
    if entry.climb == "divisors":
        options = [d for d in divisors(effective_batch) if (d > current if text == "up" else d < current)]
        if not options:
            return None
        return options[0] if text == "up" else options[-1]
    if entry.step:
        return current + entry.step if text == "up" else (max(0, current - entry.step) if current else None)
    if text in ("True", "true", "False", "false"):
        return text.lower() == "true"
    return text


def pooled(incumbent: Knobs, records: Iterable[RecordLike], device: Device, effective_batch: int,
           measured: set[tuple[Any, ...]]) -> Hypothesis | None:
    """Once every single change has been tried: those that measured faster than this incumbent but
    within the noise floor, made together. Gains each too small to tell from noise can add up to one
    that is not; measured together, the combination is judged like any change.

    Only records of single changes on top of this incumbent count (a record's config differs from
    the incumbent in exactly the knob it changed), the best value per knob, those that apply together.
    """
    best: dict[str, tuple[float, Any]] = {}
    for record in typed(records):
        if record.decision != "discard" or record.outcome != "complete" or not record.ratio or record.ratio <= 1:
            continue
        diff = incumbent.diff(Knobs.from_dict(record.knobs))
        if len(diff) != 1 or record.combined:
            continue
        (knob, (_, value)), = diff.items()
        if knob not in best or record.ratio > best[knob][0]:
            best[knob] = (record.ratio, value)
    # together(): a change that applied when it was added may not in the config they make at the end.
    ordered = [(knob, value) for knob, (_, value) in sorted(best.items(), key=lambda item: -item[1][0])]
    changes, current, gain = [], incumbent, 1.0
    for knob, value in together(incumbent, ordered, device, effective_batch):
        changes.append((knob, value))
        # A change `together` adds to keep the config valid (group_by_length back off) was not measured.
        current, gain = current.with_change(knob, value), gain * best.get(knob, (1.0,))[0]
    if len(changes) < 2 or key(current) in measured:
        return None
    (knob, value), *rest = changes
    shown = ", ".join(f"{k}={v} x{best[k][0]:.3f}" if k in best else f"{k}={v}" for k, v in changes)
    return Hypothesis(knob, value, f"each alone measured faster but within the noise floor ({shown}); together "
                      "they may clear it", p_helps=0.5, expected_ratio=gain, also=tuple(rest), source=Source.POOLED)


def key(knobs: Knobs) -> tuple[Any, ...]:
    return tuple(sorted(knobs.to_dict().items()))
