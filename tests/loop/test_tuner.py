"""The loop's decisions, driven by an executor that answers from a table of outcomes.

The runner and executor are tested for real elsewhere; here each knob's effect is fixed so that every
keep/discard rule can be checked exactly.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
from conftest import tiny_job
from table_outcomes import FRAME, LOSSES, WORKLOAD

from autotune.util.errors import AutotuneError
from autotune.output.records import RunFolder
from autotune.loop.tuner import Tuner
from bench.floor_rule import FLOOR


class TableExecutor:
    """Speed = baseline x the product of each changed knob's factor; optional per-knob outcomes."""

    def __init__(self, factors: dict, states: dict | None = None, wrong_losses: set | None = None,
                 peaks: dict | None = None, jitter: list[float] | None = None) -> None:
        self.factors, self.states = factors, states or {}
        self.wrong_losses, self.peaks = wrong_losses or set(), peaks or {}
        self.jitter = list(jitter or [])
        self.specs: list[dict] = []

    def run(self, spec: dict, trial_dir: Path, timeout_s: float) -> dict:
        self.specs.append(spec)
        if spec["kind"] == "frame":
            return {"state": "complete", "reason": "", "frame": FRAME, "wall_s": 1.0}
        knobs, start = spec["knobs"], tiny_job().start.to_dict()
        changed = {(k, v) for k, v in knobs.items() if start[k] != v}
        for change in changed:
            if change in self.states:
                return {"state": self.states[change], "reason": f"{self.states[change]} by table", "wall_s": 1.0}
        speed = 10.0 * (self.jitter.pop(0) if self.jitter else 1.0)
        for change in changed:
            speed *= self.factors.get(change, 1.0)
        losses = {k: [x * 1.01 for x in v] for k, v in LOSSES.items()} if changed & self.wrong_losses else LOSSES
        peak = max([self.peaks.get(c, 2**30) for c in changed] or [2**30])
        # Step i is the same workload in every run (same rows); each step carries ~1% timing noise.
        noise = random.Random(len(self.specs))
        times = [w * 4 / speed * (1 + noise.gauss(0, 0.01)) for w in WORKLOAD]
        speed = 4 * len(times) / sum(times)
        measurement = {"device": "cpu", "samples_per_s": speed, "tokens_per_s": speed * 100, "step_times_s": times,
                       "peak_memory": {"kind": "cpu_peak_rss", "bytes": peak}, "parity_losses": losses}
        if spec["ceiling"]:
            measurement["ceiling"] = {"fits": True, "kind": "cpu_peak_rss", "bytes": peak, "limit_bytes": 6 * 2**30}
        return {"state": "complete", "reason": "", "measurement": measurement, "wall_s": 1.0}


def tune(tmp_path, executor, **keys):
    tuner = Tuner(tiny_job(**keys), executor, tmp_path)
    return tuner, tuner.run()


def tune_on_floor(tmp_path, executor, **keys):
    """The keep rule before issue 19 (the interval clears the baseline's A/A floor, two extra pairs at
    most), still selectable so bench.extra_pairs can compare it with the sequential rule."""
    tuner = Tuner(tiny_job(**keys), executor, tmp_path)
    tuner.steps = dataclasses.replace(tuner.steps, keep_rule=FLOOR, extra_pairs=2)
    return tuner, tuner.run()


def decisions(outcome) -> dict:
    return {r["change"]: r["decision"] for r in outcome.records}


def test_keeps_a_change_faster_beyond_noise_and_builds_on_it(tmp_path):
    executor = TableExecutor({("padding", "padding_free"): 2.0, ("per_device_train_batch_size", 2): 1.5})
    _, outcome = tune(tmp_path, executor)
    assert decisions(outcome)["padding=padding_free"] == "keep"
    assert decisions(outcome)["per_device_train_batch_size=2"] == "keep"
    assert outcome.best.knobs.padding == "padding_free" and outcome.best.knobs.per_device_train_batch_size == 2
    assert outcome.best.speed == pytest.approx(30.0, rel=0.03)
    # The second change was measured on top of the first (one change at a time on the incumbent).
    first_micro_2 = next(s for s in executor.specs
                         if s["kind"] == "trial" and s["knobs"]["per_device_train_batch_size"] == 2)
    assert first_micro_2["knobs"]["padding"] == "padding_free"


