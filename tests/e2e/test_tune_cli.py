"""Whole `autotune tune` runs, as a user runs them.

The first runs the command in this process on the real runner with a fake clock (tests/fake_clock.py):
every config trains for real once (parity, memory and the hand-over in `trl sft` are real), the step times
the loop judges come from a table, so which change is kept does not hang on the machine's load. The
second is the console script, real through and through, asserting states and files, never a speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fake_clock import FakeClock

from autotune.executors import LocalExecutor

pytestmark = pytest.mark.slow
TINY = ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=4"]
# Two changes that pay on this clock; every other one is 10% slower (discarded without doubt).
GAINS = {("padding", "padding_free"): 2.0, ("per_device_train_batch_size", 2): 1.5,
         ("per_device_train_batch_size", 4): 1.8}


def autotune(tmp_path, *words, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "autotune.cli.main", "tune", *words], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})})


def records(tmp_path, run):
    lines = (tmp_path / "runs" / run / "experiments.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture
def clocked(monkeypatch):
    """`autotune tune` (host=local) gets the real executor behind a fake clock; returns the clock."""
    import autotune.executors as executors

    clock = FakeClock(LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}), GAINS, default=0.9)
    monkeypatch.setattr(executors, "get_executor", lambda *args, **keys: clock)
    return clock


def test_a_tune_keeps_what_pays_hands_over_files_that_ran_and_records_why(in_tmp, clocked, capsys):
    from autotune.cli.main import main

    code = main(["tune", "t", *TINY, "smoke", "max_trials=2", "time=30m"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    folder = in_tmp / "runs" / "t"
    for name in ("job.json", "experiments.jsonl", "results.tsv", "best_config.json", "report.md", "state.json"):
        assert (folder / name).exists(), name
    trials = records(in_tmp, "t")
    # The phases: the frame, the baseline three times, then each trial screened and compared in pairs.
    assert [kind for kind, _ in clocked.real_runs[:2]] == ["frame", "trial"] and clocked.replayed > 0
    assert trials[0]["decision"] == "baseline" and trials[0]["trial"] == 0 and len(trials[0]["measurements"]) == 3
    assert [t["trial"] for t in trials] == [0, 1, 2]
    assert all(t["decision"] in ("keep", "discard") and t["reason"] for t in trials[1:])
    assert all(t["hypothesis"]["rationale"] for t in trials[1:])
    # Which change pays is the clock's: the kept ones are among them, the others are discarded.
    kept = [t for t in trials if t["decision"] == "keep"]
    assert kept, [(t["change"], t["reason"]) for t in trials]
    for trial in trials[1:]:
        pays = any(trial["knobs"][name] == value for name, value in GAINS)
        assert (trial["decision"] == "keep") == pays, (trial["change"], trial["reason"])
    # Kept only with the same per-row losses, compared for real, and the worst-case batch fitting.
    assert all(t["parity"]["ok"] and t["parity"]["worst"] is not None and t["ceiling"]["fits"] for t in kept)
    assert all("per-row losses match" in t["reason"] for t in kept)
    # The best config is the last kept one, and it is what best_config.json and the report give.
    best = json.loads((folder / "best_config.json").read_text())
    assert best["knobs"] == kept[-1]["knobs"]
    assert best["command"] == f"trl sft --config {os.path.join('runs', 't', 'best_config.yaml')}"
    assert (folder / "baseline_config.yaml").exists() and (folder / "best_config.yaml").exists()
    # The hand-over ran both files in `trl sft`: its result in the report and the output.
    realized = json.loads((folder / "realized.json").read_text())
    assert realized["state"] == "complete", realized
    assert ("realize", "realize") in clocked.real_runs
    report = (folder / "report.md").read_text()
    assert "realized in `trl sft`: baseline" in report and f"x{realized['speedup']:.2f}" in report
    assert "realized in `trl sft`" in out.out and f"ready to run: {best['command']}" in out.out
    assert "## Trials" in report and "## Best config" in report and "| MFU |" in report
    assert "## Where the time goes" in report
    for name in ("progress", "breakdown", "memory"):
        assert f"![{name}]({name}.png)" in report and (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Output that is not a terminal is a log: no live line, no spinner frames, no escape codes.
    assert "\x1b[" not in out.out and "\u280b" not in out.out and "trial 1 of" not in out.out
    # Measured, not assumed: the frame holds this CPU's measured peaks, the baseline's ceiling and breakdown.
    frame = json.loads((folder / "frame.json").read_text())
    assert frame["device"]["peaks"]["matmul_flops"]["fp32"] > 0 and frame["device"]["peaks"]["copy_bytes_per_s"] > 0
    assert frame["ceiling"]["fits"] is True and frame["breakdown"]["forward_share"] > 0
    assert all(0 < m["mfu"] < 1 for t in trials for m in t["measurements"])
    # Every kept trial updated the beliefs, and says so in its record.
    assert all(t["beliefs"] for t in kept)
    assert json.loads((folder / "state.json").read_text())["stop_reason"] == "max_trials=2 reached"


def test_no_refuted_change_is_tried_again(in_tmp):
    """No change is tried again after it lost beyond the noise on an incumbent that differs from this one
    only in knobs neither the beliefs nor the interaction table link to it (the table of outcomes the
    loop's tests use: two gains, two losses)."""
    import autotune
    from table_outcomes import Table

    from autotune.kb import Store, kb_folder
    from autotune.kb.beliefs import Beliefs
    from autotune.loop.tuner import Tuner
    from autotune.reasoner import Hypothesis
    from autotune.reasoner.links import incumbents, refuted

    job = autotune.job_from_dict("r", {"model": "tiny-qwen2", "dataset": "synthetic", "max_len": 64,
                                       "effective_batch": 4, "smoke": True, "max_trials": 8, "realize": False})
    trials = Tuner(job, Table(job.start.to_dict()), in_tmp / "runs").run().records
    claims = Beliefs(Store(kb_folder())).claims()
    assert len(trials) > 3 and any(t["decision"] == "discard" for t in trials)
    for index, (incumbent, typed) in enumerate(incumbents(trials)):
        record = typed.raw  # the stored record the typed view reads
        if record["change"] and "+" not in record["change"]:
            knob, _, _ = record["change"].partition("=")
            hypothesis = Hypothesis(knob, record["knobs"][knob], "")
            why = refuted(hypothesis, incumbent, trials[:index + 1], claims)
            assert why is None, f"trial {record['trial']} retried {record['change']}: {why}"


def test_oom_crash_and_nan_end_their_trials_not_the_run(tmp_path):
    # The console script, real through and through: the states of failing trials, not their speed.
    done = autotune(tmp_path, "faults", *TINY, "max_trials=3", "smoke", "realize=false", "time=30m",
                    env={"AUTOTUNE_TEST_INJECT": "1:oom,2:crash,3:nan"})
    assert done.returncode == 0, done.stderr[-3000:]
    trials = records(tmp_path, "faults")
    assert [t["state"] for t in trials] == ["complete", "oom", "crash", "invalid"]
    assert all(t["decision"] == "discard" for t in trials[1:])
    assert "injected crash" in trials[2]["stderr_tail"]
    assert "nan" in trials[3]["reason"].lower()
    tsv = (tmp_path / "runs" / "faults" / "results.tsv").read_text().splitlines()
    assert len(tsv) == 1 + 4
    assert (tmp_path / "runs" / "faults" / "report.md").exists()
    assert "baseline" in done.stdout and "ready to run: trl sft --config" in done.stdout
