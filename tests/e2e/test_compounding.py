"""Compounding through the command line and the framework-free MLP runner (also the install check,
`autotune tune RUN model=mlp smoke`): a second, similar job reaches its best in at most half the trials
of the first, because of what the first run recorded.

Both jobs start from micro-batch 1 of an effective batch of 64 rows. The runs are real, the step times
the loop judges come from a fake clock (tests/fake_clock.py) on which a larger micro-batch pays and
every other change is 10% slower, so what is kept does not hang on the machine's load. The first run,
ranking from the shipped priors alone, may jump the micro-batch at most 8x per trial, so it needs two
trials (1 -> 8 -> 64) to get there. The second job is the same MLP with another input size; its run is
warm-started from the first run's best config and its beliefs hold the first run's evidence.
"""

from __future__ import annotations

import json

import pytest
from fake_clock import FakeClock

from autotune.executors import LocalExecutor
from autotune.kb import Store
from autotune.kb.experience import Experience
from autotune.config.records import TrialRecord
from autotune.loop.learn import trials_to_best

pytestmark = pytest.mark.slow

START = ["model=mlp", "mlp_width=512", "effective_batch=64", "smoke", "time=30m"]
SEQUENCE_KNOBS = ("padding", "group_by_length", "attn_implementation", "gradient_checkpointing")
# Samples/s against micro-batch 1: per-call overhead shrinks as the micro-batch grows.
GAINS = {("per_device_train_batch_size", m): f for m, f in ((2, 1.6), (4, 2.5), (8, 4.0), (16, 6.0), (32, 8.0),
                                                             (64, 10.0))}


def tune(folder, kb, run: str, *words: str) -> list[dict]:
    from autotune.cli.main import main

    clock = FakeClock(LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}), GAINS, default=0.9)
    with pytest.MonkeyPatch.context() as patch:
        import autotune.executors as executors

        patch.setattr(executors, "get_executor", lambda *args, **keys: clock)
        patch.chdir(folder)
        assert main(["tune", run, *START, f"kb={kb}", *words]) == 0
    lines = (folder / "runs" / run / "experiments.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compounding")
    return folder, tune(folder, folder / "kb", "first", "max_len=256", "max_trials=3")


def test_the_mlp_smoke_tune_keeps_what_pays_and_trains_the_same_thing(first_run):
    folder, records = first_run
    kept = [r for r in records if r["decision"] == "keep"]
    assert kept and all(r["parity"]["ok"] and r["parity"]["worst"] is not None for r in kept), \
        [(r["change"], r["reason"]) for r in records]
    assert all(r["change"].startswith("per_device_train_batch_size=") for r in kept)
    # Only the knobs of a plain PyTorch loop were tried.
    assert not any(r["change"] and r["change"].split("=")[0] in SEQUENCE_KNOBS for r in records)
    report = (folder / "runs" / "first" / "report.md").read_text()
    assert "Settings of a plain PyTorch loop" in report and "seeded random rows of 256 features" in report
    assert json.loads((folder / "runs" / "first" / "best_config.json").read_text())["pytorch_loop"]


def test_a_second_similar_job_reaches_its_best_in_at_most_half_the_trials(first_run):
    folder, first = first_run
    needed_first = trials_to_best([TrialRecord.from_dict(r) for r in first])
    second = tune(folder, folder / "kb", "second", "max_len=384", "max_trials=1")
    needed_second = trials_to_best([TrialRecord.from_dict(r) for r in second])
    summary = (f"first run: best after {needed_first} trial(s) of {len(first) - 1} "
               f"({[(r['change'], r['decision']) for r in first[1:]]}); second run: best after {needed_second} "
               f"trial(s) of {len(second) - 1} ({[(r['change'], r['decision']) for r in second[1:]]})")
    assert needed_first >= 2, summary                      # the first run had something to find
    assert 1 <= needed_second <= needed_first / 2, summary
    warm = second[1]
    assert warm["hypothesis"]["source"] == "warm_start" and warm["decision"] == "keep", summary
    assert warm["knobs"]["per_device_train_batch_size"] == 64 and warm["parity"]["ok"]
    # What the second run's trials showed was recorded on top of the first run's evidence.
    runs = Experience(Store(folder / "kb")).runs()
    assert [r["run"] for r in runs] == ["first", "second"]
    assert runs[1]["trials_to_best"] == needed_second
