"""The value types the layers exchange, named once so that a signature says what it carries.

`KnobValue` is what one knob can be set to (the knob table's values and a script's parsed settings);
`KnobConfig` one whole configuration, knob name to value. `JsonValue` / `JsonObject` are what crosses
a JSON boundary (a schema-checked record on disk, a child's reply) before a typed view reads it: they
belong in `from_dict`/`to_dict` and the store, not in the logic between them. A JSON value's arrays and
objects are read-only here (Sequence, Mapping), so a `list[float]` or a `dict[str, str]` is one.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

KnobValue = Union[bool, int, float, str, None]
KnobConfig = dict[str, KnobValue]
KnobView = Mapping[str, KnobValue]

JsonScalar = Union[bool, int, float, str, None]
JsonValue = Union[JsonScalar, Sequence["JsonValue"], Mapping[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]

# The facts the frame's device probe measured in the child process (kind, name, memory_bytes, bf16, tf32,
# capability, flash_attn, compile, cpu_count, the optional packages, peaks, versions: probes/device.py),
# read by name. An open set: a probe adds facts without a change here, and a fact it could not read is absent.
Device = Mapping[str, Any]
