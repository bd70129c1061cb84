"""Bring your own script on Accelerate and Lightning, end to end: the shipped examples tuned through the
CLI from a copy of the project folder, launched as their docstrings launch them, every file of the
examples hashed before and after."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.alone]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo_script"


def tune(cwd: Path, *words: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_MIXED_PRECISION"}
    return subprocess.run([sys.executable, "-m", "autotune.cli.main", "tune", *words], cwd=cwd, capture_output=True,
                          text=True, timeout=1200, env={**env, "CUDA_VISIBLE_DEVICES": ""})


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def records(cwd: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (cwd / "runs" / run / "experiments.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("run, words, read, command", [
    # As the README prints it: the launcher's words in script_launcher=, precision its --mixed_precision.
    ("accel", ["script=examples/byo_script/accel_train.py", "script_launcher=accelerate launch"],
     "launcher:--mixed_precision (default) = 'no' -> precision", "accelerate launch "),
    ("cli", ["script=examples/byo_script/lightning_cli.py",
             "script_args=fit --config examples/byo_script/lightning_cli.yaml"],
     "examples/byo_script/lightning_cli.yaml:data.pad_to_max_length = True -> pad_to_max_length", "python "),
])
def test_a_framework_example_is_tuned_as_it_is_launched_without_touching_its_files(tmp_path, run, words, read, command):
    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    before = hashes(tmp_path / "examples")
    done = tune(tmp_path, run, *words, "only=padding", "smoke", "max_trials=1", "time=20m", "fresh")
    assert done.returncode == 0, done.stderr[-3000:]
    assert hashes(tmp_path / "examples") == before          # not one byte of the user's files changed
    trials = records(tmp_path, run)
    assert all(t["state"] != "invalid" for t in trials), [(t["change"], t["reason"]) for t in trials]
    kept = [t for t in trials if t["decision"] == "keep"]
    assert [t["change"] for t in kept] == ["padding=longest"], [(t["change"], t["reason"]) for t in trials]
    assert kept[0]["ratio"] > 1.3 and kept[0]["parity"]["ok"]
    best = json.loads((tmp_path / "runs" / run / "best_config.json").read_text())
    assert best["command"].startswith(command), best["command"]
    report = (tmp_path / "runs" / run / "report.md").read_text()
    assert read in report
    spec = json.loads(next((tmp_path / "runs" / run / "trials").glob("001-*/spec.json")).read_text())
    assert spec["script"]["launcher"] == (["accelerate", "launch"] if run == "accel" else [])
