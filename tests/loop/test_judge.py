"""judge.parity_check for a script: rows matched by content, and strict_parity refusing what another
weighting of the same rows would keep."""

from __future__ import annotations

from autotune.config.knobs import Knobs
from autotune.config.measurement import Measurement
from autotune.config.records import TrialRecord
from autotune.loop.outcome import Incumbent
from autotune.loop.judge import parity_check

ROWS = {"a": [1, 4, "ha"], "b": [1, 9, "hb"]}


def measurement(step2_b: float, splits: list) -> Measurement:
    losses = {"step1": {"a": 2.0, "b": 3.0}, "step2": {"a": 1.9, "b": step2_b}}
    return Measurement(1.0, (1.0,), parity_losses={"step1": [2.0, 3.0], "step2": [1.9, step2_b]},
                       parity_rows={**losses, "splits": splits, "rows": ROWS, "steps": 2})


def test_a_micro_batch_split_is_kept_with_its_difference_unless_strict():
    start = Knobs(per_device_train_batch_size=1)
    base = measurement(2.9, [[["a"], ["b"]], [["a"], ["b"]]])
    split = measurement(2.95, [[["a", "b"]], [["a", "b"]]])   # one micro-batch: the token mean weighs rows otherwise
    records = [TrialRecord(0, None, {}, "complete", "baseline", measurements=(base,))]
    knobs = start.with_change("per_device_train_batch_size", 2)
    kept = parity_check(base, split, Incumbent(start, [1.0], 0), knobs, start, records)
    assert kept.ok and kept.raw["kind"] == "weighting" and "differ by 1.72e-02" in kept.reason
    refused = parity_check(base, split, Incumbent(start, [1.0], 0), knobs, start, records, strict=True)
    assert not refused.ok and "strict_parity=true" in refused.reason
