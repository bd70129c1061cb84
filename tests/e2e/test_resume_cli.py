"""A tuner killed with SIGKILL at two points of a run, then `resume` finishes it: no trial duplicated,
none lost, the knowledge base agreeing with the run folder. The command line runs in its own process
on the real runner behind a fake clock (tests/e2e/clocked.py), so a trial's length does not hang on
the machine's load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.kb import Store, kb_folder
from autotune.kb.experience import Experience

pytestmark = pytest.mark.slow
# The framework-free MLP: the subject is the loop's state across kills, not a trainer.
JOB = ["model=mlp", "mlp_width=64", "mlp_rows=512", "max_len=64", "effective_batch=8", "smoke", "max_trials=3",
       "time=30m"]
CLOCKED = Path(__file__).with_name("clocked.py")


def start(tmp_path, *words, hold: int | None = None):
    """The tuner in a process of its own; `hold`: it stops in that trial's first run (clocked.py)."""
    return subprocess.Popen([sys.executable, str(CLOCKED), "tune", "k", *words], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": "",
                                 **({"AUTOTUNE_TEST_HOLD": str(hold)} if hold else {})})


def lines(tmp_path) -> int:
    path = tmp_path / "runs" / "k" / "experiments.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def kill_in(tmp_path, process, trial: int) -> None:
    """SIGKILL once the tuner is inside `trial` (its earlier trials recorded, this one not)."""
    holding = tmp_path / f"holding-{trial}"
    deadline = time.monotonic() + 300
    while not holding.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert process.poll() is None, f"the run ended before it could be killed: {process.stderr.read()[-3000:]}"
    assert holding.exists() and lines(tmp_path) == trial, lines(tmp_path)
    process.send_signal(signal.SIGKILL)
    process.wait()
    holding.unlink()


def test_sigkill_twice_then_resume_finishes_the_run(tmp_path):
    kill_in(tmp_path, start(tmp_path, *JOB, hold=1), 1)          # the baseline is recorded, trial 1 is running
    kill_in(tmp_path, start(tmp_path, "resume", hold=3), 3)      # two trials in, the last is running
    done = start(tmp_path, "resume")
    assert done.wait(timeout=600) == 0, done.stderr.read()[-3000:]
    records = [json.loads(line) for line in (tmp_path / "runs" / "k" / "experiments.jsonl").read_text().splitlines()]
    assert [r["trial"] for r in records] == [0, 1, 2, 3]
    assert (tmp_path / "runs" / "k" / "report.md").exists()
    run_id = json.loads((tmp_path / "runs" / "k" / "state.json").read_text())["run_id"]
    experience = Experience(Store(kb_folder()))
    assert sorted(t["trial"] for t in experience.trials(run_id)) == [0, 1, 2, 3]
    assert [r["run_id"] for r in experience.runs()] == [run_id]
