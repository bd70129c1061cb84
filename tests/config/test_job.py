"""`job_from_words`: what `autotune tune RUN key=value ...` turns into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.util.errors import JobError, RecordError
from autotune.config.job import SMOKE_TIME_BUDGET_S, Job
from autotune.workloads.jobs import job_from_words
from autotune.config.job_values import parse_duration
from autotune.config.knobs import NAIVE_START, Knobs
from autotune.schemas import validate

BASE = ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=16"]


def test_smoke_alone_fills_the_embedded_demo_job():
    job, modes = job_from_words("demo", ["smoke"])
    assert modes == ["smoke"]
    assert job.smoke is True
    assert (job.model, job.dataset, job.max_len, job.effective_batch) == ("tiny-qwen2", "synthetic", 512, 16)
    assert job.time_budget_s == SMOKE_TIME_BUDGET_S
    assert isinstance(job.time_budget_s, int) and 0 < job.time_budget_s <= 3600
    assert job.weights == "random"  # a preset has no trained weights to download
    assert job.start == Knobs(**NAIVE_START)


def test_smoke_keeps_keys_the_user_gave():
    job, _ = job_from_words("demo", ["max_len=128", "smoke", "time=30s", "effective_batch=8", "model=tiny-llama"])
    assert job.smoke
    assert (job.model, job.max_len, job.effective_batch, job.time_budget_s) == ("tiny-llama", 128, 8, 30)
    assert job.dataset == "synthetic"


def test_without_smoke_there_is_no_time_budget_and_no_smoke_flag():
    job, modes = job_from_words("r", BASE)
    assert modes == []
    assert job.smoke is False
    assert job.time_budget_s is None
    assert job.max_trials is None
    assert (job.method, job.host, job.seed) == ("sft", "local", 0)


def test_knob_keys_set_the_starting_config():
    job, _ = job_from_words("r", BASE + ["padding=longest", "per_device_train_batch_size=4"])
    assert job.start.padding == "longest"
    assert job.start.per_device_train_batch_size == 4
    # Everything not given stays at the naive start.
    expected = Knobs(**{**NAIVE_START, "padding": "longest", "per_device_train_batch_size": 4})
    assert job.start == expected


def test_bool_knob_words_parse():
    job, _ = job_from_words("r", BASE + ["padding=longest", "group_by_length=true", "gradient_checkpointing=off"])
    assert job.start.group_by_length is True
    assert job.start.gradient_checkpointing is False


def test_gradient_accumulation_steps_sets_the_micro_batch():
    job, _ = job_from_words("r", BASE + ["gradient_accumulation_steps=4"])
    assert job.start.per_device_train_batch_size == 4
    assert job.start.accumulation(job.effective_batch) == 4


def test_gradient_accumulation_steps_agreeing_with_micro_batch_is_accepted():
    job, _ = job_from_words("r", BASE + ["gradient_accumulation_steps=2", "per_device_train_batch_size=8"])
    assert job.start.per_device_train_batch_size == 8


@pytest.mark.parametrize("words", [
    ["gradient_accumulation_steps=3"],  # does not divide 16
    ["gradient_accumulation_steps=0"],
    ["gradient_accumulation_steps=4", "per_device_train_batch_size=2"],  # 2 x 4 != 16
])
def test_bad_gradient_accumulation_is_a_job_error(words):
    with pytest.raises(JobError, match="gradient_accumulation_steps"):
        job_from_words("r", BASE + words)


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400),
                                           ("1h0m5s", 3605), (" 45s ", 45)])
def test_durations_parse_to_seconds(text, seconds):
    assert parse_duration(text) == seconds
    job, _ = job_from_words("r", BASE + [f"time={text}"])
    assert job.time_budget_s == seconds


@pytest.mark.parametrize("text", ["", "0s", "0h0m", "90", "5 minutes", "abc", "1.5h", "30m1h", "-5m"])
def test_bad_durations_are_job_errors_naming_time(text):
    with pytest.raises(JobError, match="time="):
        parse_duration(text)


def test_local_dataset_file_that_exists_passes(tmp_path, monkeypatch):
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "hello"}\n')
    job, _ = job_from_words("r", ["model=tiny-qwen2", f"dataset={data}", "max_len=64", "effective_batch=4"])
    assert job.dataset == str(data)
    monkeypatch.chdir(tmp_path)
    job, _ = job_from_words("r", ["model=tiny-qwen2", "dataset=./train.jsonl", "max_len=64", "effective_batch=4"])
    assert job.dataset == "./train.jsonl"


def test_local_dataset_file_that_does_not_exist_fails(tmp_path):
    with pytest.raises(JobError, match="dataset="):
        job_from_words("r", ["model=tiny-qwen2", f"dataset={tmp_path / 'gone.jsonl'}", "max_len=64",
                             "effective_batch=4"])


def test_local_model_folder_with_config_json_passes(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    job, _ = job_from_words("r", [f"model={folder}", "dataset=synthetic", "max_len=64", "effective_batch=4"])
    assert job.model == str(folder)
    assert not job.is_preset
    assert job.weights == "pretrained"


def test_local_model_folder_without_config_json_fails(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(JobError, match="config.json"):
        job_from_words("r", [f"model={folder}", "dataset=synthetic", "max_len=64", "effective_batch=4"])


@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-0.5B", "gpt2", "tiny-llama"])
def test_hub_ids_and_presets_are_accepted_without_touching_the_network(model):
    job, _ = job_from_words("r", [f"model={model}", "dataset=tatsu-lab/alpaca:default", "max_len=64",
                                  "effective_batch=4"])
    assert job.model == model


@pytest.mark.parametrize("host", ["local", "me@gpu-box", "me@10.0.0.2:2222", "gpu-box", "gpu-box:2222"])
def test_hosts_in_the_accepted_form_parse(host):
    job, _ = job_from_words("r", BASE + [f"host={host}"])
    assert job.host == host


def test_ssh_config_names_a_file_goes_with_an_ssh_host_and_is_kept_in_the_records(tmp_path, monkeypatch):
    from autotune.config.job_files import job_yaml

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "lab_config").write_text("Host gpu-box\n  HostName 10.0.0.7\n")
    job, _ = job_from_words("r", BASE + ["host=gpu-box", "ssh_config=~/lab_config"])
    assert job.ssh.config == str(tmp_path / "lab_config")              # ~ expanded once, here
    validate("job", job.to_dict())
    (tmp_path / "job.yaml").write_text(job_yaml(job))
    assert job_from_words("r", [f"config={tmp_path / 'job.yaml'}"])[0] == job
    # /dev/null is no config at all, as `ssh -F /dev/null`: the way round a config autotune cannot follow.
    assert job_from_words("r", BASE + ["host=me@10.0.0.7", "ssh_config=/dev/null"])[0].ssh.config == "/dev/null"
    with pytest.raises(JobError, match="ssh_config='~/nowhere': no such file"):
        job_from_words("r", BASE + ["host=gpu-box", "ssh_config=~/nowhere"])
    with pytest.raises(JobError, match="go with an SSH host"):
        job_from_words("r", BASE + ["ssh_config=~/lab_config"])


@pytest.mark.parametrize("words", [
    ["smoke"],
    BASE,
    BASE + ["padding=padding_free", "per_device_train_batch_size=8", "precision=bf16", "time=1h30m",
            "max_trials=5", "method=lora", "gpu=4090", "seed=3", "kb=/tmp/kb", "weights=random"],
])
def test_to_dict_is_a_valid_job_record_and_round_trips(words):
    job, _ = job_from_words("r", words)
    data = job.to_dict()
    validate("job", data)
    json_round_trip = json.loads(json.dumps(data))
    assert Job.from_dict(json_round_trip) == job


def test_job_schema_rejects_a_tampered_record():
    job, _ = job_from_words("r", BASE)
    data = job.to_dict()
    data["start"]["padding"] = "zero"
    with pytest.raises(RecordError, match="padding"):
        validate("job", data)


def test_job_construction_rejects_a_micro_batch_that_does_not_divide():
    with pytest.raises(JobError, match="does not divide"):
        Job(run="r", model="tiny-qwen2", dataset="synthetic", max_len=64, effective_batch=16,
            start=Knobs(per_device_train_batch_size=3))


@pytest.mark.parametrize("host", ["not a host", "bad@@host", "user@", "@host", "user@host:port"])
def test_hosts_not_in_the_accepted_form_are_rejected_when_parsed(host):
    with pytest.raises(JobError, match="user@host"):
        job_from_words("r", BASE + [f"host={host}"])


@pytest.mark.parametrize("field, value", [("max_len", 7), ("effective_batch", 0), ("method", "ppo"),
                                          ("weights", "trained"), ("run", "a/b")])
def test_job_construction_validates_fields(field, value):
    values = dict(run="r", model="tiny-qwen2", dataset="synthetic", max_len=64, effective_batch=16)
    values[field] = value
    with pytest.raises(JobError):
        Job(**values)


def test_only_names_catalog_knobs():
    job, _ = job_from_words("r", ["smoke", "only=padding, optim"])
    assert job.only == ("padding", "optim") and Job.from_dict(job.to_dict()).only == ("padding", "optim")
    with pytest.raises(JobError, match="max_len is not a knob"):
        job_from_words("r", ["smoke", "only=padding,max_len"])


def test_model_mlp_fills_its_defaults_and_keeps_the_users_sizes():
    job, _ = job_from_words("m", ["model=mlp", "mlp_width=256", "per_device_train_batch_size=8"])
    assert job.is_mlp and job.dataset == "synthetic" and job.weights == "random"
    assert (job.mlp.width, job.mlp.depth, job.mlp.rows, job.max_len, job.effective_batch) == (256, 4, 8192, 512, 64)
    assert job.start.per_device_train_batch_size == 8 and job.time_budget_s is None
    smoke, _ = job_from_words("m", ["model=mlp", "smoke"])
    assert smoke.time_budget_s == 90  # the install check ends within two minutes
    validate("job", job.to_dict())
    assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    # The numerics opt-in is any job's: an MLP's optim may be offered bitsandbytes' 8-bit AdamW.
    assert job_from_words("m", ["model=mlp", "allow_numerics_change=true"])[0].allow_numerics_change


@pytest.mark.parametrize("words,named", [
    (["model=mlp", "dataset=tatsu-lab/alpaca"], "dataset="),
    (["model=mlp", "method=lora"], "method="),
    (["model=mlp", "weights=pretrained"], "weights="),
    (["model=mlp", "realize=true"], "realize="),
    (["script=examples/byo_script/plain_loop.py", "realize=false"], "realize="),
    (["model=mlp", "padding=padding_free"], "padding"),
    (["model=mlp", "mlp_depth=0"], "mlp_depth="),
    (["model=mlp", "allow_numerics_change=maybe"], "allow_numerics_change="),
    (["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=4", "mlp_width=8"], "model=mlp"),
])
def test_mlp_keys_that_do_not_fit_are_one_line_errors(words, named):
    with pytest.raises(JobError) as error:
        job_from_words("m", words)
    assert named in str(error.value) and "\n" not in str(error.value)


def test_every_numeric_job_key_has_a_documented_range_checked_before_work():
    from autotune.config.job_keys import RANGES, range_text
    from autotune.workloads.jobs import job_from_words

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "job-keys.md").read_text()
    for key in ("max_len", "effective_batch", "max_trials", "time", "seed", "mem_limit", "mem_margin",
                "llm_timeout", "mlp_width", "mlp_depth", "mlp_rows"):
        assert key in RANGES and range_text(key) in page, key
    words = {"max_trials": "10001", "seed": str(2**32), "time": "9000h", "mlp_rows": str(10**7 + 1),
             "mem_margin": "0.95", "effective_batch": str(2**16 + 1)}
    for key, value in words.items():
        with pytest.raises(JobError):
            job_from_words("r", ["model=mlp", f"{key}={value}"])
