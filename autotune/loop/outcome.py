"""What a tune found and what it builds on: the incumbent config, the outcome, a record's figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.knobs import Knobs
from ..probes.timing import median
from ..reasoner import Hypothesis


def summarize(measurements: list[dict[str, Any]]) -> dict[str, Any]:
    """A record's figures from its runs: median samples/s and tokens/s, the highest peak memory."""
    if not measurements:
        return {"samples_per_s": None, "tokens_per_s": None, "peak_memory_bytes": None}
    return {"samples_per_s": median([m["samples_per_s"] for m in measurements]),
            "tokens_per_s": median([m["tokens_per_s"] for m in measurements]),
            "peak_memory_bytes": max(m["peak_memory"]["bytes"] for m in measurements)}


def kept_product(records: list[dict[str, Any]]) -> float:
    product = 1.0
    for record in records:
        if record["decision"] == "keep":
            product *= record["ratio"]
    return product


def card(placement: dict[str, Any] | None) -> str | None:
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
    profile: dict[str, Any] = field(default_factory=dict)  # its latest ceiling and time breakdown
    cards: list[str | None] = field(default_factory=list)  # the GPU each run was on (None: the one device)

    def add(self, measurement: dict[str, Any], placement: dict[str, Any] | None = None) -> None:
        """One run of this config; `placement`: its trial's, for a measurement that does not carry its own
        (records made before measurements did, or a knowledge base's copy). A trial's runs share one card."""
        self.samples.append(measurement["samples_per_s"])
        self.runs.append(measurement["step_times_s"])
        self.cards.append(card(measurement.get("placement") or placement))
        self.profile.update({k: measurement[k] for k in ("ceiling", "breakdown") if measurement.get(k)})

    def runs_on(self, placement: dict[str, Any] | None) -> list[list[float]]:
        """This config's runs on the card `placement` names: two cards of one model differ by several
        percent, so a comparison uses one card's runs only. Runs with no placement share one device."""
        where = card(placement)
        return [run for run, on in zip(self.runs, self.cards) if on == where]

    def samples_on(self, placement: dict[str, Any] | None) -> list[float]:
        """The samples/s of those runs (`runs_on`), as each measurement gave it."""
        where = card(placement)
        return [speed for speed, on in zip(self.samples, self.cards) if on == where]

    @property
    def speed(self) -> float:
        return median(self.samples)


@dataclass
class Outcome:
    """What a run found, for the CLI and the report."""

    frame: dict[str, Any]
    baseline: dict[str, Any]
    best: Incumbent
    records: list[dict[str, Any]]
    skipped: list[tuple[str, str]]
    noise_floor: float
    stop_reason: str
    wall_s: float = 0.0
    best_measurement: dict[str, Any] | None = None
    parallel: dict[str, Any] | None = None  # trials run at once on several GPUs: how, and the time saved
    device_runs: int = 0  # runs in a child process on the device, baseline included (what the user waits for)
    device_s: float = 0.0  # their wall times (the complete ones', start-up included)

    @property
    def best_speed(self) -> float:
        """Samples/s of the best config, from its own trial (the baseline's when nothing was kept)."""
        best = self.baseline if self.best.trial == 0 else next(r for r in self.records if r["trial"] == self.best.trial)
        speed: float = best["samples_per_s"]
        return speed

    @property
    def speedup(self) -> float:
        """Best against baseline as the product of the kept changes' interleaved ratios: each was
        measured side by side with its incumbent, so the machine's drift over the run cancels."""
        return kept_product(self.records)
    folder: Path = field(default_factory=Path)
    best_config: dict[str, Any] = field(default_factory=dict)  # best_config.json, once a tune wrote it


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

    frame: dict[str, Any]
    incumbent: Incumbent
    base_measurement: dict[str, Any]
    noise_floor: float
