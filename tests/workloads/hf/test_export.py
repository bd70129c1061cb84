"""The hand-over files of a Hugging Face text job: what `trl sft --config` reads, and the same as kwargs.

tests/workloads/hf/test_realize.py runs such files through `trl sft` itself."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.output import realize
from autotune.workloads.hf.export import python_kwargs, trl_config
from autotune.config.job import Job
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import Knobs
from autotune.output.records import RunFolder
from autotune.output.report import write_best_config
from autotune.workloads.vlm.caveats import caveats

trl = pytest.importorskip("trl")

BEST = Knobs(per_device_train_batch_size=16, padding="padding_free", attn_implementation="sdpa")


@pytest.fixture(scope="module")
def fields():
    from autotune.workloads.hf.trl_args import sft_fields

    return sft_fields()


def parser_keys() -> set[str]:
    """Every key `trl sft --config` takes: its four dataclasses' fields (others go to accelerate and fail)."""
    return {f.name for cls in (trl.ScriptArguments, trl.SFTConfig, trl.ModelConfig, trl.DatasetMixtureConfig)
            for f in dataclasses.fields(cls)}


def demo_job(**keys: Any) -> Job:
    return job_from_dict("demo", {"smoke": True, **keys})


def test_a_preset_file_names_the_run_folders_model_and_rows(fields, tmp_path):
    config = trl_config(demo_job(), BEST, fields=fields, cpu=True, run_path=tmp_path)
    assert set(config) <= parser_keys()
    assert config["model_name_or_path"] == str(tmp_path / "model") and config["dataset_name"] == str(tmp_path / "data")
    # TRL (>= 1.0) refuses padding_free with max_length set; the rows are truncated already.
    assert config["padding_free"] is True and config["max_length"] is None
    assert config["use_cpu"] is True and config["bf16"] is False and config["attn_implementation"] == "sdpa"
    assert config["dtype"] == "float32" and "use_cache" not in json.dumps(config)


def test_a_hub_model_and_dataset_are_named_as_given_and_lora_names_its_layers(fields, tmp_path):
    job = Job(run="r", model="Qwen/Qwen2.5-0.5B", dataset="tatsu-lab/alpaca:default", max_len=256, effective_batch=8,
              method="lora")
    config = trl_config(job, Knobs(), fields=fields, cpu=False, run_path=tmp_path,
                        lora_targets=["q_proj", "v_proj", "o_proj"])
    assert set(config) <= parser_keys() and "use_cpu" not in config
    assert (config["model_name_or_path"], config["dataset_name"], config["dataset_config"]) == (
        "Qwen/Qwen2.5-0.5B", "tatsu-lab/alpaca", "default")
    assert config["max_length"] == 256 and config["pad_to_multiple_of"] == 256
    assert (config["use_peft"], config["lora_r"], config["lora_alpha"], config["lora_dropout"]) == (True, 16, 32, 0.0)
    assert config["lora_target_modules"] == ["q_proj", "v_proj", "o_proj"]
    with pytest.raises(ValueError, match="module names"):
        trl_config(job, Knobs(), fields=fields, cpu=False, run_path=tmp_path)


def test_a_local_data_file_is_named_with_its_builder(fields, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "a"}\n')
    job = Job(run="r", model="tiny-qwen2", dataset=str(data), max_len=64, effective_batch=4)
    config = trl_config(job, Knobs(), fields=fields, cpu=True, run_path=tmp_path)
    assert config["datasets"] == [{"path": "json", "data_files": str(data.resolve())}] and "dataset_name" not in config
    trl.DatasetMixtureConfig(datasets=config["datasets"])  # the form TRL's parser builds


def test_the_keyword_arguments_are_the_same_file(fields, tmp_path):
    job = demo_job(method="lora")
    config = trl_config(job, BEST, fields=fields, cpu=True, run_path=tmp_path,
                        lora_targets=["q_proj", "k_proj"])
    kwargs = python_kwargs(config)
    sft = trl.SFTConfig(**kwargs["sft_config"])
    assert sft.padding_free is True and sft.per_device_train_batch_size == 16 and sft.max_length is None
    assert kwargs["from_pretrained"] == {"attn_implementation": "sdpa", "dtype": "float32"}
    from peft import LoraConfig

    lora = LoraConfig(**kwargs["lora_config"])
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, set(lora.target_modules)) == (16, 32, 0.0, {"q_proj", "k_proj"})


def test_the_sdpa_padding_free_caveat_is_gone():
    """SFTTrainer runs the model without a cache: packed rows stay apart with sdpa (REFERENCE.md)."""
    assert caveats(Knobs(padding="padding_free", attn_implementation="sdpa")) == []
    assert caveats(Knobs(padding="padding_free", attn_implementation="eager")) == []


