"""bench.trace: one replayed tune, trial by trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.best_path import best_path, path_search
from bench.replay import Table
from bench.trace import main, trace

TABLES = Path(__file__).parents[2] / "bench" / "tables"


def test_a_trace_shows_each_trials_runs_adding_up_to_the_tunes():
    table = Table.load(TABLES / "cpu-mlp.json").with_noise(0.005)
    lines = trace(table, 0, 48, path=True)
    trials = [line for line in lines if line.startswith("#")]
    runs = [int(line.split()[2]) for line in trials]
    assert trials[0].startswith("#0") and "baseline" in trials[0] and len(trials) == len(best_path(table)) + 1
    assert int(trials[-1].split()[4]) == sum(runs) == path_search(table, 0, 48).runs[-1]
    assert lines[-1].startswith("stopped: the table's best path is done")


def test_an_unknown_table_is_one_line_naming_the_tables_and_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["cpu-nope"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no table cpu-nope" in err and "cpu-lora" in err
