"""Outcome -> belief updates. Pure: claims and an observation in, `Update`s out; nothing is written.

- An outcome that agrees with a matching claim confirms it; one that disagrees weakens it.
- A claim whose evidence is mixed but separable by one job feature is split in two: the parent's
  condition plus `feature < t` and plus `feature >= t` (or `== v` / `!= v`), `t` the midpoint between
  the evidence on either side; each child keeps the direction its side's evidence shows.
- A claim with low confidence, enough evidence and no separating feature is deleted: kept in the
  history, no longer used.
- A change that no claim speaks of creates a learned claim for this kind of device.
Every update names the evidence (experiment id) that caused it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..kb.claims import Claim, Clause, Evidence, Update, change_value, condition_text
from ..config.types import JsonObject
from ..kb.features import NUMERIC, FeatureView, fingerprint

MIN_SPLIT_EVIDENCE = 4      # at least this many results, at least 2 on each side of the split
MIN_SIDE = 2
SPLIT_PURITY = 0.85         # share of results the split explains
MIN_DELETE_EVIDENCE = 5
DELETE_BELOW = 0.3          # posterior confidence
# Features a split prefers when several separate the evidence equally well: what the job is before
# how it is configured, and the causes the catalog knows of before incidental ones.
SPLIT_PREFERENCE = ("max_len", "gpu_mem_gb", "headroom", "padding_share", "length_spread", "params_m", "method",
                    "device_kind", "data_wait_share", "optimizer_share", "mean_len", "effective_batch",
                    "hidden", "layers", "vocab", "model_family", "bf16_supported")


@dataclass(frozen=True)
class Observation:
    """What one trial showed: a change, where it was made, and how it came out."""

    experiment: str
    changes: tuple[tuple[str, Any, Any], ...]   # (knob, incumbent value, new value)
    features: FeatureView
    ratio: float
    outcome: str                                # helps | hurts | neutral
    claims: tuple[str, ...] = ()                # for a combined change: the claims that proposed it
    run: str = ""
    extra: JsonObject = field(default_factory=dict)

    @property
    def evidence(self) -> Evidence:
        return Evidence(self.experiment, round(self.ratio, 5), self.outcome, dict(self.features))


def outcome_of(record: Mapping[str, Any]) -> str | None:
    """helps / hurts / neutral from an experiment record, or None when it says nothing about speed
    (a crash, an OOM, a parity failure: those are about whether a change is allowed, not its speed)."""
    if record.get("state") not in ("complete", "replayed") or record.get("ratio") is None:
        return None
    if record.get("decision") == "keep":
        return "helps"
    interval = record.get("interval") or [record["ratio"], record["ratio"]]
    return "hurts" if interval[1] < 1 else "neutral"


def observe(claims: list[Claim], observation: Observation) -> list[Update]:
    """Updates for one observation against the current claims."""
    combined = len(observation.changes) > 1
    if combined:
        # A change made together with another (checkpointing to fit a larger micro-batch) is evidence
        # for the claim that proposed the combination, and for nothing else.
        matching = [c for c in claims if c.active and c.id in observation.claims]
    else:
        knob, start, value = observation.changes[0]
        matching = [c for c in claims if c.active and not _enables(c)
                    and c.matches(knob, value, start, observation.features)]
    updates: list[Update] = []
    evidence = observation.evidence
    if not matching and not combined:
        learned = learned_claim(observation)
        taken = {c.id for c in claims}
        if learned.id in taken:  # learned before and since retired: a new claim, not the old one revived
            from dataclasses import replace

            suffix = 2
            while f"{learned.id}-{suffix}" in taken:
                suffix += 1
            learned = replace(learned, id=f"{learned.id}-{suffix}")
        updates.append(Update("create", learned.id, f"no claim spoke of {learned.change} here; learned from "
                              f"{observation.experiment}", children=(learned,), run=observation.run))
        matching = [learned]
    for claim in matching:
        agrees = claim.agrees(evidence)
        updates.append(Update("confirm" if agrees else "weaken", claim.id,
                              f"{observation.experiment}: {claim.change} measured x{observation.ratio:.3f} "
                              f"({observation.outcome}); the claim says it {claim.direction}",
                              evidence=evidence, run=observation.run))
        updates += restructure(claim.with_evidence(evidence), observation.experiment, observation.run)
    return updates


def _enables(claim: Claim) -> bool:
    return any(kind == "enables" for kind, _ in claim.relations)


def learned_claim(observation: Observation) -> Claim:
    knob, start, value = observation.changes[0]
    kind = observation.features.get("device_kind")
    condition = (Clause("device_kind", "==", kind),) if kind else ()
    direction = "helps" if observation.outcome == "helps" else "hurts"
    ratio = observation.ratio if observation.ratio > 0 else 1.0
    if direction == "hurts":
        ratio = min(ratio, 0.999)
    else:
        ratio = max(ratio, 1.001)
    claim_value = change_value(knob, start, value)
    identity = fingerprint({"knob": knob, "value": claim_value, "direction": direction,
                            "condition": condition_text(condition)})
    return Claim(id=f"L-{identity[:8]}", knob=knob, value=claim_value, direction=direction, ratio=round(ratio, 4),
                 condition=condition, alpha=1.0, beta=1.0, source=f"measured: {observation.experiment}",
                 statement=f"{knob}={claim_value} {direction} on {kind or 'this device'} (learned)", origin="learned")


def restructure(claim: Claim, experiment: str, run: str = "") -> list[Update]:
    """Split or delete a claim whose evidence calls for it; nothing when it is still coherent."""
    children = find_split(claim)
    if children:
        feature = children[0].condition[-1]
        return [Update("split", claim.id, f"mixed evidence ({claim.agreements} of {len(claim.evidence)} agree) "
                       f"separates at {feature.feature} {_threshold_text(feature)}; last result {experiment}",
                       children=children, run=run)]
    if len(claim.evidence) >= MIN_DELETE_EVIDENCE and claim.confidence < DELETE_BELOW:
        return [Update("delete", claim.id, f"confidence {claim.confidence:.2f} after {len(claim.evidence)} results "
                       f"and no feature separates them; last result {experiment}", run=run)]
    return []


def _threshold_text(clause: Clause) -> str:
    return f"{'=' if clause.op in ('==', '!=') else ''}{clause.value}"


def find_split(claim: Claim) -> tuple[Claim, Claim] | None:
    """Two refined claims when one feature separates agreeing from disagreeing evidence, else None."""
    evidence = claim.evidence
    agree = [claim.agrees(e) for e in evidence]
    if len(evidence) < MIN_SPLIT_EVIDENCE or sum(agree) < MIN_SIDE or len(agree) - sum(agree) < MIN_SIDE:
        return None
    conditioned = {c.feature for c in claim.condition if c.op in ("==", "!=")}
    names = sorted({n for e in evidence for n in e.features} - conditioned, key=_preference)
    best: tuple[float, int, Clause, Clause] | None = None
    for rank_, name in enumerate(names):
        for left, right in _cuts(name, evidence):
            sides = [[a for a, e in zip(agree, evidence) if clause.holds(e.features)] for clause in (left, right)]
            if min(len(s) for s in sides) < MIN_SIDE or sum(len(s) for s in sides) < len(evidence):
                continue
            purity = sum(max(sum(s), len(s) - sum(s)) for s in sides) / len(evidence)
            majorities = [sum(s) * 2 >= len(s) for s in sides]
            if purity >= SPLIT_PURITY and majorities[0] != majorities[1] and (best is None or purity > best[0]):
                best = (purity, rank_, left, right)
    if best is None:
        return None
    return tuple(_child(claim, clause) for clause in best[2:])  # type: ignore[return-value]


def _preference(name: str) -> tuple[int, str]:
    return (SPLIT_PREFERENCE.index(name) if name in SPLIT_PREFERENCE else len(SPLIT_PREFERENCE), name)


def _cuts(name: str, evidence: tuple[Evidence, ...]) -> list[tuple[Clause, Clause]]:
    values: list[Any] = [e.features.get(name) for e in evidence if e.features.get(name) is not None]
    if not values:
        return []
    numeric = name in NUMERIC and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric:
        ordered = sorted(set(values))
        cuts = (_threshold(lo, hi) for lo, hi in zip(ordered, ordered[1:]))
        return [(Clause(name, "<", t), Clause(name, ">=", t)) for t in cuts if t is not None]
    return [(Clause(name, "==", v), Clause(name, "!=", v)) for v in sorted({str(v) for v in values})]


def _threshold(lo: float, hi: float) -> float | int | None:
    """The midpoint, rounded for reading but still above `lo` and at most `hi` (rounded to 3 digits,
    512.5 would become 512 and put 512 on the upper side); None when only more digits than a condition's
    text keeps (6, see Clause.__str__) would separate them."""
    middle = lo + (hi - lo) / 2
    return next((t for t in (_round(middle, s) for s in range(3, 7)) if lo < t <= hi), None)


def _round(value: float, significant: int = 3) -> float | int:
    if value == 0:
        return 0
    digits = significant - int(math.floor(math.log10(abs(value)))) - 1
    rounded = round(value, max(0, digits))
    return int(rounded) if float(rounded).is_integer() else rounded


def _child(parent: Claim, clause: Clause) -> Claim:
    from dataclasses import replace

    inside = [e for e in parent.evidence if clause.holds(e.features)]
    agreeing = sum(parent.agrees(e) for e in inside)
    keeps = agreeing * 2 >= len(inside)
    direction = parent.direction if keeps else ("hurts" if parent.direction == "helps" else "helps")
    ratios = [e.ratio for e in inside if e.ratio > 0 and ((e.outcome == "helps") == (direction == "helps"))]
    ratio = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else parent.ratio
    if direction == "helps":
        ratio = max(ratio, 1.001)
    else:
        ratio = min(ratio, 0.999)
    child_id = f"{parent.id}[{clause.feature}{clause.op}{clause.value}]"
    return replace(parent, id=child_id, direction=direction, ratio=round(ratio, 4),
                   condition=parent.condition + (clause,), alpha=1.0, beta=1.0, parent=parent.id, origin="split",
                   evidence=(), status="active", status_reason="",
                   statement=f"{parent.knob}={parent.value} {direction} when {condition_text(parent.condition + (clause,))}"
                   f" (split from {parent.id})")
