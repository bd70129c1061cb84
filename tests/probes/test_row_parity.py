"""row_parity.compare on recorded rows: what a change did to the rows is named, and a statistical check
of fresh random windows refuses a mean that moved beyond the rows' spread."""

from __future__ import annotations

from autotune.probes.row_parity import compare

TOL = 1e-4


def rows(keys: dict[str, tuple[int, int, str]], losses: dict[str, float], splits=None) -> dict:
    splits = splits or [[[k] for k in losses], [[k] for k in losses]]
    return {"step1": dict(losses), "step2": dict(losses), "splits": splits,
            "rows": {k: list(v) for k, v in keys.items()}, "steps": 2}


def test_rows_joined_into_longer_ones_are_named_concatenated():
    base = rows({"a": (1, 10, "ha"), "b": (1, 12, "hb")}, {"a": 2.0, "b": 2.1})
    packed = rows({"ab": (1, 22, "ha")}, {"ab": 2.05})
    result = compare([base], packed, TOL)
    assert not result["ok"] and "concatenated" in result["reason"] and "trains something else" in result["reason"]


def windows(mean: float, seed: int) -> dict:
    import random

    rng = random.Random(seed)
    keys = {f"{seed}-{i}": (1, 16, f"h{seed}-{i}") for i in range(32)}
    return rows(keys, {k: mean + rng.gauss(0, 0.01) for k in keys})


def test_fresh_windows_whose_mean_loss_moved_beyond_the_spread_are_refused():
    kept = compare([windows(4.0, 1), windows(4.0, 2)], windows(4.0, 3), TOL)
    assert kept["ok"] and kept["kind"] == "statistical", kept["reason"]
    moved = compare([windows(4.0, 1), windows(4.0, 2)], windows(4.05, 3), TOL)
    assert not moved["ok"] and "the check was statistical" in moved["reason"]
    assert "trains something else" in moved["reason"]
