"""bench.remeasure: the configs it measures, the paired ratio it prints, whole rounds only, bad input."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench.record
from bench.remeasure import checked, config_of, main, paired_ratio, remeasure
from bench.replay import Table

TABLES = Path(__file__).parents[2] / "bench" / "tables"
PAIR = "per_device_train_batch_size=2+padding=padding_free"


@pytest.fixture(scope="module")
def table() -> Table:
    return Table.load(TABLES / "cpu-long-tail.json")


def test_a_change_is_applied_to_the_tables_user_config(table):
    knobs = config_of(table.start, PAIR)
    assert knobs.per_device_train_batch_size == 2 and knobs.padding == "padding_free"
    assert knobs.optim == table.start.optim  # the rest is the user's
    assert config_of(table.start, "start") == table.start
    assert checked(table, ["start", PAIR]) is None


def test_only_configs_the_table_completed_and_each_once(table):
    assert "given twice" in checked(table, [PAIR, PAIR])
    # micro-batch 3 does not divide the effective batch of 8: outside the table's grid
    assert "not a config the table" in checked(table, ["per_device_train_batch_size=3"])


def test_the_ratio_is_paired_by_round_so_a_rounds_drift_cancels():
    reference = [10.0, 20.0, 5.0]          # the machine drifting wildly between rounds
    speeds = [11.0, 22.0, 5.5]             # always 10% faster than the reference in the same round
    ratio, low, high = paired_ratio(speeds, reference)
    assert ratio == pytest.approx(1.1)
    assert low == pytest.approx(1.1) and high == pytest.approx(1.1)  # no spread left once paired
    ratio, low, high = paired_ratio([10.5, 9.8, 10.9, 10.1], [10.0, 10.0, 10.0, 10.0])
    assert low < ratio < high and low < 1.0 < high
    assert paired_ratio([11.0], [10.0]) is None  # one round: no interval


def test_a_round_counts_only_where_every_config_completed(table, monkeypatch):
    # A fake session: the pair's config runs out of memory in round 2; its other rounds are 20% faster.
    calls = []

    class Tuner:
        def frame(self) -> None:
            pass

        def measure(self, knobs, trial, label):
            calls.append(knobs)
            faster = knobs != table.start
            if faster and len(calls) in (3, 4):
                return SimpleNamespace(state="oom")
            speed = 10.0 * (1.2 if faster else 1.0) * (1 + 0.01 * len(calls))
            return SimpleNamespace(state="complete", measured=lambda: SimpleNamespace(samples_per_s=speed))

    monkeypatch.setattr(bench.record, "session", lambda *args: contextlib.nullcontext((Tuner(), None)))
    lines = remeasure(table, ["start", PAIR], rounds=4)
    assert len(calls) == 8
    assert lines[0].startswith("3 whole rounds of 4")
    ratio = float(lines[2].split(" x")[1].split(" ")[0])
    assert ratio == pytest.approx(1.2, rel=0.02)
    recorded = table.speed(config_of(table.start, PAIR)) / table.speed(table.start)
    assert f"(table: x{recorded:.3f})" in lines[2] and "(table: x1.000)" in lines[1]


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


def test_a_file_that_is_not_a_table_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(SystemExit) as stopped:
        main(["broken", "start", "--tables", str(tmp_path)])
    assert stopped.value.code == 2 and "not a table bench.record wrote" in capsys.readouterr().err
