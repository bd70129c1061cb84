"""Compounding, measured for real on the CPU: a second, similar job needs at most half the trials of the
first to reach its best config, because of what the first run recorded.

Both jobs start from a config a user might copy from a large-model recipe onto a small job: every row
padded to max_len, activation checkpointing on although memory is plentiful, and sdpa attention, which
on this CPU is slower than eager for a model this small. Each of the three costs more than the noise,
so the first run, ranking from the shipped priors alone, finds them one at a time over several
trials. The second job is the same family with longer rows (another length spread); its run is
warm-started from the first run's best config and its beliefs hold the first run's evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autotune.kb import Store, kb_folder
from autotune.kb.experience import Experience
from autotune.learn import trials_to_best

pytestmark = pytest.mark.slow

START = ["model=tiny-qwen2", "dataset=synthetic", "effective_batch=16", "gradient_checkpointing=true",
         "attn_implementation=sdpa", "smoke"]


def tune(tmp_path, run: str, *words: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "tune", run, *START, *words], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (tmp_path / "runs" / run / "experiments.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_second_similar_job_reaches_its_best_in_at_most_half_the_trials(tmp_path):
    first = tune(tmp_path, "first", "max_len=256", "max_trials=4")
    needed_first = trials_to_best(first)
    second = tune(tmp_path, "second", "max_len=384", "max_trials=2")
    needed_second = trials_to_best(second)
    summary = (f"first run: best after {needed_first} trial(s) of {len(first) - 1} "
               f"({[(r['change'], r['decision']) for r in first[1:]]}); second run: best after {needed_second} "
               f"trial(s) of {len(second) - 1} ({[(r['change'], r['decision']) for r in second[1:]]})")
    print(summary)
    assert needed_first >= 2, summary                      # the first run had something to find
    assert 1 <= needed_second <= needed_first / 2, summary
    warm = second[1]
    assert "warm start" in warm["hypothesis"]["rationale"] and warm["decision"] == "keep", summary
    assert warm["parity"]["ok"]
    # What the second run's trials showed was recorded on top of the first run's evidence.
    runs = Experience(Store(kb_folder())).runs()
    assert [r["run"] for r in runs] == ["first", "second"]
    assert runs[1]["trials_to_best"] == needed_second
