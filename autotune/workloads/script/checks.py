"""What a user's script was seen to do in a trial, and whether that is what the trial's edits said.

The forward hooks note, per call of the outermost model: its rows, its width, whether the rows were
packed (position_ids restarting inside one row), and the dtype it computed in (autocast's, else its
weights'); the optimizer hook notes the micro-batches per step. The model itself says whether it
checkpoints and which attention it runs; dynamo's counters say whether anything was compiled.
An edit the script did not apply (a config file it never reads, a flag it ignores) shows as a
mismatch, and the trial ends `invalid` with what was seen instead.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, Mapping, TypedDict

from ...config.types import KnobValue


class Observed(TypedDict):
    """A measurement's `observed` (schemas/measurement.json), as the child writes it: a dict that crosses
    to the parent in the run's result and is stored with the trial, so its keys are typed here."""

    rows_per_micro_batch: int | None
    micro_batches_per_step: int | None
    compute_dtypes: list[str]
    compiled: bool
    gradient_checkpointing: bool | None
    attn_implementation: str | None
    widths: list[int]                 # the narrowest and the widest call
    all_widths_max: bool
    packed: bool
    length_jumps: float | None


def observed(meter: Any) -> Observed:
    inner = getattr(meter.root, "_orig_mod", meter.root)   # a torch.compile wrapper holds the model
    config = getattr(inner, "config", None)
    dynamo = sys.modules.get("torch._dynamo.utils")
    graphs = dynamo.counters["stats"]["unique_graphs"] if dynamo is not None else 0
    steps = meter.step_calls[1:] or meter.step_calls    # the first step may hold a warm-up call
    return {
        "rows_per_micro_batch": max(meter.micro_rows, default=None),
        "micro_batches_per_step": Counter(steps).most_common(1)[0][0] if steps else None,
        "compute_dtypes": sorted(meter.dtypes),
        "compiled": graphs > 0 or type(meter.root).__name__ == "OptimizedModule",
        "gradient_checkpointing": getattr(inner, "is_gradient_checkpointing", None),
        "attn_implementation": getattr(config, "_attn_implementation", None),
        "widths": [min(meter.widths, default=0), max(meter.widths, default=0)],
        "all_widths_max": bool(meter.widths) and min(meter.widths) == max(meter.widths),
        "packed": meter.packed,
        "length_jumps": length_jumps(meter.row_lengths),
    }


def length_jumps(lengths: list[float]) -> float | None:
    """How far apart the lengths of consecutive micro-batches are, as a share of their mean: rows in a
    random order jump about as much as they vary (a log-normal spread: ~0.6), rows grouped by length
    hardly at all. None with too few calls to say."""
    if len(lengths) < 6:
        return None
    mean = sum(lengths) / len(lengths)
    jumps = [abs(b - a) for a, b in zip(lengths, lengths[1:])]
    return round(sum(jumps) / len(jumps) / mean, 4) if mean else None


_DTYPES = {"bf16": {"bfloat16"}, "fp16": {"float16"}, "fp32": {"float32"}, "tf32": {"float32"}}


def mismatch(expect: Mapping[str, KnobValue], seen: Observed, max_len: int | None) -> str | None:
    """Why the run does not show the edits in `expect` (knob -> value), or None where it does."""
    def said(knob: str, value: KnobValue, what: str) -> str:
        return f"the script did not apply {knob}={value}: {what}"

    for knob, value in expect.items():
        if knob == "per_device_train_batch_size" and seen["rows_per_micro_batch"] not in (None, value):
            return said(knob, value, f"it ran {seen['rows_per_micro_batch']} rows per micro-batch")
        if knob == "micro_batches_per_step" and seen["micro_batches_per_step"] not in (None, value):
            return f"the script did not apply the accumulation that keeps the effective batch ({value} " \
                   f"micro-batches per step): it ran {seen['micro_batches_per_step']}"
        if knob == "precision" and seen["compute_dtypes"] and set(seen["compute_dtypes"]) != _DTYPES[str(value)]:
            return said(knob, value, f"its model computed in {', '.join(seen['compute_dtypes'])}")
        if knob == "torch_compile" and seen["compiled"] != value:
            return said(knob, value, "nothing was compiled" if value else "its model was compiled")
        if knob == "gradient_checkpointing" and seen["gradient_checkpointing"] not in (None, value):
            return said(knob, value, f"its model {'does not checkpoint' if value else 'checkpoints'} activations")
        if knob == "attn_implementation" and seen["attn_implementation"] not in (None, value):
            return said(knob, value, f"its model runs {seen['attn_implementation']} attention")
        if knob == "padding" and max_len and not seen["packed"]:
            if value == "max_length" and seen["widths"][0] < max_len:
                return said(knob, value, f"its batches were {seen['widths'][0]} to {seen['widths'][1]} tokens wide")
            if value == "longest" and seen["all_widths_max"] and seen["widths"][1] >= max_len:
                return said(knob, value, f"every batch was padded to {seen['widths'][1]} tokens")
        if knob == "padding" and value == "padding_free" and not seen["packed"]:
            return said(knob, value, "its rows reached the model padded, one per batch row")
    return None
