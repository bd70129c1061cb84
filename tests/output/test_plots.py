"""The run's plots: written next to the report, linked from it, showing every trial."""

from __future__ import annotations

from conftest import tiny_job
from tests.loop.test_tuner import TableExecutor

from autotune.output.report import best_config, write_report
from autotune.loop.tuner import Tuner

PNG = b"\x89PNG\r\n\x1a\n"


def test_a_run_writes_its_plots_and_the_report_links_them(tmp_path):
    states = {("padding", "longest"): "oom"}
    tuner = Tuner(tiny_job(max_trials=5), TableExecutor({("padding", "padding_free"): 2.0}, states=states), tmp_path)
    outcome = tuner.run()
    write_report(tuner.folder, tuner.job, outcome, best_config(tuner.job, outcome.best.knobs))
    report = tuner.folder.report.read_text()
    for name in ("progress", "memory"):
        path = tuner.folder.path / f"{name}.png"
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5000
        assert f"![{name}]({name}.png)" in report
    assert "the kept changes' 95% intervals multiplied" in report
    assert any(r["state"] == "oom" for r in outcome.records)  # a failed trial is drawn on the axis, not dropped


def test_without_matplotlib_the_report_is_written_and_says_how_to_get_the_plots(tmp_path, monkeypatch):
    import sys

    tuner = Tuner(tiny_job(max_trials=3), TableExecutor({("padding", "padding_free"): 2.0}), tmp_path)
    outcome = tuner.run()
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # as after `pip install -e .` without [plots]
    write_report(tuner.folder, tuner.job, outcome, best_config(tuner.job, outcome.best.knobs))
    report = tuner.folder.report.read_text()
    assert "pip install 'autotune[plots]'" in report and "![progress]" not in report
    assert "## Trials" in report
