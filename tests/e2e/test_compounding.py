"""Compounding, measured for real on the CPU through the CLI and the framework-free MLP runner (which is
also the install check, `autotune tune RUN model=mlp smoke`): a second, similar job reaches its best in
at most half the trials of the first, because of what the first run recorded.

Both jobs start from micro-batch 1 of an effective batch of 64 rows, which wastes most of the step on
per-call overhead. The first run, ranking from the shipped priors alone, may jump the micro-batch at most
8x per trial, so it needs two trials (1 -> 8 -> 64) to get there. The second job is the same MLP with
another input size; its run is warm-started from the first run's best config and its beliefs hold the
first run's evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autotune.kb import Store
from autotune.kb.experience import Experience
from autotune.loop.learn import trials_to_best

pytestmark = [pytest.mark.slow, pytest.mark.alone]

START = ["model=mlp", "mlp_width=512", "effective_batch=64", "smoke"]
SEQUENCE_KNOBS = ("padding", "group_by_length", "attn_implementation", "gradient_checkpointing")


def tune(folder, kb, run: str, *words: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "autotune.cli.main", "tune", run, *START, f"kb={kb}", *words], cwd=folder,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (folder / "runs" / run / "experiments.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compounding")
    return folder, tune(folder, folder / "kb", "first", "max_len=256", "max_trials=3")


def test_the_mlp_smoke_tune_keeps_a_faster_config_that_trains_the_same_thing(first_run):
    folder, records = first_run
    kept = [r for r in records if r["decision"] == "keep"]
    assert kept and all(r["parity"]["ok"] for r in kept), [(r["change"], r["reason"]) for r in records]
    # Only the knobs of a plain PyTorch loop were tried.
    assert not any(r["change"] and r["change"].split("=")[0] in SEQUENCE_KNOBS for r in records)
    report = (folder / "runs" / "first" / "report.md").read_text()
    assert "Settings of a plain PyTorch loop" in report and "seeded random rows of 256 features" in report
    assert json.loads((folder / "runs" / "first" / "best_config.json").read_text())["pytorch_loop"]


def test_a_second_similar_job_reaches_its_best_in_at_most_half_the_trials(first_run):
    folder, first = first_run
    needed_first = trials_to_best(first)
    second = tune(folder, folder / "kb", "second", "max_len=384", "max_trials=1")
    needed_second = trials_to_best(second)
    summary = (f"first run: best after {needed_first} trial(s) of {len(first) - 1} "
               f"({[(r['change'], r['decision']) for r in first[1:]]}); second run: best after {needed_second} "
               f"trial(s) of {len(second) - 1} ({[(r['change'], r['decision']) for r in second[1:]]})")
    print(summary)
    assert needed_first >= 2, summary                      # the first run had something to find
    assert 1 <= needed_second <= needed_first / 2, summary
    warm = second[1]
    assert warm["hypothesis"]["source"] == "warm_start" and warm["decision"] == "keep", summary
    assert warm["knobs"]["per_device_train_batch_size"] == 64 and warm["parity"]["ok"]
    # What the second run's trials showed was recorded on top of the first run's evidence.
    runs = Experience(Store(folder / "kb")).runs()
    assert [r["run"] for r in runs] == ["first", "second"]
    assert runs[1]["trials_to_best"] == needed_second
