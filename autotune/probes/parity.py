"""Proof that a change trains the same thing: per-row losses on the same rows from the same weights.

Two readings per trial, both on the run's first rows in canonical order: the losses of the first
step (initial weights: catches attention leaks, padding and precision errors) and of the second step
(after one optimizer step with the candidate's accumulation split: catches loss-normalisation and
optimizer differences).
"""

from __future__ import annotations

import math
from typing import NotRequired, TypedDict

# Largest allowed |candidate - baseline| / |baseline| per row, by the looser precision of the two.
# fp32 differences come from summation order only; tf32 matmuls carry ~1e-3 relative error and
# bf16/fp16 autocast ~1e-2 on logits.
TOLERANCE = {"fp32": 1e-4, "tf32": 3e-3, "fp16": 1e-2, "bf16": 3e-2}


class ParityVerdict(TypedDict):
    """A parity check's verdict, as a trial record's `parity` keeps it (config/measurement.py Parity)."""

    ok: bool
    worst: float | None          # the worst per-row relative difference; None where none was compared
    tolerance: float | None
    reason: str
    checked: NotRequired[bool]   # row parity: whether losses were compared at all
    kind: NotRequired[str]       # row parity: same, weighting, order, objective, rows, statistical


def tolerance(precision_a: str, precision_b: str) -> float:
    return max(TOLERANCE[precision_a], TOLERANCE[precision_b])


def compare(baseline: dict[str, list[float]], candidate: dict[str, list[float]], tol: float) -> ParityVerdict:
    """Worst per-row relative difference across both readings, and whether it is within `tol`."""
    worst = 0.0
    for key in ("step1", "step2"):
        base, cand = baseline.get(key) or [], candidate.get(key) or []
        if len(base) != len(cand) or not base:
            return {"ok": False, "worst": None, "tolerance": tol,
                    "reason": f"parity rows differ in count ({key}: {len(base)} vs {len(cand)})"}
        for b, c in zip(base, cand):
            difference = abs(c - b) / max(abs(b), 1e-8)
            # max() would skip a NaN (it compares false with everything): make it the worst there is.
            worst = max(worst, math.inf if math.isnan(difference) else difference)
    ok = worst <= tol
    reason = (f"per-row losses match within {worst:.2e} (tolerance {tol:.0e})" if ok else
              f"per-row losses differ by {worst:.2e} > tolerance {tol:.0e}: this change trains something else")
    return {"ok": ok, "worst": worst, "tolerance": tol, "reason": reason}
