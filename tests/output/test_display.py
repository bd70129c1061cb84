"""The live display during `tune`: on a terminal a live line with the trial, the change, the time and
the best so far; off a terminal (a log, a pipe) nothing live and no escape codes."""

from __future__ import annotations

import io

from rich.console import Console

from autotune.output.display import Progress

BASELINE = {"trial": 0, "change": None, "state": "complete", "decision": "baseline", "samples_per_s": 10.0,
            "ratio": None, "reason": "baseline", "hypothesis": None}
KEPT = {"trial": 1, "change": "padding=longest", "state": "complete", "decision": "keep", "samples_per_s": 15.0,
        "ratio": 1.5, "reason": "faster", "hypothesis": {"source": "llm"}}


def _progress(terminal: bool) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, color_system="standard" if terminal else None)
    return Progress(console, max_trials=5, time_budget_s=1800), out


def test_on_a_terminal_a_live_line_says_trial_change_time_and_best():
    progress, out = _progress(terminal=True)
    progress.finished(BASELINE)
    progress.finished(KEPT)
    progress.running(2, "optim=adamw_torch_fused (1/2)")
    assert progress.live is not None
    line = progress.status_line()
    assert line.startswith("trial 2 of 5 · optim=adamw_torch_fused (1/2) · ")
    assert " of 30m00s · " in line and line.endswith("best x1.50 (15.000 samples/s, trial 1)")
    progress.close()
    assert progress.live is None and "padding=longest (LLM)" in out.getvalue()


def test_off_a_terminal_nothing_live_and_no_escape_codes():
    progress, out = _progress(terminal=False)
    progress.running(None, "frame: device, model and data")
    progress.finished(BASELINE)
    progress.running(1, "padding=longest (1/2)")
    progress.finished(KEPT)
    progress.llm({"state": "failed", "model": "m", "error": "APITimeoutError: Request timed out."})
    progress.close()
    assert progress.live is None
    text = out.getvalue()
    assert "\x1b" not in text and "trial 1 of 5" not in text
    lines = text.splitlines()
    assert len(lines) == 3 and "#1" in lines[1] and "keep" in lines[1]
    assert "LLM m: no proposal (APITimeoutError" in lines[2]