def test_a_real_gain_a_noisy_floor_would_throw_away_is_measured_again_and_kept(tmp_path):
    # Baseline repeats at 10.0, 10.5, 9.5, then quiet runs: a floor from the three would hide the 5% gain;
    # the spread pooled over every group of runs shrinks as the trial adds pairs, and it is kept.
    executor = TableExecutor({("padding", "padding_free"): 1.05}, jitter=[1.0, 1.05, 0.95])
    _, outcome = tune(tmp_path, executor, max_trials=1)
    record = outcome.records[1]
    assert record["decision"] == "keep" and len(record["measurements"]) > 2
    assert record["ratio"] == pytest.approx(1.05, rel=0.02) and "clears the noise" in record["reason"]


def test_a_gain_within_the_noise_floor_is_discarded(tmp_path):
    # Baseline repeats at 10.0, 10.5, 9.5: a 10% A/A spread; a 5% gain is inside it (the floor rule).
    executor = TableExecutor({("padding", "padding_free"): 1.05}, jitter=[1.0, 1.05, 0.95])
    _, outcome = tune_on_floor(tmp_path, executor)
    assert 0.05 < outcome.noise_floor < 0.15  # three runs 10% apart: the floor is of that size
    assert decisions(outcome)["padding=padding_free"] == "discard"
    assert "noise" in outcome.records[1]["reason"]
    # Its ratio is inside the floor: decided on two pairs, no extra run spent on it.
    assert len(outcome.records[1]["measurements"]) == 2


@pytest.mark.parametrize("later,decision,pairs", [([1.0] * 4, "keep", 4), ([1.0, 1.2, 1.0, 1.2], "discard", 3)])
def test_a_comparison_two_pairs_leave_open_gets_more_before_it_is_decided(tmp_path, later, decision, pairs):
    # A 25% gain, but the second incumbent run came out 20% fast: on two pairs the interval does not clear
    # the 5.6% floor, and two more could. More pairs decide it: kept on four, or discarded once the
    # incumbent came out fast again and a fourth pair could no longer clear the floor.
    jitter = [1.0, 1.03, 0.97] + [1.0, 1.0, 1.0, 1.2] + later
    executor = TableExecutor({("padding", "padding_free"): 1.25}, jitter=jitter)
    _, outcome = tune_on_floor(tmp_path, executor, max_trials=1)
    record = outcome.records[1]
    assert record["change"] == "padding=padding_free" and record["decision"] == decision
    assert f"(95%, {pairs} vs {pairs} runs)" in record["reason"] and len(record["measurements"]) == pairs
    assert len([s for s in executor.specs if s["kind"] == "trial"]) == 3 + 2 * pairs


def test_an_extra_run_that_fails_ends_the_trial_in_its_state(tmp_path):
    class OomOnThirdCandidate(TableExecutor):
        def run(self, spec, trial_dir, timeout_s):
            if spec["kind"] == "trial" and len([s for s in self.specs if s["kind"] == "trial"]) == 7:
                self.specs.append(spec)
                return {"state": "oom", "reason": "out of memory: by table", "wall_s": 1.0}
            return super().run(spec, trial_dir, timeout_s)

    jitter = [1.0, 1.03, 0.97] + [1.0, 1.0, 1.0, 1.2] + [1.0] * 4
    executor = OomOnThirdCandidate({("padding", "padding_free"): 1.25}, jitter=jitter)
    tuner, outcome = tune(tmp_path, executor, max_trials=1)
    record = outcome.records[1]
    assert record["state"] == "oom" and record["decision"] == "discard"
    assert record["reason"].startswith("an extra run ended oom: out of memory")
    assert len(record["measurements"]) == 2  # the two complete candidate runs stay on the record


def test_more_pairs_are_not_spent_where_they_could_not_decide(tmp_path):
    # The second incumbent run 25% fast: even four pairs at this spread would leave the interval inside
    # the floor, so it is decided on two.
    executor = TableExecutor({("padding", "padding_free"): 1.25}, jitter=[1.0, 1.03, 0.97, 1.0, 1.0, 1.0, 1.25])
    _, outcome = tune_on_floor(tmp_path, executor, max_trials=1)
    record = outcome.records[1]
    assert record["decision"] == "discard" and "(95%, 2 vs 2 runs)" in record["reason"]
    assert len([s for s in executor.specs if s["kind"] == "trial"]) == 3 + 4


