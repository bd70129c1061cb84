"""A script trial whose measured steps trained other rows than the baseline's (length grouping picks
which rows land in the window) is compared per real token, at the baseline's work; one that trained
the same rows is left exactly as measured."""

from __future__ import annotations

import pytest

from autotune.config.measurement import Measurement
from autotune.config.messages import RunResult
from autotune.loop.judge import work_note
from autotune.loop.measuring import at_baseline_work


def run(tokens: list[int], step_s: float = 0.5, rows: int = 16) -> RunResult:
    seconds = step_s * len(tokens)
    measurement = Measurement.from_dict({
        "samples_per_s": rows * len(tokens) / seconds, "tokens_per_s": sum(tokens) / seconds,
        "step_times_s": [step_s] * len(tokens), "real_tokens_per_step": tokens, "device": "cpu",
        "peak_memory": {"kind": "cpu_peak_rss", "bytes": 2**30}, "parity_losses": None})
    return RunResult("complete", "measured", measurement)


def test_a_window_of_the_baselines_rows_is_left_as_measured():
    same = run([400, 500, 600, 700])
    assert at_baseline_work(same, 2200, script=True) is same
    assert work_note([same]) == ""


def test_a_window_of_longer_rows_counts_the_work_it_did():
    # Grouped: this window drew long rows (twice the baseline's real tokens) in the same time per step:
    # per row it looks as fast as the baseline, per real token it is twice as fast.
    grouped = at_baseline_work(run([800, 1000, 1200, 1400]), 2200, script=True)
    measured = grouped.measured()
    assert measured.samples_per_s == pytest.approx(2 * 32)
    assert measured.step_times_s == pytest.approx((0.25,) * 4)
    assert measured.tokens_per_s == pytest.approx(4400 / 2)      # the invariant is untouched
    stored = measured.to_dict(validate=True)
    assert stored["work_normalized"]["raw_samples_per_s"] == pytest.approx(32)
    assert Measurement.from_dict(stored, validate=True).work_factor == pytest.approx(2.0)
    assert "other rows than the baseline's (x2.00-x2.00" in work_note([grouped])


def test_only_a_scripts_runs_are_scaled():
    # A built-in runner measures the same rows in every trial; an allowed image cap trains fewer tokens
    # per row by design, which per-token speed would hide.
    fewer = run([200, 250, 300, 350])
    assert at_baseline_work(fewer, 2200, script=False) is fewer
    assert at_baseline_work(fewer, None, script=True) is fewer
    failed = RunResult("oom", "out of memory")
    assert at_baseline_work(failed, 2200, script=True) is failed
