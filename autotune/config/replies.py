"""What a runner child writes back, as the parent reads it: a frame's facts (the device, the model, the
data, the limits) and a trial's measurement document, with the memory peaks in both. TypedDicts, not
dataclasses: they are JSON documents (frame.json, schemas/measurement.json) whose every key travels in
its order; messages.RunResult carries them and the loop reads them by these keys.
"""

from __future__ import annotations

from typing import TypedDict

from .types import Device, JsonObject


# What a frame found, as the parent reads it (frame.json; loop/ and reasoner/ read it by these keys).
class ModelFacts(TypedDict, total=False):
    """The model's shape (a VLM's: its language model's, the tower's size under `vision`)."""

    source: str
    model_type: str
    params: int
    trainable_params: int
    layers: int | None
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    intermediate: int | None
    vocab: int | None
    vision: dict[str, int]


class DataFacts(TypedDict, total=False):
    """The rows' length spread (engine/data.py length_facts) and, for image-text rows, their images."""

    dataset: str
    rows_available: int
    rows_sampled: int
    mean_len: float
    p10_len: int
    p50_len: int
    p90_len: int
    max_seen_len: int
    padding_share: float
    truncated_share: float
    images_per_row: float
    image_token_share: float
    p50_image_tokens: int
    rows_skipped_share: float


class FrameFacts(TypedDict, total=False):
    """A complete frame's facts: the device, the model, the data, and the knobs it rules out (`limits`:
    {knob, value?, silent, reason}); a script's frame adds the listing of its settings."""

    device: Device
    model: ModelFacts
    data: DataFacts
    limits: list[JsonObject]
    script: list[str]


class FrameReply(TypedDict):
    """What a runner's frame returns (messages.RunResult's `frame`)."""

    frame: FrameFacts


class PeakReading(TypedDict, total=False):
    """A memory peak as probes/memory.py reads it; a worst-case batch's (`ceiling`) adds its limit and
    whether it fits, and a script's the batch's shape."""

    kind: str
    bytes: int
    allocated_bytes: int
    limit_bytes: int
    fits: bool
    shape: str
    reason: str


class MeasurementDoc(TypedDict, total=False):
    """A trial's measurement as the child writes it (schemas/measurement.json; the parent reads it as a
    `Measurement`). A document, not the dataclass: every key the child measured travels, in its order."""

    device: str
    samples_per_s: float
    tokens_per_s: float
    median_step_s: float
    step_times_s: list[float]
    warmup_times_s: list[float]
    real_tokens_per_step: list[int]
    model_flops: float
    hardware_flops: float
    mfu: float | None
    hfu: float | None
    peak_flops: float | None
    peak_remeasured: dict[str, float | str | None]
    peak_memory: PeakReading
    parity_losses: dict[str, list[float]] | None
    parity_rows: JsonObject | None
    parity_note: str | None
    final_loss: float
    breakdown: dict[str, float] | None
    nvml: JsonObject | None
    env: dict[str, str | int | None]
    ceiling: PeakReading
    ceiling_unchecked: str
    model: JsonObject
    data: JsonObject
    tree: JsonObject
    observed: JsonObject


class TrialReply(TypedDict):
    """What a runner's complete trial returns."""

    measurement: MeasurementDoc
