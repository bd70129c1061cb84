"""Where the time goes: a step split into data wait, forward, backward, optimizer and other host time.

Each boundary synchronises the device, which serialises work, so these steps are timed apart from
the measured window; the shares, not the absolute times, are what the breakdown reports.
"""

from __future__ import annotations

import time
from typing import Callable

PHASES = ("data_wait", "forward", "backward", "optimizer")


class PhaseTimer:
    def __init__(self, synchronize: Callable[[], None] = lambda: None) -> None:
        self._synchronize = synchronize
        self._totals = {phase: 0.0 for phase in PHASES}
        self._step_total = 0.0
        self._steps = 0
        self._last = 0.0

    def start(self, at: float | None = None) -> None:
        """From now, or from `at` (a `perf_counter` reading taken earlier: a step that began before the
        timer could be told)."""
        self._synchronize()
        self._last = time.perf_counter() if at is None else at

    def mark(self, phase: str) -> None:
        """The time since the previous mark belongs to `phase`."""
        self._synchronize()
        now = time.perf_counter()
        self._totals[phase] += now - self._last
        self._last = now

    def add_step(self, step_seconds: float) -> None:
        self._steps += 1
        self._step_total += step_seconds

    def totals(self) -> dict[str, float]:
        return {**self._totals, "steps": self._steps, "step_total": self._step_total}


def breakdown(totals: dict[str, float], padded_tokens: int, real_tokens: int) -> dict[str, float] | None:
    """Shares of step time per phase, plus the padding share of the tokens and the idle share.

    Idle share: the part of a step in which the device runs no model work (data wait and host
    overhead between phases), the time a faster input pipeline or fewer launches could win back.
    """
    step_total = totals.get("step_total", 0.0)
    if not totals.get("steps") or step_total <= 0:
        return None
    phases = {phase: totals[phase] for phase in PHASES}
    other = max(0.0, step_total - sum(phases.values()))
    shares = {f"{phase}_share": round(seconds / step_total, 4) for phase, seconds in phases.items()}
    shares["other_share"] = round(other / step_total, 4)
    return {
        "steps": int(totals["steps"]), "step_s": round(step_total / totals["steps"], 6), **shares,
        "idle_share": round((phases["data_wait"] + other) / step_total, 4),
        "padding_share": round(padded_tokens / max(1, padded_tokens + real_tokens), 4),
    }
