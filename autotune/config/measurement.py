"""Typed views of what a run measured (`Measurement`, carried by messages.RunResult) and what the loop
decided on a trial (`Decision`, with its `Parity` check).

Their stored form is the JSON of autotune/schemas/ (measurement.json, the decision fields of
experiment.json), unchanged: `from_dict` reads it (checking it against its schema where asked: a file
read back; a child's result is checked whole by messages.read_result), `to_dict` gives it back in the
order it was read, so old run folders and knowledge bases load as they are and what is written stays
what was written before. The fields the loop reads are typed; the rest of a measurement (environment,
NVML, FLOPs...) rides along in `rest`, free-form JSON the loop never looks into.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..util.errors import RecordError
from .types import JsonObject

# The keys a Measurement types; every other key of a stored measurement is kept in `rest`.
_TYPED = ("device", "samples_per_s", "tokens_per_s", "step_times_s", "peak_memory", "parity_losses",
          "parity_rows", "parity_note", "ceiling", "ceiling_unchecked", "breakdown", "placement", "model", "data")


def _checked(name: str, data: Mapping[str, Any], what: str) -> None:
    from ..schemas import violation

    problem = violation(name, dict(data))
    if problem:
        raise RecordError(f"{what} is {problem}")


def _ordered(values: JsonObject, keys: tuple[str, ...]) -> JsonObject:
    """`values` in the order a stored record had its keys (`keys`), keys it did not have after them."""
    first = {k: values[k] for k in keys if k in values}
    return {**first, **{k: v for k, v in values.items() if k not in first}}


@dataclass(frozen=True)
class PeakMemory:
    """The highest memory a run used: the CUDA allocator's peak, or the process's peak RSS on a CPU."""

    kind: str
    bytes: int


@dataclass(frozen=True)
class Ceiling:
    """The worst-case batch's peak (a longest-rows batch at max_len) against the device's limit."""

    bytes: int
    limit_bytes: int
    raw: JsonObject = field(default_factory=dict, compare=False, repr=False)

    def to_dict(self) -> JsonObject:
        return dict(self.raw)


@dataclass(frozen=True)
class Measurement:
    """What one run measured on the device (schemas/measurement.json): speed, step times, peak memory,
    the parity steps' per-row losses, where it ran. A partial one (a test's, a simulation's) needs only
    `samples_per_s` and `step_times_s`."""

    samples_per_s: float
    step_times_s: tuple[float, ...]
    tokens_per_s: float | None = None
    device: str | None = None
    peak_memory: PeakMemory | None = None
    parity_losses: dict[str, list[float]] | None = None  # the two parity steps' per-row losses
    parity_rows: JsonObject | None = None
    parity_note: str | None = None
    ceiling: Ceiling | None = None
    ceiling_unchecked: str | None = None
    breakdown: JsonObject | None = None
    placement: dict[str, str] | None = None
    model: JsonObject | None = None
    data: JsonObject | None = None
    rest: JsonObject = field(default_factory=dict)
    # Which typed keys the stored form had (a null parity_losses is written back as null) and their order.
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], validate: bool = False) -> "Measurement":
        if validate:
            _checked("measurement", data, "a measurement")
        peak, ceiling = data.get("peak_memory"), data.get("ceiling")
        return cls(samples_per_s=data["samples_per_s"], step_times_s=tuple(data["step_times_s"]),
                   tokens_per_s=data.get("tokens_per_s"), device=data.get("device"),
                   peak_memory=PeakMemory(peak["kind"], peak["bytes"]) if peak else None,
                   parity_losses=data.get("parity_losses"), parity_rows=data.get("parity_rows"),
                   parity_note=data.get("parity_note"),
                   ceiling=Ceiling(ceiling["bytes"], ceiling["limit_bytes"], dict(ceiling)) if ceiling else None,
                   ceiling_unchecked=data.get("ceiling_unchecked"), breakdown=data.get("breakdown"),
                   placement=data.get("placement"), model=data.get("model"), data=data.get("data"),
                   rest={k: v for k, v in data.items() if k not in _TYPED}, keys=tuple(data))

    def to_dict(self, validate: bool = False) -> JsonObject:
        """The stored form, keys in the order they were read (a key set since, such as `placement`, last)."""
        values: JsonObject = {
            "device": self.device, "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s,
            "step_times_s": list(self.step_times_s),
            "peak_memory": None if self.peak_memory is None else {"kind": self.peak_memory.kind,
                                                                  "bytes": self.peak_memory.bytes},
            "parity_losses": self.parity_losses, "parity_rows": self.parity_rows, "parity_note": self.parity_note,
            "ceiling": None if self.ceiling is None else self.ceiling.to_dict(),
            "ceiling_unchecked": self.ceiling_unchecked, "breakdown": self.breakdown, "placement": self.placement,
            "model": self.model, "data": self.data}
        # A typed key is written when it holds a value, or when the stored form had it (a null kept null).
        kept = {k: v for k, v in values.items() if v is not None or k in self.keys}
        out: JsonObject = _ordered({**kept, **self.rest}, self.keys)
        if validate:
            _checked("measurement", out, "a measurement")
        return out

    @property
    def window_tokens(self) -> int | None:
        """The real (unpadded) tokens of the measured steps, where the runner counted them."""
        tokens = self.rest.get("real_tokens_per_step")
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, (int, float)) for t in tokens):
            return None
        total = int(sum(tokens))
        return total or None

    def at_work(self, reference_tokens: int | None) -> "Measurement":
        """This measurement at the work of a reference window: its step times scaled by how many real
        tokens its measured steps trained against the reference's (`reference_tokens`).

        A user's script draws its own rows: where a setting changes which rows its measured steps see
        (length grouping, a sampler's order), rows per second over that window mostly says which rows
        landed there (a window of short rows looks fast). Time per real token does not. Where the window
        trained the reference's tokens (the same rows, in any split), the measurement is returned as it
        is, so every other comparison stays exactly what it was. The raw figures stay in `work_normalized`."""
        own = self.window_tokens
        if not reference_tokens or not own or own == reference_tokens:
            return self
        from dataclasses import replace

        factor = own / reference_tokens  # over 1: this window trained more tokens than the reference's
        note = {"window_tokens": own, "reference_tokens": reference_tokens, "factor": round(factor, 6),
                "raw_samples_per_s": self.samples_per_s}
        return replace(self, samples_per_s=self.samples_per_s * factor,
                       step_times_s=tuple(t / factor for t in self.step_times_s),
                       rest={**self.rest, "work_normalized": note})

    @property
    def work_factor(self) -> float | None:
        """How many times the reference's real tokens this window trained, where `at_work` scaled it."""
        note = self.rest.get("work_normalized")
        factor = note.get("factor") if isinstance(note, dict) else None
        return float(factor) if isinstance(factor, (int, float)) else None

    def placed(self, placement: dict[str, str] | None) -> "Measurement":
        """This measurement with the card it ran on (an executor with several GPUs says which)."""
        from dataclasses import replace

        return replace(self, placement=placement)


@dataclass(frozen=True)
class Parity:
    """The parity check of a trial's per-row losses against the reference's: whether it holds and why
    (probes/parity.py, probes/row_parity.py); the probe's other figures (worst, tolerance, kind) in `raw`."""

    ok: bool
    reason: str
    raw: JsonObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Parity":
        return cls(ok=bool(data["ok"]), reason=str(data.get("reason") or ""), raw=dict(data))

    def to_dict(self) -> JsonObject:
        return {**self.raw, "ok": self.ok, "reason": self.reason}

    def noted(self, note: str) -> "Parity":
        """This check with `note` added to its reason."""
        return Parity(self.ok, self.reason + note, self.raw)


@dataclass(frozen=True)
class Decision:
    """What the loop decided on a trial (the decision fields of schemas/experiment.json): keep, discard
    or baseline, why, and the comparison behind it (the ratio to the incumbent, its interval and
    confidence, the noise floor, the incumbent's speed, the parity check)."""

    decision: str
    reason: str
    ratio: float | None = None
    interval: tuple[float, float] | None = None
    confidence: float | None = None
    noise_floor: float | None = None
    incumbent_samples_per_s: float | None = None
    parity: Parity | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], validate: bool = False) -> "Decision":
        """The decision of a stored trial record (older records lack `interval` and `confidence`)."""
        if validate:
            _checked("experiment", data, f"trial record {data.get('trial')}")
        interval = data.get("interval")
        return cls(decision=data["decision"], reason=data.get("reason") or "", ratio=data.get("ratio"),
                   interval=(float(interval[0]), float(interval[1])) if interval else None,
                   confidence=data.get("confidence"), noise_floor=data.get("noise_floor"),
                   incumbent_samples_per_s=data.get("incumbent_samples_per_s"),
                   parity=Parity.from_dict(data["parity"]) if data.get("parity") else None)

    def to_dict(self) -> JsonObject:
        """The record's decision fields; `interval` and `confidence` only where a comparison was made."""
        out: JsonObject = {"decision": self.decision, "reason": self.reason, "ratio": self.ratio,
                               "incumbent_samples_per_s": self.incumbent_samples_per_s,
                               "noise_floor": self.noise_floor,
                               "parity": None if self.parity is None else self.parity.to_dict()}
        if self.interval is not None:
            out.update(interval=list(self.interval), confidence=self.confidence)
        return out
