"""What `autotune.suggest(...)` returns: the advice from the beliefs alone, typed. `to_dict()` is the
object `autotune suggest ... --json` prints."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.types import JsonObject, JsonValue


@dataclass(frozen=True)
class SuggestedChange:
    """One change worth trying, best first: how likely it helps, by how much, at what cost to measure."""

    change: str
    p_helps: float
    expected_ratio: float
    cost: float
    score: float
    claims: tuple[str, ...]
    rationale: str
    source: str
    sources: tuple[str, ...]   # where the claims behind it come from (a paper, a guide, a run)

    @classmethod
    def from_dict(cls, data: JsonObject) -> SuggestedChange:
        return cls(change=str(data["change"]), p_helps=_number(data["p_helps"]),
                   expected_ratio=_number(data["expected_ratio"]), cost=_number(data["cost"]),
                   score=_number(data["score"]), claims=_strings(data.get("claims")),
                   rationale=str(data.get("rationale", "")), source=str(data.get("source", "")),
                   sources=_strings(data.get("sources")))

    def to_dict(self) -> JsonObject:
        return {"change": self.change, "p_helps": self.p_helps, "expected_ratio": self.expected_ratio,
                "cost": self.cost, "score": self.score, "claims": list(self.claims), "rationale": self.rationale,
                "source": self.source, "sources": list(self.sources)}


@dataclass(frozen=True)
class Skipped:
    change: str
    why: str


@dataclass(frozen=True)
class Advice:
    features: JsonObject          # what the advice was judged on (the job's shape, the card, the start config)
    start: JsonObject             # the start config's knobs
    notes: tuple[str, ...]        # what is unknown or estimated, and what does not fit
    changes: tuple[SuggestedChange, ...]
    skipped: tuple[Skipped, ...]  # changes the job rules out, with the reason
    schema_version: int = 1

    @property
    def best(self) -> SuggestedChange | None:
        return self.changes[0] if self.changes else None

    @classmethod
    def from_dict(cls, data: JsonObject) -> Advice:
        hypotheses, skipped, notes = data["hypotheses"], data["skipped"], data["notes"]
        assert isinstance(hypotheses, list) and isinstance(skipped, list) and isinstance(notes, list)
        features, start = data["features"], data["start"]
        assert isinstance(features, dict) and isinstance(start, dict)
        return cls(features=features, start=start, notes=tuple(str(n) for n in notes),
                   changes=tuple(SuggestedChange.from_dict(h) for h in hypotheses if isinstance(h, dict)),
                   skipped=tuple(Skipped(str(s["change"]), str(s["why"])) for s in skipped if isinstance(s, dict)))

    def to_dict(self) -> JsonObject:
        return {"schema_version": self.schema_version, "features": self.features, "start": self.start,
                "notes": list(self.notes), "hypotheses": [c.to_dict() for c in self.changes],
                "skipped": [{"change": s.change, "why": s.why} for s in self.skipped]}


def _number(value: JsonValue) -> float:
    assert isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value)


def _strings(value: JsonValue) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()
