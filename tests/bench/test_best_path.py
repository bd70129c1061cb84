"""The best-path reference of the search benchmark: the path is the shortest the table allows, and the
loop measures and decides its steps as it would any change."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.best_path import SHARE_OF_BEST, PathTuner, best_path, path_search, takes
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


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_shorter_path_exists_and_ties_go_to_the_largest_smallest_step(name):
    table = Table.load(TABLES[name])
    target = SHARE_OF_BEST * table.best_speed
    path = best_path(table)

    def least_steps(here, depth):
        """The largest smallest step of each increasing path from `here` that reaches the target in
        exactly `depth` more steps (brute force, every path)."""
        found = []
        for config in table.configs:
            speed = table.speed(config) or 0.0
            if speed <= table.speed(here) or not takes(here, config):
                continue
            step = speed / table.speed(here)
            if depth == 1 and speed >= target:
                found.append(step)
            elif depth > 1:
                found += [min(step, rest) for rest in least_steps(config, depth - 1)]
        return found

    assert all(not least_steps(table.start, depth) for depth in range(1, len(path)))
    chosen = min(table.speed(b) / table.speed(a) for a, b in zip([table.start] + path, path))
    assert chosen == pytest.approx(max(least_steps(table.start, len(path))))


def test_a_step_is_a_move_autotune_makes_one_or_two_changes_the_micro_batch_at_most_eight_times():
    table = Table.load(TABLES["cpu-mlp"])  # micro-batch 1 to 64 is the table's best in one trial, x13.6
    start = table.start
    assert takes(start, start.with_change("per_device_train_batch_size", 8))
    assert not takes(start, start.with_change("per_device_train_batch_size", 64))
    assert not takes(start, start)
    path = best_path(table)
    assert len(path) == 2 and path[-1].per_device_train_batch_size == 64


def test_a_user_config_already_within_five_percent_has_no_path():
    table = Table.load(TABLES["cpu-short-uniform"])
    table.start = max(table.configs, key=lambda c: table.speed(c) or 0.0)
    assert best_path(table) == []


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


def test_each_cell_says_what_the_keep_rule_needed_along_the_best_path():
    import collections

    from bench.search import PATH, verdicts

    row = {"final_share": 1.0, "outside": 0, "stops": collections.Counter({"spent": 1}), "noise_floor": 0.01,
           "noise_cv": 0.005, "seconds_to_95": 10.0}
    by = {"DeepSpeed-like": {**row, "strategy": "DeepSpeed-like", "runs_to_95": 7},
          "autotune cold": {**row, "strategy": "autotune cold", "runs_to_95": 9},
          PATH: {**row, "strategy": PATH, "runs_to_95": 5, "path_steps": 2}}
    lines = verdicts(by, 48)
    assert lines[0].startswith("cold 9 vs DeepSpeed-like 7 device runs: missed")  # the path is never the peer
    assert any("best path (2 steps): 5 device runs" in line for line in lines)

