"""The whole-tune benchmark (`python -m bench.e2e`): it runs the README's commands, and what it prints
and stores are the run's own figures beside the last recorded ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import e2e

README = (Path(__file__).parents[2] / "README.md").read_text()


def test_the_benchmark_runs_the_readmes_commands_word_for_word():
    for case in e2e.CASES:
        assert e2e.shell_words(case) in README, e2e.shell_words(case)
    assert "python -m bench.e2e" in README


@pytest.mark.slow
def test_a_tune_gives_its_figures_and_the_table_sets_them_beside_the_last(tmp_path, monkeypatch, capsys):
    # A real MLP smoke tune stands in for the README's: the same command line, the same files. Held to a
    # knob an MLP never tries, it is the baseline alone (seconds, whatever the machine's load).
    case = e2e.Case("mlp", ("m", "model=mlp", "mlp_width=64", "mlp_rows=512", "smoke", "only=freeze_vision_tower",
                            "time=30m"))
    monkeypatch.setattr(e2e, "CASES", (case,))
    results = tmp_path / "e2e.json"
    assert e2e.main(["--results", str(results)]) == 0
    first = json.loads(results.read_text())["tunes"]["mlp"]
    assert (first["trials"], first["kept"], first["device_runs"]) == (0, [], 3) and first["wall_s"] > 0
    assert first["speedup"] == 1.0 and first["interval"] in (None, [1.0, 1.0]) and first["stop_reason"]
    assert first["command"] == ("autotune tune m model=mlp mlp_width=64 mlp_rows=512 smoke "
                                "only=freeze_vision_tower time=30m")
    assert first["realized_speedup"] is None        # an MLP's hand-over is its own loop, not `trl sft`
    out = capsys.readouterr().out
    assert "mlp: no figures recorded before" in out and "| speed-up [interval] | last |" in out
    # The next time, these figures are the "last" column; --no-save leaves the file as it was.
    monkeypatch.setattr(e2e, "run_case", lambda case, timeout_s: {**first, "speedup": 1.5, "interval": [1.2, 1.9]})
    assert e2e.main(["--results", str(results), "--no-save"]) == 0
    out = capsys.readouterr().out
    assert f"mlp: last recorded {first['date']}" in out
    row = next(line for line in out.splitlines() if line.startswith("| mlp |"))
    assert row.split(" | ")[1] == "x1.50 [1.20, 1.90]" and row.split(" | ")[2].startswith("x1.00")
    assert json.loads(results.read_text())["tunes"]["mlp"] == first


def test_an_unknown_tune_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        e2e.main(["--only", "nope", "--no-save"])
    assert stop.value.code == 2 and "--only nope: the tunes are demo, nano, clm, sft" in capsys.readouterr().err


def test_a_failed_tune_is_named_by_autotunes_line_not_an_exit_warning():
    stderr = ("[  181s] #0   baseline   timeout\nautotune: the baseline config did not run: timeout\n"
              "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: leaked\n"
              "  warnings.warn('resource_tracker: There appear to be %d '\n")
    assert e2e.why_failed(stderr) == "autotune: the baseline config did not run: timeout"
    assert e2e.why_failed("Traceback...\nValueError: boom\n") == "ValueError: boom"
    assert e2e.why_failed("") == "no output"
