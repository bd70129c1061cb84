"""parity.compare: a change is kept only if the per-row losses match the baseline's."""

from __future__ import annotations

import math

import pytest

from autotune.probes.parity import TOLERANCE, compare, tolerance

BASE = {"step1": [2.5, 3.0, 1.25, 4.0], "step2": [2.4, 2.9, 1.2, 3.9]}


def test_identical_losses_are_ok():
    result = compare(BASE, {k: list(v) for k, v in BASE.items()}, 1e-4)
    assert result["ok"] is True
    assert result["worst"] == 0.0
    assert result["tolerance"] == 1e-4
    assert "match" in result["reason"]


def _scaled(losses: dict, key: str, index: int, factor: float) -> dict:
    out = {k: list(v) for k, v in losses.items()}
    out[key][index] *= factor
    return out


@pytest.mark.parametrize("key", ["step1", "step2"])
def test_a_difference_just_above_tolerance_fails_as_training_something_else(key):
    tol = TOLERANCE["fp32"]
    result = compare(BASE, _scaled(BASE, key, 2, 1 + 1.2 * tol), tol)
    assert result["ok"] is False
    assert "trains something else" in result["reason"]
    assert result["worst"] == pytest.approx(1.2 * tol, rel=1e-6)


def test_a_difference_just_below_tolerance_passes():
    tol = TOLERANCE["bf16"]
    result = compare(BASE, _scaled(BASE, "step2", 0, 1 - 0.8 * tol), tol)
    assert result["ok"] is True
    assert result["worst"] == pytest.approx(0.8 * tol, rel=1e-6)


def test_worst_is_the_largest_relative_difference_across_both_readings():
    candidate = _scaled(_scaled(BASE, "step1", 0, 1.001), "step2", 3, 1.004)
    assert compare(BASE, candidate, 1.0)["worst"] == pytest.approx(0.004, rel=1e-6)


@pytest.mark.parametrize("candidate", [
    {"step1": BASE["step1"][:3], "step2": BASE["step2"]},
    {"step1": BASE["step1"], "step2": BASE["step2"] + [1.0]},
    {"step1": BASE["step1"]},
])
def test_a_row_count_mismatch_fails(candidate):
    result = compare(BASE, candidate, 1.0)
    assert result["ok"] is False
    assert result["worst"] is None
    assert "count" in result["reason"]


def test_no_rows_at_all_fails():
    assert compare({"step1": [], "step2": []}, {"step1": [], "step2": []}, 1.0)["ok"] is False


def test_infinite_loss_fails():
    assert compare(BASE, _scaled(BASE, "step1", 1, math.inf), 1.0)["ok"] is False


def test_nan_loss_fails():
    candidate = {k: list(v) for k, v in BASE.items()}
    candidate["step1"][1] = math.nan
    assert compare(BASE, candidate, 1.0)["ok"] is False


@pytest.mark.parametrize("a, b, expected", [
    ("fp32", "fp32", TOLERANCE["fp32"]),
    ("fp32", "bf16", TOLERANCE["bf16"]),
    ("bf16", "fp32", TOLERANCE["bf16"]),
    ("tf32", "fp16", TOLERANCE["fp16"]),
    ("fp32", "tf32", TOLERANCE["tf32"]),
])
def test_tolerance_takes_the_looser_precision(a, b, expected):
    assert tolerance(a, b) == expected


def test_lower_precision_is_looser():
    assert TOLERANCE["fp32"] < TOLERANCE["tf32"] < TOLERANCE["fp16"] <= TOLERANCE["bf16"]
