"""`autotune tune RUN model=mlp smoke`: the install check, end to end on the CPU through the real CLI,
executor and MLP runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow


def test_the_mlp_smoke_tune_finds_a_speedup_with_parity_inside_two_minutes(tmp_path):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "tune", "check", "model=mlp", "smoke"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "runs" / "check"
    records = [json.loads(line) for line in (folder / "experiments.jsonl").read_text().splitlines()]
    kept = [r for r in records if r["decision"] == "keep"]
    assert kept and all(r["parity"]["ok"] for r in kept), [(r["change"], r["reason"]) for r in records]
    # Only the knobs of a plain PyTorch loop were tried.
    assert not any(r["change"] and r["change"].split("=")[0] in
                   ("padding", "group_by_length", "attn_implementation", "gradient_checkpointing") for r in records)
    report = (folder / "report.md").read_text()
    assert "Settings of a plain PyTorch loop" in report and "seeded random rows of 512 features" in report
    assert (folder / "best_config.json").exists()
    print(f"model=mlp smoke: {wall:.0f}s wall (the smoke budget of 90s bounds the loop)")
