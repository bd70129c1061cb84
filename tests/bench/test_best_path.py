"""The best-path reference of the search benchmark: the path is the shortest the table allows, and the
loop measures and decides its steps as it would any change."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.best_path import SHARE_OF_BEST, PathTuner, best_path, path_search
from bench.replay import ReplayExecutor, Table
from bench.strategies import _job
from bench.search import runs_to_best

TABLES = {p.stem: p for p in (Path(__file__).parents[2] / "bench" / "tables").glob("cpu-*.json")}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_step_changes_one_or_two_knobs_and_is_faster_ending_within_five_percent(name):
    table = Table.load(TABLES[name])
    path = best_path(table)
    speeds = [table.speed(c) for c in [table.start] + path]
    assert path and all(b > a for a, b in zip(speeds, speeds[1:]))
    assert all(1 <= len(a.diff(b)) <= 2 for a, b in zip([table.start] + path, path))
    assert speeds[-1] >= SHARE_OF_BEST * table.best_speed


def test_no_shorter_path_exists_and_ties_go_to_the_largest_smallest_step():
    table = Table.load(TABLES["cpu-lora"])  # no single trial from the user's config reaches 95%
    target = SHARE_OF_BEST * table.best_speed
    start = table.start
    reachable = [c for c in table.configs if 1 <= len(start.diff(c)) <= 2 and (table.speed(c) or 0) > table.speed(start)]
    assert not any(table.speed(c) >= target for c in reachable)
    path = best_path(table)
    assert len(path) == 2

    def least_step(first):
        return min(table.speed(first) / table.speed(start), max(
            (table.speed(c) / table.speed(first) for c in table.configs
             if 1 <= len(first.diff(c)) <= 2 and (table.speed(c) or 0) >= target), default=0.0))

    chosen = min(table.speed(path[0]) / table.speed(start), table.speed(path[1]) / table.speed(path[0]))
    assert chosen == pytest.approx(max(least_step(c) for c in reachable))


def test_the_loop_tries_the_path_first_decides_it_itself_and_stops_within_five_percent():
    table = Table.load(TABLES["cpu-mlp"]).with_noise(0.005)
    path = best_path(table)
    trace = path_search(table, 0, 48)
    # One trial per step at a quiet machine's noise, kept by the keep rule on its runs, then the tune stops.
    assert trace.picks == path and "best path is done" in trace.stop_reason
    assert runs_to_best(table, trace) == trace.runs[-1] >= 3 + len(path)


def test_a_step_the_loop_discards_is_not_forced_again_the_loops_own_order_goes_on(tmp_path):
    table = Table.load(TABLES["cpu-lora"]).with_noise(0.005)
    losing = table.start.with_change("gradient_checkpointing", True)  # slower on this table
    assert table.speed(losing) < table.speed(table.start)
    tuner = PathTuner(table, [losing], _job(table, 4, tmp_path / "kb"), ReplayExecutor(table, 0, strict=False),
                      tmp_path / "runs")
    outcome = tuner.run()
    first, *rest = outcome.records[1:]
    assert first.change == "gradient_checkpointing=True" and first.decision == "discard"
    assert rest and all(r.change != first.change for r in rest)  # the ranking's changes after it
