"""Crashes whose reason is the machine or the install, not the configuration around the change.

`precision=bf16` on a device without bf16, a missing package, a library that refuses a setting
outright: trying the change again on another incumbent crashes the same way. Such a crash becomes a
"cannot apply here" limit that the ranking honours (loop/limits.frame_limit), so it is not repeated; the
crash record itself is what the beliefs learn from. Pure: text in, reason out.
"""

from __future__ import annotations

import re
from typing import Any

from ..config.types import KnobValue

# Said by torch, transformers, accelerate and TRL when the device or the install lacks something.
_FIXED = re.compile("|".join((
    r"doesn't support (bf16|fp16|tf32)", r"does not support (bf16|fp16|bfloat16|float16)",
    r"not supported on (this|your) (device|gpu|hardware|platform)", r"requires? (a )?(cuda|gpu|ampere)",
    r"cuda is not available", r"torch not compiled with cuda", r"no module named ['\"]?[\w.]+",
    r"is not installed", r"requires the [\w-]+ (library|package)", r"flash ?attention ?2? .*(not available|cannot be used)",
    r"no kernel image is available", r"triton .*not (found|available|installed)",
    # transformers, when the kernels package cannot load a Hub kernel (no build for this torch, no network).
    r"error occurred while trying to load from '[\w.-]+/[\w.-]+'",
    # TRL >= 1.0 refuses padding_free while max_length is set; a script's max_length is the user's and held.
    r"padding_free=True`? without packing, `?max_length`? is not enforced",
)), re.IGNORECASE)


def fixed_reason(reason: str | None, stderr: str | None = None) -> str | None:
    """The line that says the crash is the machine's or the install's, or None."""
    for text in (reason or "", stderr or ""):
        for line in reversed(text.splitlines()):
            if _FIXED.search(line):
                return line.strip()[:300]
    return None


def blamed(reason: str, changes: tuple[Any, ...] | list[Any]) -> tuple[str, KnobValue] | None:
    """Which one change of a hypothesis a machine-or-install crash is about: the only change, or, in a
    combination, the one whose value the reason names (`bf16` in "doesn't support bf16"). None where
    the reason names none of them: the combination's other changes stay untried, not refused."""
    if len(changes) == 1:
        return tuple(changes[0])
    named = [(knob, value) for knob, value in changes
             if isinstance(value, str) and re.search(rf"\b{re.escape(value)}\b", reason, re.IGNORECASE)]
    return named[0] if len(named) == 1 else None
