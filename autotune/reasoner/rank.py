"""Hypotheses for the next trial: one knob change on top of the incumbent.

Until the knowledge base ranks them, the order is the catalog's: changes with the largest typical
effect first (padding, micro-batch, attention, precision), then the small ones, then those that
usually cost speed by themselves (checkpointing) or compile time (torch.compile). Numeric knobs are
climbed one neighbour at a time (micro-batch x2 or /2) rather than tried at every value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..knobs import Knobs, divisors, not_applicable

CATALOG_ORDER: tuple[tuple[str, tuple], ...] = (
    ("padding", ("padding_free", "longest")),
    ("per_device_train_batch_size", ()),  # neighbours of the incumbent's value
    ("attn_implementation", ("sdpa", "flash_attention_2")),
    ("precision", ("bf16", "tf32", "fp16")),
    ("group_by_length", (True,)),
    ("optim", ("adamw_torch_fused",)),
    ("dataloader_num_workers", (2,)),
    ("dataloader_pin_memory", (True,)),
    ("gradient_checkpointing", (True,)),
    ("torch_compile", (True,)),
)


@dataclass(frozen=True)
class Hypothesis:
    knob: str
    value: Any
    reason: str

    @property
    def change(self) -> str:
        return f"{self.knob}={self.value}"

    def apply(self, knobs: Knobs) -> Knobs:
        return knobs.with_change(self.knob, self.value)


def _values(knob: str, listed: tuple, incumbent: Knobs, effective_batch: int) -> Iterable[Any]:
    if knob != "per_device_train_batch_size":
        return listed
    options = divisors(effective_batch)
    position = options.index(incumbent.per_device_train_batch_size)
    # Larger first: a larger micro-batch is the usual win; smaller is tried when larger lost.
    return [options[i] for i in (position + 1, position - 1) if 0 <= i < len(options)]


def rank(incumbent: Knobs, device: dict[str, Any], effective_batch: int,
         measured: set[tuple]) -> tuple[list[Hypothesis], list[tuple[str, str]]]:
    """Untried changes in order, and the (change, why not) of those that cannot apply here.

    `measured` holds the knob sets (as sorted item tuples) already measured in this run.
    """
    ready: list[Hypothesis] = []
    skipped: list[tuple[str, str]] = []
    for knob, listed in CATALOG_ORDER:
        for value in _values(knob, listed, incumbent, effective_batch):
            if getattr(incumbent, knob) == value:
                continue
            hypothesis = Hypothesis(knob, value, "catalog order")
            why_not = not_applicable(knob, value, incumbent, device, effective_batch)
            if why_not:
                skipped.append((hypothesis.change, why_not))
            elif key(hypothesis.apply(incumbent)) not in measured:
                ready.append(hypothesis)
    return ready, skipped


def key(knobs: Knobs) -> tuple:
    return tuple(sorted(knobs.to_dict().items()))