def test_a_clear_gain_is_decided_on_two_pairs(tmp_path):
    executor = TableExecutor({("padding", "padding_free"): 1.25}, jitter=[1.0, 1.03, 0.97])
    _, outcome = tune(tmp_path, executor, max_trials=1)
    assert outcome.records[1]["decision"] == "keep" and len(outcome.records[1]["measurements"]) == 2
    assert len([s for s in executor.specs if s["kind"] == "trial"]) == 3 + 4


def test_a_faster_change_that_trains_something_else_is_discarded(tmp_path):
    executor = TableExecutor({("padding", "padding_free"): 3.0}, wrong_losses={("padding", "padding_free")})
    _, outcome = tune(tmp_path, executor)
    record = next(r for r in outcome.records if r["change"] == "padding=padding_free")
    assert record["decision"] == "discard" and not record["parity"]["ok"]
    assert "trains something else" in record["reason"]


def test_the_worst_case_batch_is_checked_for_the_baseline_and_every_memory_knob(tmp_path):
    executor = TableExecutor({("optim", "adamw_torch_fused"): 2.0, ("padding", "padding_free"): 2.0})
    tune(tmp_path, executor)
    trials = [s for s in executor.specs if s["kind"] == "trial"]
    assert [s["ceiling"] for s in trials[:3]] == [True, False, False]  # baseline: once, on its first repeat

    def first_run(knob, value):
        return next(s for s in trials if s["knobs"][knob] == value)

    assert first_run("padding", "padding_free")["ceiling"] is True  # padding moves memory
    assert first_run("optim", "adamw_torch_fused")["ceiling"] is True  # optimizer state is memory
    assert first_run("dataloader_num_workers", 2)["ceiling"] is False  # loader workers do not


def test_failed_trials_are_recorded_and_the_loop_goes_on(tmp_path):
    states = {("padding", "padding_free"): "oom", ("padding", "longest"): "crash",
              ("per_device_train_batch_size", 2): "timeout"}
    executor = TableExecutor({("attn_implementation", "sdpa"): 1.5}, states=states)
    _, outcome = tune(tmp_path, executor)
    by_change = {r["change"]: r for r in outcome.records}
    assert by_change["padding=padding_free"]["state"] == "oom"
    assert by_change["padding=longest"]["state"] == "crash"
    assert by_change["per_device_train_batch_size=2"]["state"] == "timeout"
    assert by_change["attn_implementation=sdpa"]["decision"] == "keep"


def test_max_trials_is_respected_and_records_are_schema_valid(tmp_path):
    tuner, outcome = tune(tmp_path, TableExecutor({}), max_trials=3)
    assert len(outcome.records) == 4 and outcome.stop_reason == "max_trials=3 reached"
    records = RunFolder(tmp_path, "t").read_experiments()  # validates every line
    assert [r["trial"] for r in records] == [0, 1, 2, 3]
    assert records[0]["decision"] == "baseline" and len(records[0]["measurements"]) == 3
    state = json.loads(tuner.folder.state.read_text())
    assert state["trials_done"] == 3


def test_a_baseline_that_cannot_run_stops_the_run_with_its_reason(tmp_path):
    class Failing(TableExecutor):
        def run(self, spec, trial_dir, timeout_s):
            if spec["kind"] == "trial":
                return {"state": "oom", "reason": "out of memory: 80 GiB", "wall_s": 1.0}
            return super().run(spec, trial_dir, timeout_s)

    with pytest.raises(AutotuneError, match="baseline config did not run: oom"):
        tune(tmp_path, Failing({}))
    assert RunFolder(tmp_path, "t").read_experiments()[0]["state"] == "oom"


def test_only_lets_autotune_change_just_the_named_knobs(tmp_path):
    job = tiny_job(max_trials=6, only=["per_device_train_batch_size", "attn_implementation"])
    tuner = Tuner(job, TableExecutor({("padding", "padding_free"): 3.0, ("attn_implementation", "sdpa"): 1.5}),
                  tmp_path)
    outcome = tuner.run()
    changed = {k for r in outcome.records[1:] for k, v in r["knobs"].items() if v != job.start.to_dict()[k]}
    assert changed <= {"per_device_train_batch_size", "attn_implementation"} and outcome.records[1:]
    assert outcome.best.knobs.padding == job.start.padding  # the big win was not the user's to give away
    assert not any("only=" in why for _, why in outcome.skipped)
