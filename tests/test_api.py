"""The library API (`import autotune`): a job built from a dict, a real tune returning its Outcome, and
suggest, without the word grammar; `import autotune` imports nothing heavy."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys

import fake_clock
import pytest

import autotune
from autotune.cli.main import main


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_KB", str(tmp_path / "kb"))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield tmp_path
    for signum, handler in handlers.items():  # main() installs its own; pytest's come back
        signal.signal(signum, handler)


def test_import_autotune_pulls_no_torch_and_names_the_api():
    code = "import sys, autotune; print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
    assert {"tune", "suggest", "Job", "Knobs", "Outcome", "job_from_dict"} <= set(dir(autotune))


def test_a_job_from_a_dict_is_the_job_the_words_make(in_tmp):
    keys = {"model": "mlp", "smoke": True, "max_trials": 3, "only": ["precision", "optim"]}
    job = autotune.job_from_dict("r", keys)
    assert isinstance(job, autotune.Job) and isinstance(job.start, autotune.Knobs)
    assert job == autotune.job_from_words("r", ["model=mlp", "smoke", "max_trials=3", "only=precision,optim"])[0]
    with pytest.raises(autotune.JobError, match="unknown key 'max_lenght'"):
        autotune.job_from_dict("r", {"model": "mlp", "max_lenght": 64})
    with pytest.raises(autotune.JobError, match="fresh=True"):
        autotune.job_from_dict("r", {"model": "mlp", "fresh": True})


def test_a_job_built_in_python_is_the_job_its_words_make(in_tmp):
    from autotune.workloads.jobs import completed

    typed = autotune.Job(run="r", model="mlp", dataset="synthetic", max_len=512, effective_batch=64, smoke=True,
                         max_trials=3, start=autotune.Knobs(per_device_train_batch_size=8))
    words = ["model=mlp", "smoke", "max_trials=3", "per_device_train_batch_size=8"]
    assert completed(typed) == autotune.job_from_words("r", words)[0]
    assert completed(typed).mlp == autotune.MlpShape(1024, 4, 8192) and completed(typed).time_budget_s == 90
    text = autotune.Job(run="t", model="tiny-qwen2", dataset="synthetic", max_len=64, effective_batch=4, smoke=True)
    made = autotune.job_from_words("t", ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=4",
                                         "smoke"])[0]
    assert completed(text) == made and made.weights == "random"   # a preset has no weights to load
    # Checked as the words are, one line each.
    with pytest.raises(autotune.JobError, match="LoRA adapts a pretrained transformer"):
        completed(autotune.Job(run="r", model="mlp", dataset="synthetic", max_len=64, effective_batch=8, method="lora"))
    with pytest.raises(autotune.JobError, match="attn_implementation does not apply with model=mlp"):
        completed(autotune.Job(run="r", model="mlp", dataset="synthetic", max_len=64, effective_batch=8,
                               start=autotune.Knobs(attn_implementation="sdpa")))
    with pytest.raises(autotune.JobError, match="max_len=4"):
        autotune.Job(run="r", model="mlp", dataset="synthetic", max_len=4, effective_batch=8)
    with pytest.raises(autotune.JobError, match="does not divide effective_batch=6"):
        autotune.Job(run="r", model="mlp", dataset="synthetic", max_len=64, effective_batch=6,
                     start=autotune.Knobs(per_device_train_batch_size=4))


class Recording(autotune.Callback):
    def __init__(self, fail_on_trial: bool = False) -> None:
        self.trials, self.ends, self.stops, self.fail_on_trial = [], [], [], fail_on_trial

    def on_trial(self, record):
        self.trials.append(record)
        if self.fail_on_trial:
            raise RuntimeError("the caller's callback failed")

    def on_end(self, outcome):
        self.ends.append(outcome)

    def on_stop(self, error):
        self.stops.append(error)


def test_tune_through_the_api_returns_the_outcome_its_run_folder_holds(in_tmp, monkeypatch, capsys, caplog):
    """The cheapest real tune: the MLP's smoke baseline, with only= naming a knob an MLP has not got. A
    library caller's stdout stays its own: progress goes to the "autotune" logger, and callbacks hear
    each trial and the end. The frame and the baseline run for real once; the baseline's repeats replay
    that run behind the fake clock (tests/fake_clock.py)."""
    fake_clock.install(monkeypatch)
    job = autotune.job_from_dict("api", {"model": "mlp", "smoke": True, "max_trials": 2, "only": "freeze_vision_tower",
                                         "mlp_width": 64, "mlp_rows": 512})
    callback = Recording()
    with caplog.at_level(logging.INFO, logger="autotune"):
        outcome = autotune.tune(job, runs_dir=in_tmp / "runs", callbacks=[callback])
    assert isinstance(outcome, autotune.Outcome)
    folder = in_tmp / "runs" / "api"
    assert outcome.folder.resolve() == folder.resolve()
    records = [json.loads(line) for line in (folder / "experiments.jsonl").read_text().splitlines()]
    assert [r["trial"] for r in outcome.records] == [r["trial"] for r in records]
    assert outcome.baseline["samples_per_s"] == records[0]["samples_per_s"] > 0
    assert outcome.best_config == json.loads((folder / "best_config.json").read_text())
    assert outcome.best.trial == 0 and outcome.speedup == 1.0
    assert (folder / "report.md").is_file()
    assert capsys.readouterr().out == ""
    logged = [r.getMessage() for r in caplog.records if r.name == "autotune"]
    assert f"ready to run: {outcome.best_config['command']}" in logged
    assert any(line.startswith("trial 0: baseline:") for line in logged)
    assert all(isinstance(r, autotune.TrialRecord) for r in callback.trials)
    assert [r.trial for r in callback.trials] == [r["trial"] for r in records]
    assert callback.ends == [outcome] and callback.stops == []
    # The CLI reviews the run the API made: the same figures.
    assert main(["tune", "api", "review", "--runs-dir", str(in_tmp / "runs"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["best_trial"], data["baseline_samples_per_s"], data["command"]) == (
        0, outcome.baseline["samples_per_s"], outcome.best_config["command"])


def test_a_callback_that_fails_ends_the_tune_with_its_error_and_the_records_kept(in_tmp, monkeypatch):
    # Built in Python, no key=value words: the tune checks and completes it (workloads/jobs.py `completed`).
    # The baseline runs for real once; its repeats replay that run behind the fake clock.
    fake_clock.install(monkeypatch)
    job = autotune.Job(run="cb", model="mlp", dataset="synthetic", max_len=512, effective_batch=64, smoke=True,
                       max_trials=2, only=("freeze_vision_tower",))
    callback = Recording(fail_on_trial=True)
    with pytest.raises(RuntimeError, match="the caller's callback failed"):
        autotune.tune(job, runs_dir=in_tmp / "runs", callbacks=[callback])
    lines = (in_tmp / "runs" / "cb" / "experiments.jsonl").read_text().splitlines()
    assert [json.loads(line)["trial"] for line in lines] == [0] == [r.trial for r in callback.trials]
    assert len(callback.stops) == 1 and isinstance(callback.stops[0], RuntimeError) and callback.ends == []


def test_the_tuner_loop_is_exported_for_ask_and_tell():
    from autotune.loop.tuner import Tuner

    assert autotune.Tuner is Tuner
    assert all(callable(getattr(Tuner, step)) for step in ("ask", "run_trial", "tell", "run"))


def test_suggest_through_the_api_is_typed_advice_the_command_prints(in_tmp, capsys):
    advice = autotune.suggest(model="7B", max_len=512, effective_batch=16, gpu="4090")
    assert isinstance(advice, autotune.Advice) and advice.features["max_len"] == 512
    assert isinstance(advice.best, autotune.SuggestedChange) and advice.best == advice.changes[0]
    assert all(0 <= c.p_helps <= 1 and c.cost > 0 for c in advice.changes)
    assert main(["suggest", "model=7B", "max_len=512", "effective_batch=16", "gpu=4090", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == advice.to_dict()
    with pytest.raises(autotune.JobError):
        autotune.suggest(model="7B", max_len="a lot")


def test_the_suggest_function_and_its_module_do_not_hide_each_other(monkeypatch):
    """`autotune.suggest` is the function; the advice behind it is a module a caller can import and patch."""
    import autotune.loop.advice as advice

    assert callable(autotune.suggest) and autotune.suggest.__module__ == "autotune.api"
    seen = []

    def advise(words):
        seen.append(words)
        return {"schema_version": 1, "features": {}, "start": {}, "notes": words, "hypotheses": [], "skipped": []}

    monkeypatch.setattr("autotune.loop.advice.advise", advise)
    assert autotune.suggest(model="7B", max_len=512).notes == ("model=7B", "max_len=512")
    assert seen == [["model=7B", "max_len=512"]]
    assert advice.advise is not autotune.suggest
