"""`autotune tune ... --json`: one schema-valid object on stdout, progress on stderr; the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli.main import main
from autotune.schemas import violation
from autotune.config.records import TrialRecord
from autotune.output.tune_result import _interval


def test_json_is_all_of_stdout_and_no_gain_exits_3(in_tmp, capfd):
    """The cheapest real tune (the MLP's smoke baseline) where nothing can be kept: only= names a knob an
    MLP has not got, so the search ends after the baseline."""
    argv = ["tune", "r", "model=mlp", "mlp_width=64", "mlp_rows=512", "smoke", "max_trials=2", "only=freeze_vision_tower",
            "--json", "--fail-if-no-gain"]
    assert main(argv) == 3
    out, err = capfd.readouterr()
    assert len(out.splitlines()) == 1, out
    data = json.loads(out)
    assert violation("tune_result", data) is None
    assert (data["kept"], data["best_trial"], data["changes"], data["speedup"]) == ([], 0, {}, 1.0)
    assert data["best_samples_per_s"] == data["baseline_samples_per_s"] > 0
    assert data["stop_reason"] and data["realized"] is None
    assert all(Path(path).exists() for path in data["files"].values())
    # The device time it took: every run the folder's records hold (all completed here), and their seconds.
    records = [json.loads(line) for line in (Path(data["files"]["folder"]) / "experiments.jsonl").read_text().splitlines()]
    assert data["device_runs"] == sum(len(r["measurements"]) for r in records) >= 2
    assert data["device_s"] == pytest.approx(sum(r["wall_s"] for r in records), abs=0.2) and data["device_s"] > 0
    report = Path(data["files"]["report"]).read_text()
    assert f"device time: {data['device_runs']} runs" in report and "(min_gain)" in report
    assert "samples/s" in err, "the progress and the table go to stderr"
    assert err.splitlines()[-1].startswith("autotune: no change was kept") and "exit 3" in err.splitlines()[-1]
    # The same run reviewed from its folder: the same object; without the flag, exit 0.
    assert main(["tune", "r", "review", "--json"]) == 0
    again, _ = capfd.readouterr()
    assert json.loads(again) == data


def test_without_json_the_result_object_is_not_printed_and_bad_input_is_2(in_tmp, capfd):
    assert main(["tune", "r", "model=mlp", "max_len=3", "--json"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err.startswith("autotune: max_len=")


def test_the_speedup_interval_multiplies_the_kept_changes_intervals():
    kept = [TrialRecord.from_dict({"interval": [1.1, 1.3]}), TrialRecord.from_dict({"interval": [2.0, 2.5]})]
    assert _interval(kept) == pytest.approx([2.2, 3.25])
    assert _interval([]) == [1.0, 1.0]
    assert _interval([TrialRecord.from_dict({"interval": None})]) is None


def test_help_documents_the_exit_codes(in_tmp, capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    out = capsys.readouterr().out
    assert all(f"\n  {code} " in out for code in (0, 1, 2, 3, 130)) and "--fail-if-no-gain" in out
