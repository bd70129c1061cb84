"""bench.remeasure: the configs it would measure, the paired ratio it prints, and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.remeasure import config_of, main, paired_ratio
from bench.replay import Table

TABLES = Path(__file__).parents[2] / "bench" / "tables"


def test_a_change_is_applied_to_the_tables_user_config():
    table = Table.load(TABLES / "cpu-long-tail.json")
    knobs = config_of(table.start, "per_device_train_batch_size=2+padding=padding_free")
    assert knobs.per_device_train_batch_size == 2 and knobs.padding == "padding_free"
    assert knobs.optim == table.start.optim  # the rest is the user's
    assert config_of(table.start, "start") == table.start
    assert table.speed(knobs) is not None  # the table's own config: its recorded ratio is printed beside


def test_the_ratio_is_paired_by_round_so_a_rounds_drift_cancels():
    reference = [10.0, 20.0, 5.0]          # the machine drifting wildly between rounds
    speeds = [11.0, 22.0, 5.5]             # always 10% faster than the reference in the same round
    ratio, low, high = paired_ratio(speeds, reference)
    assert ratio == pytest.approx(1.1)
    assert low == pytest.approx(1.1) and high == pytest.approx(1.1)  # no spread left once paired
    ratio, low, high = paired_ratio([10.5, 9.8, 10.9, 10.1], [10.0, 10.0, 10.0, 10.0])
    assert low < ratio < high and low < 1.0 < high
    assert math.isnan(paired_ratio([11.0], [10.0])[1])


@pytest.mark.parametrize("argv, said", [
    (["no-such-table", "start"], "no table no-such-table"),
    (["cpu-long-tail", "warp_drive=on"], "unknown knob 'warp_drive'"),
    (["cpu-long-tail", "per_device_train_batch_size=two"], "expected a whole number"),
    (["cpu-long-tail", "start", "--rounds", "1"], "at least 2"),
])
def test_bad_input_is_one_line_and_exit_2(argv, said, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
