"""Claims: "changing K to v helps (or hurts) by about r when condition C holds", with a Beta confidence.

A claim's definition (knob, value, direction, ratio, condition, prior pseudo-counts, source) never
changes once written. What it has seen (its evidence) and its status come from the claim history, so
two tuners that confirm one claim at the same moment both count: nothing is read, changed and written
back. `Claim` here is the folded view: the definition plus the evidence and status so far.

Conditions are a small language, never `eval`: clauses `feature op value` joined by ` and `, with op
one of >= <= > < == != and value a number, true/false or a bare word. An empty condition always holds.
A clause on a feature the job does not know (a `suggest` without `gpu_mem`) does not hold: a claim is
used only where it is known to apply.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, cast

from ..util.errors import RecordError
from ..config.knobs import CATALOG
from ..config.types import JsonObject, JsonValue
from .features import Features, FeatureView
from .rows import ClaimDefinition

OPS = (">=", "<=", "!=", "==", ">", "<")
INT_KNOBS = tuple(name for name, knob in CATALOG.items() if knob.kind == "int")
# The value may not start with an operator character: `max_len >=` must not read as `max_len > "="`.
_CLAUSE = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(>=|<=|!=|==|>|<)\s*([^\s<>=!]\S*)\s*$")
STATUSES = ("active", "split", "deleted")


class ConditionError(RecordError):
    """A condition that does not parse."""


@dataclass(frozen=True)
class Clause:
    feature: str
    op: str
    value: Any

    def holds(self, features: FeatureView) -> bool:
        have = features.get(self.feature)
        if have is None:
            return False
        if isinstance(self.value, (int, float)) and not isinstance(self.value, bool):
            if isinstance(have, bool) or not isinstance(have, (int, float)):
                return False
            return {">=": have >= self.value, "<=": have <= self.value, ">": have > self.value,
                    "<": have < self.value, "==": have == self.value, "!=": have != self.value}[self.op]
        if self.op not in ("==", "!="):
            return False
        same = str(have).lower() == str(self.value).lower()
        return same if self.op == "==" else not same

    def __str__(self) -> str:
        value = str(self.value).lower() if isinstance(self.value, bool) else _number_text(self.value)
        return f"{self.feature} {self.op} {value}"


def _number_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text else number


def parse_condition(text: str) -> tuple[Clause, ...]:
    if not text.strip():
        return ()
    clauses = []
    for part in re.split(r"\s+and\s+", text.strip()):
        match = _CLAUSE.match(part)
        if not match:
            raise ConditionError(f"condition {text!r}: cannot read {part!r}; expected `feature op value` "
                                 f"clauses joined by ' and ', op one of {' '.join(OPS)}")
        value = _value(match.group(3))
        if match.group(2) not in ("==", "!=") and isinstance(value, (bool, str)):
            # It could never hold (Clause.holds orders numbers only): refuse it rather than ignore the claim.
            raise ConditionError(f"condition {text!r}: {part.strip()!r} orders a non-number; "
                                 f"use == or != for words and true/false")
        clauses.append(Clause(match.group(1), match.group(2), value))
    return tuple(clauses)


def condition_text(clauses: Iterable[Clause]) -> str:
    return " and ".join(str(c) for c in clauses)


def change_value(knob: str, old: Any, new: Any) -> Any:
    """What a claim calls a change: the new value, or `up` / `down` for the integer knobs."""
    if knob in INT_KNOBS:
        return "up" if new > old else "down"
    return new


@dataclass(frozen=True)
class Evidence:
    """One measured outcome of a change that a claim matched."""

    experiment: str          # "<run>#<trial>" (or an imported run's id)
    ratio: float             # candidate / incumbent throughput, interleaved
    outcome: str             # helps | hurts | neutral (the comparison's verdict)
    features: Features = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        return {"experiment": self.experiment, "ratio": self.ratio, "outcome": self.outcome,
                "features": self.features}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Evidence":
        return cls(data["experiment"], float(data["ratio"]), data["outcome"], dict(data.get("features") or {}))


@dataclass(frozen=True)
class Claim:
    id: str
    knob: str
    value: Any
    direction: str                      # helps | hurts
    ratio: float                        # expected ratio when it holds
    condition: tuple[Clause, ...] = ()
    alpha: float = 1.0                  # prior pseudo-counts
    beta: float = 1.0
    source: str = ""
    statement: str = ""
    start: Any = None                   # `from`: the incumbent value the claim needs, or None for any
    relations: tuple[tuple[str, str], ...] = ()   # (kind, "knob=value"): enables | conflicts
    parent: str | None = None
    origin: str = "prior"               # prior | learned | split | imported | llm
    evidence: tuple[Evidence, ...] = ()
    status: str = "active"
    status_reason: str = ""

    def __post_init__(self) -> None:
        if self.knob not in CATALOG:
            raise RecordError(f"claim {self.id}: unknown knob {self.knob!r}")
        if self.direction not in ("helps", "hurts"):
            raise RecordError(f"claim {self.id}: direction must be helps or hurts, not {self.direction!r}")
        if self.knob in INT_KNOBS and self.value not in ("up", "down"):
            raise RecordError(f"claim {self.id}: {self.knob} claims take value up or down, not {self.value!r}")
        if not (self.alpha > 0 and self.beta > 0 and self.ratio > 0):
            raise RecordError(f"claim {self.id}: alpha, beta and ratio must be > 0")

    # -- matching ---------------------------------------------------------------------------
    @property
    def change(self) -> str:
        return f"{self.knob}={_value_text(self.value)}"

    def matches(self, knob: str, value: Any, start: Any, features: FeatureView) -> bool:
        """Does this claim speak about `knob: start -> value` for a job with these features?"""
        if knob != self.knob or change_value(knob, start, value) != self.value:
            return False
        if self.start is not None and self.start != start:
            return False
        return all(clause.holds(features) for clause in self.condition)

    # -- confidence -------------------------------------------------------------------------
    def agrees(self, evidence: Evidence) -> bool:
        return (evidence.outcome == "helps") == (self.direction == "helps")

    @property
    def agreements(self) -> int:
        return sum(self.agrees(e) for e in self.evidence)

    @property
    def posterior(self) -> tuple[float, float]:
        agree = self.agreements
        return self.alpha + agree, self.beta + len(self.evidence) - agree

    @property
    def confidence(self) -> float:
        """P(the claim holds where its condition does): the Beta posterior's mean."""
        a, b = self.posterior
        return a / (a + b)

    @property
    def uncertainty(self) -> float:
        """The Beta posterior's standard deviation: high for claims with little behind them."""
        a, b = self.posterior
        return math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))

    @property
    def expected_ratio(self) -> float:
        """The prior ratio pulled toward what was measured where the claim agreed (geometric mean,
        the prior weighing as much as its pseudo-counts)."""
        agreeing = [e.ratio for e in self.evidence if self.agrees(e) and e.ratio > 0]
        weight = self.alpha + self.beta
        log = (weight * math.log(self.ratio) + sum(math.log(r) for r in agreeing)) / (weight + len(agreeing))
        return math.exp(log)

    @property
    def active(self) -> bool:
        return self.status == "active"

    def with_evidence(self, *more: Evidence) -> "Claim":
        seen = {e.experiment for e in self.evidence}
        added = []
        for item in more:
            if item.experiment not in seen:
                seen.add(item.experiment)
                added.append(item)
        return replace(self, evidence=self.evidence + tuple(added)) if added else self

    # -- records ----------------------------------------------------------------------------
    def definition(self) -> ClaimDefinition:
        """The record written once to the claims table (evidence and status live in the history)."""
        return {"schema_version": 1, "id": self.id, "knob": self.knob, "value": self.value, "from": self.start,
                "direction": self.direction, "ratio": self.ratio, "condition": condition_text(self.condition),
                "alpha": self.alpha, "beta": self.beta, "source": self.source, "statement": self.statement,
                "relations": [{"kind": k, "change": c} for k, c in self.relations], "parent": self.parent,
                "origin": self.origin}

    def to_dict(self) -> JsonObject:
        """The folded view, for `kb show` and `suggest --json`."""
        a, b = self.posterior
        definition: Mapping[str, JsonValue] = cast("Mapping[str, JsonValue]", self.definition())  # JSON values all
        return {**definition, "status": self.status, "status_reason": self.status_reason,
                "confidence": round(self.confidence, 4), "posterior": [a, b],
                "expected_ratio": round(self.expected_ratio, 4),
                "evidence": [e.to_dict() for e in self.evidence]}

    @classmethod
    def from_definition(cls, data: Mapping[str, Any]) -> "Claim":
        try:
            return cls(id=str(data["id"]), knob=data["knob"], value=data["value"], direction=data["direction"],
                       ratio=float(data["ratio"]), condition=parse_condition(data.get("condition", "")),
                       alpha=float(data.get("alpha", 1.0)), beta=float(data.get("beta", 1.0)),
                       source=data.get("source", ""), statement=data.get("statement", ""), start=data.get("from"),
                       relations=tuple((r["kind"], r["change"]) for r in data.get("relations", ())),
                       parent=data.get("parent"), origin=data.get("origin", "prior"))
        except KeyError as missing:
            raise RecordError(f"claim {data.get('id', '?')}: missing field {missing}") from None


def _value_text(value: Any) -> str:
    return str(value) if not isinstance(value, bool) else str(value)


def describe(claim: Claim) -> str:
    """One line a person reads: the change, the direction and ratio, when, and how sure."""
    when = f" when {condition_text(claim.condition)}" if claim.condition else ""
    start = f" from {claim.start}" if claim.start is not None else ""
    return (f"{claim.change}{start} {claim.direction} (x{claim.expected_ratio:.2f}){when}; "
            f"confidence {claim.confidence:.2f} over {len(claim.evidence)} result(s)")


@dataclass(frozen=True)
class Update:
    """One proposed change to the beliefs; `Beliefs.apply` is what makes it so.

    op: confirm | weaken (one piece of evidence), split (the claim retires; `children` are the two
    refined claims), delete (retired for good, kept in the history), create (a new claim, in `children`).
    """

    op: str
    claim: str
    reason: str
    evidence: Evidence | None = None
    children: tuple[Claim, ...] = ()
    run: str = ""
