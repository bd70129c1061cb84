"""Several knob changes made at once (a warm start, a pooled change, an interacting pair): which of
them can hold together on top of an incumbent.

Each rule in `knobs.not_applicable` reads the other knobs of the config it is checked against, so a
change that applied when it was added can stop applying once a later one lands (group_by_length=True
needs padding=longest; a warm start that also moves padding to padding_free breaks it). The config
handed to the loop is checked whole: every change must apply on the final config itself.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..config.types import Device
from ..config.knobs import Knobs, not_applicable


def together(incumbent: Knobs, changes: Iterable[tuple[str, Any]], device: Device,
             effective_batch: int) -> list[tuple[str, Any]]:
    """The largest prefix-ordered subset of `changes` that applies as one config: added while each
    applies (flash attention once bf16 is in, in any order given), then any change the final config
    no longer allows is dropped, until every change left applies on the config they make together."""
    pending = [(k, v) for k, v in changes if getattr(incumbent, k) != v]
    chosen: list[tuple[str, Any]] = []
    current = incumbent
    while True:
        ready = [(k, v) for k, v in pending if not_applicable(k, v, current, device, effective_batch) is None]
        if not ready:
            break
        for knob, value in ready:
            chosen.append((knob, value))
            current = current.with_change(knob, value)
            pending.remove((knob, value))
    while True:
        broken = next(((k, v) for k, v in chosen if not_applicable(k, v, current, device, effective_batch)), None)
        if broken is None:
            fixed = repaired(incumbent, tuple(chosen), device, effective_batch)
            return list(fixed) if fixed is not None else chosen
        chosen.remove(broken)
        current = incumbent
        for knob, value in chosen:
            current = current.with_change(knob, value)


def applies(knobs: Knobs, start: Knobs, device: Device, effective_batch: int) -> str | None:
    """Why the config `knobs` (reached from `start`) is one no rule allows, or None when every knob it
    changed applies on it."""
    for name, (_, value) in start.diff(knobs).items():
        why = not_applicable(name, value, knobs, device, effective_batch)
        if why:
            return f"{name}={value}: {why}"
    return None


def repaired(incumbent: Knobs, changes: tuple[tuple[str, Any], ...], device: Device,
             effective_batch: int) -> tuple[tuple[str, Any], ...] | None:
    """`changes` plus what the config they make needs put back to its default so every knob applies
    (padding off longest takes group_by_length=True back to False: it means nothing there, and no
    such config is run); None when a knob the changes set themselves is what breaks."""
    final = incumbent
    for knob, value in changes:
        final = final.with_change(knob, value)
    default, extra = Knobs(), []
    for name, value in final.to_dict().items():
        if value == getattr(default, name) or not_applicable(name, value, final, device, effective_batch) is None:
            continue
        if name not in {knob for knob, _ in changes} and not_applicable(name, value, incumbent, device,
                                                                       effective_batch):
            continue  # the incumbent's own setting (a script's pinned memory on a CPU): the changes did not break it
        if any(name == knob for knob, _ in changes):
            return None
        extra.append((name, getattr(default, name)))
    for name, value in extra:
        final = final.with_change(name, value)
    return tuple(changes) + tuple(extra)
