"""The search benchmark's parts, on the recorded tables: the tables hold what they say, every strategy
stays inside a table's grid, and the score counts what it claims to."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.replay import ReplayExecutor, Table
from bench.search import (against_best_peer, against_each_peer, best_peer, ratio_at, runs_to_best, seconds_to_best,
                          trials_to_best)
from bench.strategies import PEERS, Trace, autotune_search, learn_from
from bench.workloads import WORKLOADS, configs

from autotune.config.knobs import Knobs

TABLES = sorted((Path(__file__).parents[2] / "bench" / "tables").glob("cpu-*.json"))


@pytest.fixture(scope="module")
def table() -> Table:
    return Table.load(next(p for p in TABLES if p.stem == "cpu-long-tail"))


def test_the_cpu_tables_hold_every_config_of_their_grid_measured_for_real():
    assert len(TABLES) >= 3
    shapes = set()
    for path in TABLES:
        table = Table.load(path)
        data = table.data
        grid = list(configs(WORKLOADS[table.name].grid, table.start, data["frame"]["device"],
                            data["job"]["effective_batch"]))
        # Tables recorded before a knob existed hold its default: read through Knobs, as the replay does.
        assert data["complete"] and [Knobs.from_dict(c["knobs"]) for c in data["configs"]] == grid
        for config in data["configs"]:
            if config["state"] == "complete":
                measurement = config["measurement"]
                # A script's worst-case batch is out of reach where its rows never reach max_len: it says why.
                assert measurement["step_times_s"] and measurement["parity_losses"] and (
                    measurement.get("ceiling") or measurement.get("ceiling_unchecked"))
        assert len(data["baseline"]["measurements"]) == 3 and table.best_speed > table.baseline_speed
        features = data["features"]
        shapes.add((features["model_family"], features["method"], features["padding_share"] > 0.5,
                    features.get("length_spread", 0) > 2, bool(data["job"].get("script"))))
    # Short uniform rows, a long tail, LoRA, an MLP, a user's own script: different shapes.
    assert len(shapes) == len(TABLES)


def test_a_scripts_table_is_replayed_on_a_fresh_copy_of_the_script_it_was_recorded_on(tmp_path):
    table = Table.load(next(p for p in TABLES if p.stem == "cpu-byo-plain-yaml"))
    # The recorder's scratch copy is gone: the table names the script inside a copy of bench/byo.
    assert table.data["job"]["script"] == "byo/plain_yaml.py" and table.data["byo"] == {"setup": ""}
    here = Path.cwd()
    trace = autotune_search(table, 0, 6)  # reads the script's settings to know what it can say
    assert Path.cwd() == here and trace.outside == 0
    assert 0 < len(trace.picks) <= 6 and all(table.entry(p) is not None for p in trace.picks)
    assert table.ratio(trace.picks[-1]) > 1.2
    learn_from([table], 4, tmp_path / "kb")  # a warm start on another table learns from it
    from autotune.kb.store import Store

    assert [r["job"]["run"] for r in Store(tmp_path / "kb").all("runs")] == ["bench-cpu-byo-plain-yaml"]
    # A table smaller than the trials: TPE stops once it has measured all of it, one run each.
    tpe = PEERS["optuna TPE"](table, 0, 48)
    assert len(tpe.picks) == len(table.configs) - 1 and tpe.runs[-1] == len(table.configs)


def test_each_peer_measures_only_the_tables_configs_and_picks_the_best_it_saw(table):
    for name, strategy in PEERS.items():
        trace = strategy(table, 3, 16)
        assert 0 < len(trace.picks) <= 16, name
        assert all(table.entry(pick) is not None for pick in trace.picks), name
        assert trace.runs == sorted(set(trace.runs)), name  # one run per trial, after the baseline's
        # Device seconds: the recorded wall time of every run so far, the baseline's first.
        assert len(trace.seconds) == len(trace.picks) and trace.seconds[0] > table.wall(table.start) > 0, name
        assert all(b > a for a, b in zip(trace.seconds, trace.seconds[1:])), name


def test_autotune_runs_unchanged_on_the_table_inside_its_grid(table):
    trace = autotune_search(table, 0, 6)
    assert trace.outside == 0  # never a config outside the table: one that no rule allows
    assert 0 < len(trace.picks) <= 6 and all(table.entry(p) is not None for p in trace.picks)
    assert trace.runs[0] >= 4  # three baseline runs, then at least the first run of trial 1
    assert trace.seconds[0] >= 3 * table.wall(table.start)
    assert table.ratio(trace.picks[-1]) > 1.5


def test_the_score_counts_trials_until_the_pick_is_within_five_percent_of_the_best(table):
    best = max(table.configs, key=lambda k: table.speed(k) or 0)
    trace = Trace(picks=[table.start, table.start, best, best], runs=[4, 5, 9, 12])
    assert trials_to_best(table, trace) == 3 and runs_to_best(table, trace) == 9
    assert ratio_at(table, trace, 2) == pytest.approx(1.0, abs=0.2) and ratio_at(table, trace, 8) == table.ratio(best)
    assert trials_to_best(table, Trace(picks=[table.start] * 4, runs=[2, 3, 4, 5])) == math.inf


def test_the_replay_adds_run_to_run_noise_of_the_recorded_size(table):
    executor = ReplayExecutor(table, 0)
    speeds = [executor.run({"kind": "trial", "knobs": table.start.to_dict()}, Path(f"{i:03d}-001"), 60)
              ["measurement"]["samples_per_s"] for i in range(200)]
    spread = (max(speeds) - min(speeds)) / table.speed(table.start)
    assert 0 < spread < 12 * table.noise_cv and executor.runs_by_trial[5] == 1


def test_the_replay_can_replay_a_table_at_gpu_like_noise(table):
    quiet = table.with_noise(0.005)
    assert table.with_noise(None).noise_cv == table.noise_cv > 0.05 and quiet.noise_cv == 0.005
    executor = ReplayExecutor(quiet, 0)
    speeds = [executor.run({"kind": "trial", "knobs": table.start.to_dict()}, Path(f"{i:03d}-001"), 60)
              ["measurement"]["samples_per_s"] for i in range(50)]
    assert 0 < (max(speeds) - min(speeds)) / table.speed(table.start) < 12 * 0.005


def test_a_config_outside_a_whole_table_is_a_crash_counted_or_an_error():
    table = Table.load(next(p for p in TABLES if p.stem == "cpu-short-uniform"))
    outside = table.start.with_change("padding", "padding_free").with_change("group_by_length", True)
    spec = {"kind": "trial", "knobs": outside.to_dict()}
    with pytest.raises(KeyError):
        ReplayExecutor(table, 0).run(spec, Path("001-001"), 60)
    lenient = ReplayExecutor(table, 0, strict=False)
    assert lenient.run(spec, Path("001-001"), 60)["state"] == "crash" and len(lenient.outside) == 1


def test_the_warm_knowledge_base_holds_the_other_tables_runs_only(table, tmp_path):
    others = [Table.load(p) for p in TABLES if p.stem != table.name]
    learn_from(others, 4, tmp_path / "kb")
    from autotune.kb.store import Store

    runs = Store(tmp_path / "kb").all("runs")
    assert sorted(r["job"]["run"] for r in runs) == sorted(f"bench-{t.name}" for t in others)


def test_autotune_is_put_beside_the_peer_that_needed_the_fewest_device_runs(table):
    rows = [{"table": "t", "noise": "0.5%", "strategy": name, "runs_to_95": runs, "seconds_to_95": secs}
            for name, runs, secs in (("optuna TPE", 16, 120.0), ("DeepSpeed-like", 9, 60.0), ("random", math.inf, math.inf),
                                     ("autotune cold", 8, 50.0), ("autotune warm", 6, 40.0),
                                     ("autotune, best path", 5, 30.0))]
    by = {r["strategy"]: r for r in rows}
    assert best_peer(by)["strategy"] == "DeepSpeed-like"  # the best path is a reference, never the peer
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(against_best_peer(rows))
    line = next(line for line in console.export_text().splitlines() if "DeepSpeed-like" in line)
    assert "x0.89" in line and "x0.67" in line  # cold 8 of 9 runs, warm 6 of 9
    assert line.split("│")[-2].strip() == "5"  # the keep rule's runs along the best path, last
    best = max(table.configs, key=lambda k: table.speed(k) or 0)
    trace = Trace(picks=[table.start, best], runs=[4, 6], seconds=[30.0, 41.0])
    assert seconds_to_best(table, trace) == 41.0


def test_autotune_is_put_beside_each_peer_over_every_cell():
    # Cell a: cold never gets within 5%, TPE does, DeepSpeed-like never (both never: no cold win).
    # Cell b: TPE needs fewer runs than cold; DeepSpeed-like never. Cell c: cold ties TPE (a win: no
    # more runs) and beats DeepSpeed-like, and has no warm row (warm counts over two cells only).
    cells = {("a", "2.0%"): {"optuna TPE": 10, "DeepSpeed-like": math.inf, "autotune cold": math.inf,
                             "autotune warm": 9},
             ("b", "2.0%"): {"optuna TPE": 6, "DeepSpeed-like": math.inf, "autotune cold": 8, "autotune warm": 5},
             ("c", "0.5%"): {"optuna TPE": 7, "DeepSpeed-like": 9, "autotune cold": 7}}
    rows = [{"table": table, "noise": noise, "strategy": name, "runs_to_95": runs}
            for (table, noise), by in cells.items() for name, runs in by.items()]
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(against_each_peer(rows))
    text = console.export_text()
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in text.splitlines() if line.startswith("│")}
    assert lines["optuna TPE"] == ["3", "1 of 3", "2 of 2", "0"]
    assert lines["DeepSpeed-like"] == ["3", "2 of 3", "2 of 2", "2"]
    assert "autotune cold" not in lines and "autotune warm" not in lines
    assert "cold on 1 cells, warm on 0" in text
