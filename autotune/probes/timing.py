"""Step timing and the statistics that decide keep or discard.

A step is one optimizer step (effective_batch rows). Times are read after the device is
synchronised; warm-up steps are detected from the times themselves, not skipped by a fixed count.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

# Warm-up is over when consecutive steps agree this closely (allocator, kernels, caches settled).
SETTLED_SPREAD = 0.10


class StepTimer:
    """Wall time per step, read after `synchronize()` so asynchronous device work is counted."""

    def __init__(self, synchronize: Callable[[], None] = lambda: None) -> None:
        self._synchronize = synchronize
        self._last = None

    def start(self) -> None:
        self._synchronize()
        self._last = time.perf_counter()

    def lap(self) -> float:
        self._synchronize()
        now = time.perf_counter()
        elapsed = now - self._last
        self._last = now
        return elapsed


def warmed_up(times: list[float], spread: float = SETTLED_SPREAD) -> bool:
    """True when the last two step times agree within `spread` (compile and allocator warm-up make
    early steps slow and uneven)."""
    if len(times) < 2:
        return False
    a, b = times[-2], times[-1]
    return abs(a - b) <= spread * min(a, b)


def relative_spread(values: list[float]) -> float:
    """(max - min) / median: the A/A noise of repeated measurements of one config."""
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / statistics.median(values)


def median(values: list[float]) -> float:
    return statistics.median(values)
