"""What a tune found and what it builds on: the incumbent config, the outcome, a record's figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..config.knobs import Knobs
from ..config.measurement import Measurement
from ..config.records import TrialRecord
from ..config.types import JsonObject
from ..probes.timing import median
from ..reasoner import Hypothesis


def summarize(measurements: Sequence[Measurement]) -> JsonObject:
    """A record's figures from its runs: median samples/s and tokens/s, the highest peak memory."""
    if not measurements:
        return {"samples_per_s": None, "tokens_per_s": None, "peak_memory_bytes": None}
    tokens = [m.tokens_per_s for m in measurements if m.tokens_per_s is not None]
    return {"samples_per_s": median([m.samples_per_s for m in measurements]),
            "tokens_per_s": median(tokens) if tokens else None,
            "peak_memory_bytes": max((m.peak_memory.bytes for m in measurements if m.peak_memory), default=None)}


def kept_product(records: Sequence[TrialRecord]) -> float:
    product = 1.0
    for record in records:
        if record.decision == "keep":
            product *= record.ratio or 0.0
    return product


def card(placement: Mapping[str, str] | None) -> str | None:
    """One GPU of a cluster, from an executor's placement (node and device index); None for the one device
    of a local or SSH run."""
    if not placement:
        return None
    return f"{placement.get('node_id') or placement.get('node')}/{placement.get('gpu')}"


@dataclass
class Incumbent:
    knobs: Knobs
    samples: list[float]
    trial: int
    runs: list[list[float]] = field(default_factory=list)  # step times of every run of this config
    profile: JsonObject = field(default_factory=dict)  # its latest ceiling and time breakdown
    cards: list[str | None] = field(default_factory=list)  # the GPU each run was on (None: the one device)

    def add(self, measurement: Measurement, placement: Mapping[str, str] | None = None,
            replayed: bool = False) -> None:
        """One run of this config; `placement`: its trial's, for a measurement that does not carry its own
        (records made before measurements did, or a knowledge base's copy). A trial's runs share one card.
        `replayed`: a run of another session, read back from the knowledge base. It counts as a card of
        its own, so no run of this session is compared with it: the machine may have sped up or slowed
        down since (load, clocks), and a change measured against it would carry that drift as its gain."""
        self.samples.append(measurement.samples_per_s)
        self.runs.append(list(measurement.step_times_s))
        where = card(measurement.placement or placement)
        self.cards.append(f"replayed:{where}" if replayed else where)
        if measurement.ceiling:
            self.profile["ceiling"] = measurement.ceiling.to_dict()
        if measurement.breakdown:
            self.profile["breakdown"] = measurement.breakdown

    def runs_on(self, placement: Mapping[str, str] | None) -> list[list[float]]:
        """This config's runs on the card `placement` names: two cards of one model differ by several
        percent, so a comparison uses one card's runs only. Runs with no placement share one device."""
        where = card(placement)
        return [run for run, on in zip(self.runs, self.cards) if on == where]

    def samples_on(self, placement: Mapping[str, str] | None) -> list[float]:
        """The samples/s of those runs (`runs_on`), as each measurement gave it."""
        where = card(placement)
        return [speed for speed, on in zip(self.samples, self.cards) if on == where]

    @property
    def speed(self) -> float:
        return median(self.samples)


@dataclass
class Outcome:
    """What a run found, for the CLI and the report."""

    frame: JsonObject  # the completed frame (limits.Frame)
    baseline: JsonObject  # the baseline's samples_per_s and first measurement
    best: Incumbent
    records: list[TrialRecord]
    skipped: list[tuple[str, str]]
    noise_floor: float
    stop_reason: str
    wall_s: float = 0.0
    best_measurement: Measurement | None = None
    parallel: JsonObject | None = None  # trials run at once on several GPUs: how, and the time saved
    device_runs: int = 0  # runs in a child process on the device, baseline included (what the user waits for)
    device_s: float = 0.0  # their wall times (the complete ones', start-up included)

    @property
    def best_speed(self) -> float:
        """Samples/s of the best config, from its own trial (the baseline's when nothing was kept)."""
        if self.best.trial == 0:
            speed = self.baseline["samples_per_s"]
            return float(speed) if isinstance(speed, (int, float)) else 0.0
        return next(r.samples_per_s or 0.0 for r in self.records if r.trial == self.best.trial)

    @property
    def speedup(self) -> float:
        """Best against baseline as the product of the kept changes' interleaved ratios: each was
        measured side by side with its incumbent, so the machine's drift over the run cancels."""
        return kept_product(self.records)
    folder: Path = field(default_factory=Path)
    best_config: JsonObject = field(default_factory=dict)  # best_config.json, once a tune wrote it


@dataclass(frozen=True)
class Asked:
    """What `Tuner.ask` says: the hypotheses to try on the incumbent, best first; the changes skipped and
    why; why the search beyond the ranked singles is spent, if it says so; why to stop now (a budget)."""

    hypotheses: list[Hypothesis]
    skipped: list[tuple[str, str]]
    spent: str | None = None
    stop: str | None = None


@dataclass(frozen=True)
class Started:
    """What `Tuner.begin` found: the completed frame, the baseline as the first incumbent, the
    baseline's first measurement (every parity check's reference) and the A/A noise floor."""

    frame: JsonObject
    incumbent: Incumbent
    base_measurement: Measurement
    noise_floor: float