def _record(job: Job, fields, run_path: Path, best_trial: int, loop_best: int = 3, **extra) -> dict:
    configs = {"baseline": trl_config(job, job.start, fields=fields, cpu=True, run_path=run_path),
               "best": trl_config(job, BEST, fields=fields, cpu=True, run_path=run_path)}
    return {"schema_version": 1, "state": "complete", "reason": "", "loop_best_trial": loop_best, "loop_speedup": 3.0,
            "best_trial": best_trial, "best_knobs": BEST.to_dict(), "configs": configs,
            "kwargs": {k: python_kwargs(v) for k, v in configs.items()}, **extra}


def test_best_config_files_are_the_ones_the_hand_over_ran(fields, tmp_path):
    folder = RunFolder(tmp_path / "runs", "demo")
    folder.make()
    job = demo_job()
    record = _record(job, fields, folder.path.resolve(), 3, baseline_samples_per_s=2.0, best_samples_per_s=5.6,
                     speedup=2.8, rounds=1, runs=[], refused=[])
    from autotune.schemas import validate

    validate("realized", record)
    (folder.path / realize.REALIZED).write_text(json.dumps(record))
    stored = write_best_config(folder, job, Knobs())  # the hand-over's best wins over the knobs passed
    for label in ("baseline", "best"):
        text = (folder.path / f"{label}_config.yaml").read_text()
        assert text.startswith("# autotune run demo") and yaml.safe_load(text) == record["configs"][label]
    assert stored["command"] == f"trl sft --config {folder.path / 'best_config.yaml'}"
    assert Knobs.from_dict(stored["knobs"]) == BEST and stored["sft_config"]["padding_free"] is True
    assert "x2.80" in stored["realized"] and "x3.00" in stored["realized"] and "0.93 of the loop's" in stored["realized"]
    assert json.loads(folder.best.read_text()) == stored


def test_a_refused_best_is_named_and_the_fallback_handed_over(fields, tmp_path):
    folder = RunFolder(tmp_path / "runs", "demo")
    folder.make()
    record = _record(demo_job(), fields, folder.path.resolve(), 2, reason="", runs=[],
                     refused=[{"trial": 3, "error": "ValueError: When padding_free=True without packing, ..."}])
    record.update(state="complete", reason="no kept config ran in `trl sft`; the baseline is handed over")
    line = realize.summary(record)
    assert "baseline is handed over" in line and "trial 3's file was refused" in line and "padding_free" in line
    record.update(state="failed", reason="the hand-over step ended timeout: no result after 300s")
    assert "not measured (the hand-over step ended timeout" in realize.summary(record)


def test_candidates_run_the_kept_chain_back_to_the_baseline():
    job = demo_job()
    records = [{"trial": 0, "decision": "baseline", "samples_per_s": 16.0, "knobs": Knobs().to_dict()},
               {"trial": 1, "decision": "keep", "samples_per_s": 64.0, "knobs": BEST.to_dict()},
               {"trial": 2, "decision": "discard", "samples_per_s": 1.0, "knobs": Knobs().to_dict()},
               {"trial": 3, "decision": "keep", "samples_per_s": 256.0, "knobs": BEST.to_dict()}]
    chain = realize.candidates(job, records, 3)
    assert [c["trial"] for c in chain] == [3, 1, 0]
    # The timed window lasts about as long for each file: more steps for a faster config.
    assert chain[0]["steps"] > chain[1]["steps"] > chain[2]["steps"] >= 2


def test_realize_is_a_job_key_that_tests_can_turn_off():
    assert demo_job().realize is True and demo_job(realize=False).realize is False
    assert Job.from_dict({k: v for k, v in demo_job().to_dict().items() if k != "realize"}).realize is True
    from autotune.util.errors import JobError

    with pytest.raises(JobError, match="realize"):
        demo_job(realize="maybe")


def test_the_hand_over_step_reads_its_spec_typed_and_names_what_is_missing(tmp_path):
    """output/realize.py's spec, as the hand-over child reads it: a Job, each candidate's Knobs."""
    from autotune.util.errors import RecordError
    from autotune.workloads.hf.handover_spec import HandoverSpec

    job = demo_job()
    spec = {"schema_version": 1, "kind": "realize", "runner": "realize", "job": job.to_dict(),
            "knobs": job.start.to_dict(), "rows_path": str(tmp_path / "rows.json"),
            "model_config_path": str(tmp_path / "model_config.json"), "run_path": str(tmp_path),
            "work_dir": str(tmp_path / "work"), "rounds": 1, "realize": True, "skip_reason": "", "cpu": True,
            "run_timeout_s": 60, "offline": True,
            "candidates": [{"trial": 3, "knobs": BEST.to_dict(), "steps": 2},
                           {"trial": 0, "knobs": job.start.to_dict(), "steps": 2}]}
    typed = HandoverSpec.from_dict(spec)
    assert typed.job == job and typed.candidates[0].knobs == BEST and typed.candidates[-1].trial == 0
    with pytest.raises(RecordError, match="'work_dir'"):
        HandoverSpec.from_dict({k: v for k, v in spec.items() if k != "work_dir"})
    with pytest.raises(RecordError, match="malformed"):
        HandoverSpec.from_dict({**spec, "candidates": [{"trial": 0, "knobs": {"padding": "sideways"}, "steps": 2}]})
