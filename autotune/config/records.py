"""Typed views of what the loop records: who proposed a change (`Source`), a change as a tuple of single
changes, and one trial's record (`TrialRecord`) with the fallbacks every reader needs in one place.

The stored form stays the JSON of schemas/experiment.json (old run folders and knowledge bases load as
they are): `TrialRecord.from_dict` reads one (validating it where asked) and `to_dict` gives it back
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping

from ..util.errors import RecordError
from .measurement import Decision, Measurement
from .types import JsonObject, KnobView

# One change as (knob, value) pairs; a combined change has several.
Changes = tuple[tuple[str, Any], ...]


class Source(str, Enum):
    """Who proposed a hypothesis. A str, so records keep writing the plain word."""

    RANK = "rank"                # the beliefs' ranking, one change on the incumbent
    WARM_START = "warm_start"    # a similar job's best config, all at once
    WARM_CHECK = "warm_check"    # the warm start's parts checked
    LLM = "llm"                  # the LLM proposer
    POOLED = "pooled"            # changes each within the noise, made together
    MODEL = "model"              # the surrogate of all trials
    REVERT = "revert"            # one part of a kept combined change undone
    FIT = "fit"                  # what makes the start config fit in memory (suggest)

    def __str__(self) -> str:
        return self.value

    def __hash__(self) -> int:  # as the word's, so a word finds its member in a set (every Python version)
        return hash(self.value)


# Sources of combined changes whose parts were never measured alone on the incumbent they were kept on.
UNSPLIT_SOURCES = frozenset({Source.WARM_START, Source.WARM_CHECK, Source.POOLED, Source.MODEL})


def change_text(changes: Changes) -> str:
    """`knob=value+knob=value`, the form records and reports write."""
    return "+".join(f"{knob}={value}" for knob, value in changes)


def parse_change(text: str | None) -> tuple[tuple[str, str], ...]:
    """A recorded change's single changes, values as written (`None`, the baseline: none)."""
    if not text:
        return ()
    return tuple((knob, value) for knob, _, value in (part.partition("=") for part in text.split("+")))


@dataclass(frozen=True)
class SpreadPrior:
    """The run-to-run spread of this device's past runs that a baseline's record brought (a few df)."""

    sd: float
    df: int
    runs: int = 0  # how many past runs the spread was pooled from


@dataclass(frozen=True)
class TrialRecord(Mapping[str, Any]):
    """One record of experiments.jsonl, as the reasoner and the loop read it.

    Also a read-only mapping over the stored record: the output layer (report, display, trackers)
    reads records as the JSON they are written as."""

    trial: int
    change: str | None
    knobs: KnobView
    state: str
    decision: str
    reason: str = ""
    ratio: float | None = None
    interval: tuple[float, float] | None = None
    noise_floor: float | None = None
    samples_per_s: float | None = None
    replayed_state: str | None = None
    source: Source | None = None
    measurements: tuple[Measurement, ...] = ()
    spread_prior: SpreadPrior | None = None
    placement: dict[str, str] | None = None
    wall_s: float = 0.0
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getitem__(self, name: str) -> Any:
        return self.raw[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def decided(self) -> Decision:
        """What the loop decided on this trial, and the comparison behind it."""
        return Decision.from_dict(self.raw)

    @property
    def outcome(self) -> str:
        """The trial's state as measured: a replayed trial's is the state of the trial it replays."""
        return self.replayed_state or self.state

    @property
    def changes(self) -> tuple[tuple[str, str], ...]:
        return parse_change(self.change)

    @property
    def combined(self) -> bool:
        return len(self.changes) > 1

    @property
    def replayed(self) -> bool:
        """Read back from the knowledge base (another session's runs), not measured in this tune."""
        return bool(self.raw.get("replayed_from"))

    @property
    def lost(self) -> bool:
        """Measured slower than its incumbent beyond the noise floor."""
        floor = self.noise_floor or 0.0
        return (self.outcome == "complete" and self.decision == "discard" and self.interval is not None
                and self.interval[1] < 1 - floor)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], validate: bool = False) -> "TrialRecord":
        """One stored record; `validate`: check it against experiment.json first (a file read back)."""
        if validate:
            from ..schemas import violation

            problem = violation("experiment", dict(data))
            if problem:
                raise RecordError(f"trial record {data.get('trial')} is {problem}")
        hypothesis = data.get("hypothesis") or {}
        source = hypothesis.get("source")
        interval, prior = data.get("interval"), data.get("spread_prior")
        # What a reader needs and nothing more: callers build partial records (the reasoner's tests, a replay).
        return cls(trial=int(data.get("trial", -1)), change=data.get("change"), knobs=data.get("knobs") or {},
                   state=data.get("state", ""), decision=data.get("decision", ""), reason=data.get("reason") or "", ratio=data.get("ratio"),
                   interval=(float(interval[0]), float(interval[1])) if interval else None,
                   noise_floor=data.get("noise_floor"), samples_per_s=data.get("samples_per_s"),
                   replayed_state=data.get("replayed_state"),
                   source=Source(source) if source in Source._value2member_map_ else None,
                   measurements=tuple(Measurement.from_dict(m) for m in data.get("measurements") or ()),
                   spread_prior=SpreadPrior(prior["sd"], prior["df"], prior.get("runs", 0)) if prior else None,
                   placement=data.get("placement"), wall_s=float(data.get("wall_s") or 0.0), raw=data)

    def to_dict(self) -> JsonObject:
        """The stored record, as it was read."""
        return dict(self.raw)


# A record as the reasoner takes it: typed, or as stored (converted on the way in).
RecordLike = TrialRecord | Mapping[str, Any]


def typed(records: Iterable[RecordLike]) -> list[TrialRecord]:
    """Records as TrialRecords, whether they come as stored dicts or typed already."""
    return [r if isinstance(r, TrialRecord) else TrialRecord.from_dict(r) for r in records]
