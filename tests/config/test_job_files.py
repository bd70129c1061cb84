"""Job files: config=job.yaml, from=sft.yaml (a `trl sft` config), and the run folder's job.yaml."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from autotune.util.errors import JobError
from autotune.workloads.hf.export import trl_config, write_files
from autotune.workloads.jobs import job_from_words
from autotune.config.job_files import job_mapping, job_yaml
from autotune.config.knobs import Knobs

# The installed names (transformers >= 5.23, trl >= 1.16), so the files below are what a run writes.
FIELDS = frozenset({"per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16", "tf32",
                    "activation_checkpointing", "torch_compile", "dataloader_num_workers",
                    "dataloader_pin_memory", "optim", "train_sampling_strategy", "padding_free", "max_length",
                    "pad_to_multiple_of", "use_cpu"})


def write(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_job_file_builds_the_job_its_words_build(tmp_path):
    words = ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=8", "max_trials=3",
             "precision=bf16", "only=padding,precision", "time=10m"]
    config = write(tmp_path / "job.yaml", {"model": "tiny-qwen2", "dataset": "synthetic", "max_len": 64,
                                          "effective_batch": 8, "max_trials": 3, "precision": "bf16",
                                          "only": ["padding", "precision"], "time": "10m"})
    assert job_from_words("r", [f"config={config}"]) == job_from_words("r", words)


def test_words_override_the_file_and_a_typed_batch_split_replaces_the_files(tmp_path):
    config = write(tmp_path / "job.yaml", {"model": "mlp", "max_trials": 5, "per_device_train_batch_size": 4,
                                          "smoke": True})
    job, modes = job_from_words("r", [f"config={config}", "max_trials=2", "gradient_accumulation_steps=8"])
    assert (job.max_trials, job.start.per_device_train_batch_size, modes) == (2, 64 // 8, ["smoke"])


def test_from_takes_model_dataset_length_batch_and_the_knobs_a_trl_config_sets(tmp_path):
    sft = write(tmp_path / "sft.yaml", {
        "model_name_or_path": "Qwen/Qwen2.5-0.5B", "dataset_name": "tatsu-lab/alpaca", "max_length": 2048,
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4, "bf16": True,
        "gradient_checkpointing": True, "model_init_kwargs": {"attn_implementation": "sdpa"},
        "train_sampling_strategy": "group_by_length", "optim": "adamw_torch_fused", "dataloader_num_workers": 2,
        "dataloader_pin_memory": True, "torch_compile": True, "use_peft": True, "seed": 7,
        "learning_rate": 2e-5, "output_dir": "out"})
    job, _ = job_from_words("r", [f"from={sft}"])
    assert (job.model, job.dataset, job.max_len, job.effective_batch, job.method, job.seed) == (
        "Qwen/Qwen2.5-0.5B", "tatsu-lab/alpaca", 2048, 16, "lora", 7)
    assert job.start == Knobs(per_device_train_batch_size=4, padding="longest", group_by_length=True,
                              attn_implementation="sdpa", precision="bf16", gradient_checkpointing=True,
                              torch_compile=True, dataloader_num_workers=2, dataloader_pin_memory=True,
                              optim="adamw_torch_fused")


def test_from_reads_trls_defaults_and_older_names(tmp_path):
    """No max_length: `trl sft` truncates at 1024; accumulation alone: its micro-batch is 8."""
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "a row"}\n{"text": "another"}\n')
    sft = write(tmp_path / "sft.yaml", {"model_name_or_path": "Qwen/Qwen2.5-0.5B",
                                       "datasets": [{"path": "json", "data_files": str(data)}],
                                       "gradient_accumulation_steps": 2, "group_by_length": True,
                                       "attn_implementation": "sdpa", "padding_free": True, "fp16": True})
    job, _ = job_from_words("r", [f"from={sft}"])
    assert (job.dataset, job.max_len, job.effective_batch, job.start.per_device_train_batch_size) == (
        str(data), 1024, 16, 8)
    assert (job.start.padding, job.start.group_by_length, job.start.attn_implementation, job.start.precision) == (
        "padding_free", True, "sdpa", "fp16")


def test_a_compile_mode_in_a_trl_config_starts_compiled_as_trl_sft_runs_it(tmp_path):
    """TrainingArguments turns torch_compile on whenever a mode is set: the baseline is the compiled run."""
    sft = write(tmp_path / "sft.yaml", {"model_name_or_path": "m/m", "dataset_name": "d/d", "max_length": 256,
                                       "per_device_train_batch_size": 4, "torch_compile_mode": "max-autotune"})
    start = job_from_words("r", [f"from={sft}"])[0].start
    assert (start.torch_compile, start.torch_compile_mode) == (True, "max-autotune")


def test_a_bad_value_in_a_trl_config_names_the_file_and_the_key(tmp_path):
    sft = write(tmp_path / "sft.yaml", {"model_name_or_path": "m/m", "dataset_name": "d/d",
                                       "model_init_kwargs": {"attn_implementation": "flex_attention"}})
    with pytest.raises(JobError, match=r"from=.*sft.yaml: attn_implementation='flex_attention'"):
        job_from_words("r", [f"from={sft}"])


KNOB_SETS = [Knobs(), Knobs(per_device_train_batch_size=4, padding="longest", group_by_length=True,
                           attn_implementation="sdpa", precision="bf16", gradient_checkpointing=True,
                           optim="adamw_torch_fused", dataloader_num_workers=2, dataloader_pin_memory=True),
             Knobs(per_device_train_batch_size=2, padding="padding_free", precision="tf32", torch_compile=True)]


@pytest.mark.parametrize("knobs", KNOB_SETS, ids=["naive", "many", "padding-free"])
def test_a_run_folders_best_config_yaml_is_accepted_by_from_and_gives_its_job_back(tmp_path, knobs):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "a row"}\n')
    job, _ = job_from_words("orig", ["model=Qwen/Qwen2.5-0.5B", f"dataset={data}", "max_len=128",
                                     "effective_batch=8", "seed=3"])
    folder = type("Folder", (), {"path": tmp_path / "runs" / "orig"})()
    folder.path.mkdir(parents=True)
    contents = {label: trl_config(job, k, fields=FIELDS, cpu=True, run_path=folder.path)
                for label, k in (("baseline", job.start), ("best", knobs))}
    write_files(folder, job, knobs.to_dict(), {"configs": contents, "best_trial": 2, "state": "complete"}, True)
    # Padding-free hands over max_length: null (TRL refuses it without packing): the length is a word then.
    length = ["max_len=128"] if knobs.padding == "padding_free" else []
    again, _ = job_from_words("again", [f"from={folder.path / 'best_config.yaml'}", *length])
    assert again == dataclasses.replace(job, run="again", start=knobs)


def test_a_smoke_runs_own_rows_map_back_to_synthetic(tmp_path):
    run = tmp_path / "runs" / "demo"
    (run / "data").mkdir(parents=True)
    (run / "data" / "train.jsonl").write_text('{"input_ids": [1, 2, 3]}\n')
    (run / "job.json").write_text(json.dumps({"dataset": "synthetic"}))
    sft = write(tmp_path / "best.yaml", {"model_name_or_path": "tiny-qwen2", "dataset_name": str(run / "data"),
                                        "max_length": 64, "per_device_train_batch_size": 2})
    assert job_from_words("r", [f"from={sft}"])[0].dataset == "synthetic"


JOBS = [["model=mlp", "smoke", "max_trials=2", "per_device_train_batch_size=4", "mlp_width=64",
         "allow_numerics_change=true"],
        ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=8", "precision=bf16",
         "padding=longest", "only=padding,precision", "time=1h", "mem_limit=2GiB", "method=lora", "llm=gpt-x",
         "llm_timeout=30s", "realize=false", "fresh"]]


@pytest.mark.parametrize("words", JOBS, ids=["mlp-smoke", "hf-many-keys"])
def test_the_run_folders_job_yaml_reruns_the_job_as_it_ran(tmp_path, words):
    job, _ = job_from_words("first", words)
    (tmp_path / "job.yaml").write_text(job_yaml(job))
    again, _ = job_from_words("second", [f"config={tmp_path / 'job.yaml'}"])
    assert again == dataclasses.replace(job, run="second")
    assert "run" not in job_mapping(job)


def test_a_tune_writes_job_yaml_beside_job_json(tmp_path):
    from autotune.output.records import RunFolder

    job, _ = job_from_words("r", JOBS[0])
    folder = RunFolder(tmp_path / "runs", "r")
    folder.create(job.to_dict())
    assert job_from_words("r", [f"config={folder.path / 'job.yaml'}"])[0] == job


def test_a_job_file_may_name_its_trl_config_beside_it(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    write(tmp_path / "cfg" / "sft.yaml", {"model_name_or_path": "m/m", "dataset_name": "d/d", "max_length": 256,
                                         "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2})
    config = write(tmp_path / "cfg" / "job.yaml", {"from": "sft.yaml", "max_trials": 4})
    monkeypatch.chdir(tmp_path)  # the path is the job file's folder's, not the shell's
    job, _ = job_from_words("r", [f"config={config}", "max_len=128"])
    assert (job.model, job.max_len, job.effective_batch, job.max_trials) == ("m/m", 128, 4, 4)
