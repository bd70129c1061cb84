"""The value types the layers exchange, named once so that a signature says what it carries.

`KnobValue` is what one knob can be set to (the knob table's values and a script's parsed settings);
`KnobConfig` one whole configuration, knob name to value. `JsonValue` / `JsonObject` are what crosses
a JSON boundary (a schema-checked record on disk, a child's reply) before a typed view reads it: they
belong in `from_dict`/`to_dict` and the store, not in the logic between them. A JSON value's arrays and
objects are read-only here (Sequence, Mapping), so a `list[float]` or a `dict[str, str]` is one.
"""

from __future__ import annotations

from typing import Mapping, Sequence, TypedDict, Union, cast

KnobValue = Union[bool, int, float, str, None]
KnobConfig = dict[str, KnobValue]
KnobView = Mapping[str, KnobValue]

JsonScalar = Union[bool, int, float, str, None]
JsonValue = Union[JsonScalar, Sequence["JsonValue"], Mapping[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]

# The device facts the frame's probe measures (probes/device.py) and the peaks among them (probes/peaks.py).
# They travel as JSON inside the frame (the frame step's reply, frame.json, state.json's `frame_facts`) and
# the peaks cache, so they stay dicts: TypedDicts, whose keys mypy checks at every reader. Every key may be
# absent: a frame from before a fact existed, a probe that could not read it, a test's few facts.


class Peaks(TypedDict, total=False):
    """This device's measured peaks (probes/peaks.py), cached by the parent per `fingerprint`."""

    fingerprint: str
    matmul_flops: dict[str, float]    # FLOP/s by precision (0: a dtype the device cannot multiply)
    matmul_size: dict[str, int]       # the product's size by precision (a slow emulated one: the probe size)
    copy_bytes_per_s: float
    measured_at: str
    cached: bool                      # read from the cache, not measured in this frame


# Peaks by device fingerprint: what the knowledge base hands the frame so a known card is not re-measured.
PeakCache = Mapping[str, Peaks]


class DeviceFacts(TypedDict, total=False):
    """What this device and install can do: the facts that decide which knobs are tried."""

    kind: str                 # "cuda" or "cpu"
    name: str
    memory_bytes: int
    cpu_count: int
    capability: str           # CUDA compute capability, "9.0"
    cuda: str | None          # torch.version.cuda
    bf16: bool
    bf16_reason: str          # why bf16 is off although the device has it (it is emulated: slower than fp32)
    fp16: bool
    fp16_reason: str
    tf32: bool
    flash_attn: bool
    flash_attn_3: bool
    hub_flash: bool           # transformers can load the Hub's flash-attention kernel here
    hub_flash_reason: str
    compile: bool
    compile_reason: str
    fused_adamw: bool
    liger: bool
    bitsandbytes: bool
    torchao: bool
    torch: str
    transformers: str
    python: str
    peaks: Peaks
    matmul_tflops: dict[str, float]


def device_facts_of(value: object) -> DeviceFacts:
    """The device facts a frame holds (JSON our own probe wrote), none where it holds none."""
    return cast(DeviceFacts, value) if isinstance(value, Mapping) else DeviceFacts()


def peaks_json(peaks: Peaks) -> JsonObject:
    """The peaks as the JSON object state.json stores: every value of Peaks is JSON, but mypy reads a
    TypedDict as a Mapping of `object` only."""
    return cast(JsonObject, dict(peaks))


# The device facts by the name the layers' signatures give them.
Device = DeviceFacts
