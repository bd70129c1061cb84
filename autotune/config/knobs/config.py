"""One configuration (`Knobs`), built from the table, and what the table's entries answer together.

`max_len` and `effective_batch` are the user's and are not knobs; the micro-batch / accumulation split
is, and their product always equals `effective_batch`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from ...util.errors import JobError
from ..inputs import check_digits
from ..types import Device, JsonObject, KnobConfig
from .entry import Knob
from .table import TABLE

CATALOG: dict[str, Knob] = {knob.name: knob for knob in TABLE}

# Settings that change what is trained beyond precision noise: tried only with allow_numerics_change=true,
# and their parity is held to this tolerance (relative, per-row loss), with the reason the report gives.
NUMERICS: dict[tuple[str, Any], tuple[float, str]] = {
    (knob.name, value): (tolerance, why) for knob in TABLE for value, tolerance, why in knob.numerics}

# The knobs the ranking tries, in its tie order, with the values each tries.
CATALOG_ORDER: tuple[tuple[str, tuple[Any, ...]], ...] = tuple(
    (knob.name, knob.tries) for knob in sorted(TABLE, key=lambda knob: knob.rank))

# Pairs whose effects are known to depend on each other (reasoner/links.py).
INTERACTIONS: frozenset[frozenset[str]] = frozenset(
    frozenset((knob.name, other)) for knob in TABLE for other in knob.interacts)

# The config many people start with: pad to max length, micro-batch 1, fp32, eager attention.
NAIVE_START: KnobConfig = {knob.name: knob.naive for knob in TABLE}
_PYTHON_TYPE = {"bool": bool, "int": int, "choice": str}


def numerics_changes(knobs: Any) -> list[tuple[str, Any]]:
    """The settings of `knobs` that change the numbers (see NUMERICS)."""
    return [(name, value) for name, value in knobs.to_dict().items() if (name, value) in NUMERICS]


def numerics_limits(allowed: bool) -> list[JsonObject]:
    """The frame limits that keep numerics-changing settings untried unless the user allowed them."""
    if allowed:
        return []
    return [{"knob": name, "value": value, "silent": False,
             "reason": "changes the numbers beyond precision noise; allow it with allow_numerics_change=true"}
            for name, value in NUMERICS]


class _KnobsMethods:
    """What a Knobs does; its fields come from the table, one per entry."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            knob, value = CATALOG[field.name], getattr(self, field.name)
            if knob.kind == "bool" and not isinstance(value, bool):
                raise JobError(f"{knob.name}={value!r}: expected true or false")
            if knob.kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0
                                       or value > knob.maximum):
                raise JobError(f"{knob.name}={value!r}: expected a whole number from {knob.minimum:,} to "
                               f"{knob.maximum:,}")
            if knob.kind == "choice" and value not in knob.choices:
                raise JobError(f"{knob.name}={value!r}: expected one of {', '.join(map(str, knob.choices))}")
            if knob.kind == "int" and value < knob.minimum:
                raise JobError(f"{knob.name} must be >= {knob.minimum}")

    def with_change(self, name: str, value: Any) -> Any:
        return dataclasses.replace(self, **{name: value})  # type: ignore[type-var]

    def to_dict(self) -> KnobConfig:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        return cls(**{k: v for k, v in data.items() if k in CATALOG})

    def accumulation(self, effective_batch: int) -> int:
        return effective_batch // int(getattr(self, "per_device_train_batch_size"))

    def diff(self, other: Any) -> dict[str, tuple[Any, Any]]:
        """Knobs whose value differs: name -> (self's, other's)."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}


# One configuration, validated on construction: a frozen dataclass with one field per table entry, in
# its order, defaulting to the naive value (records written before a knob existed load with it so).
Knobs: Any = dataclasses.make_dataclass(
    "Knobs", [(knob.name, _PYTHON_TYPE[knob.kind], dataclasses.field(default=knob.naive)) for knob in TABLE],
    bases=(_KnobsMethods,), frozen=True, namespace={"__module__": "autotune.config.knobs"})
Knobs.__doc__ = "One configuration; validated on construction."


def parse_knob_value(name: str, text: str) -> Any:
    """A knob's value from its command-line text; one clear line when it does not parse."""
    knob = CATALOG[name]
    if knob.kind == "bool":
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise JobError(f"{name}={text!r}: expected true or false")
    if knob.kind == "int":
        check_digits(name, text)
        if not re.fullmatch(r"[0-9]+", text.strip()):
            raise JobError(f"{name}={text!r}: expected a whole number, for example {name}=2")
        if not knob.minimum <= int(text) <= knob.maximum:
            raise JobError(f"{name}={text}: expected a whole number from {knob.minimum:,} to {knob.maximum:,}")
        return int(text)
    if text not in knob.choices:
        raise JobError(f"{name}={text!r}: expected one of {', '.join(map(str, knob.choices))}")
    return text


def not_applicable(name: str, value: Any, knobs: Any, device: Device, effective_batch: int) -> str | None:
    """Why `name=value` cannot be tried on top of `knobs` on this device and install; None if it can:
    the knob's own `requires` (device, installed packages, other knobs)."""
    knob = CATALOG.get(name)
    if knob is None or knob.requires is None:
        return None
    return knob.requires(value, knobs, device, effective_batch)


def job_limits(method: str, numerics_allowed: bool) -> list[JsonObject]:
    """Frame limits that follow from the job rather than the device: what only a LoRA base can change,
    and the numerics-changing settings the user did not allow."""
    limits = numerics_limits(numerics_allowed)
    if method != "lora":
        limits += [{"knob": name, "silent": False, "reason": "a full fine-tune trains these weights: they keep fp32 "
                    "master weights (only a LoRA job's frozen base can load in bf16 or 4 bits)"}
                   for name in ("dtype", "load_in_4bit")]
    return limits


def knobs_schema() -> JsonObject:
    """knobs.json, the schema of one configuration, from the table (the committed file is this; a test
    holds them equal, and `python -m autotune.output.reference` rewrites it)."""
    def prop(knob: Knob) -> JsonObject:
        if knob.kind == "bool":
            return {"type": "boolean"}
        if knob.kind == "int":
            return {"type": "integer", "minimum": knob.minimum, "maximum": knob.maximum}
        return {"enum": list(knob.choices)}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "knobs.json",
            "title": "One training configuration (TrainingArguments / SFTConfig names where they exist)",
            "type": "object", "additionalProperties": False, "required": list(REQUIRED),
            "properties": {knob.name: prop(knob) for knob in TABLE}}


# The knobs every stored config names (those that existed from the first records on; later ones load
# with their naive value).
REQUIRED = ("per_device_train_batch_size", "padding", "group_by_length", "attn_implementation", "precision",
            "gradient_checkpointing", "torch_compile", "dataloader_num_workers", "dataloader_pin_memory", "optim")
