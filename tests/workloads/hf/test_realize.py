"""The hand-over files run in TRL's own `trl sft` entry point, as a user runs them: the demo's baseline
and best, a LoRA job's adapter, and a refused file.

A fresh `trl sft` costs seconds (two interpreters: its own and accelerate's launch of the script): one
here, the demo's file; the others run forked from this process once it has imported TRL, as the
hand-over runs them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.workloads.hf.export import yaml_text
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import Knobs
from autotune.workloads.hf import realize as child
from autotune.workloads.hf.handover_spec import HandoverSpec
from autotune.engine.data import read_rows, synthetic_rows, write_rows
from autotune.workloads.hf.models import resolve_config, save_config

pytestmark = pytest.mark.slow
# What the demo keeps on a CPU: packed rows, one micro-batch per step.
DEMO_BEST = Knobs(per_device_train_batch_size=16, padding="padding_free", attn_implementation="sdpa")


def trl_or_skip() -> str:
    try:
        return child.trl_executable()
    except child.RealizeFault as missing:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no `trl` console script here ({missing.reason})")


def run_folder(tmp_path: Path, best: Knobs = DEMO_BEST, **keys: Any) -> tuple[dict, dict]:
    """A demo-shaped run folder (its config and rows, as a frame writes them) and the hand-over's files."""
    job = job_from_dict("demo", {"smoke": True, **keys})
    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    config, _ = resolve_config(job)
    save_config(config, run / "model_config.json")
    write_rows(run / "rows.json", synthetic_rows(48, job.max_len, config.vocab_size, 0), 0, config.vocab_size)
    spec = {"job": job.to_dict(), "run_path": str(run), "work_dir": str(run / "trials" / "realize" / "work"),
            "rows_path": str(run / "rows.json"), "model_config_path": str(run / "model_config.json"),
            "candidates": [{"trial": 3, "knobs": best.to_dict(), "steps": 2},
                           {"trial": 0, "knobs": job.start.to_dict(), "steps": 2}],
            "rounds": 1, "realize": False, "skip_reason": "tested here", "cpu": True, "run_timeout_s": 300,
            "offline": True}
    result = child.body(HandoverSpec.from_dict(spec))
    for label, trial in (("baseline", "0"), ("best", "3")):
        (run / f"{label}_config.yaml").write_text(yaml_text(result["files"][trial], "test"))
    return spec, result


def trl_sft(config: Path, out: Path, steps: int = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([trl_or_skip(), "sft", "--config", str(config), "--max_steps", str(steps), "--output_dir",
                           str(out)], capture_output=True, text=True, timeout=600, env=env)


def test_the_demos_best_config_yaml_runs_in_trl_sft_as_it_stands(tmp_path):
    trl_or_skip()
    spec, _ = run_folder(tmp_path)
    run = Path(spec["run_path"])
    # The preset's model and rows are in the run folder, where the file names them: nothing to download.
    assert (run / "model" / "config.json").exists() and (run / "model" / "tokenizer.json").exists()
    rows = [json.loads(line)["input_ids"] for line in (run / "data" / "train.jsonl").read_text().splitlines()]
    assert rows == read_rows(run / "rows.json")["rows"]
    done = trl_sft(run / "best_config.yaml", tmp_path / "out")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "'train_runtime'" in done.stdout + done.stderr


def test_the_baseline_runs_and_a_file_trl_refuses_gives_way_to_it(tmp_path):
    """The interleaved step: the baseline's file runs (exit 0); a best TRL refuses is named, never handed over."""
    trl_or_skip()
    spec, result = run_folder(tmp_path)
    work = Path(spec["work_dir"])
    work.mkdir(parents=True, exist_ok=True)
    refused = dict(result["files"]["3"], max_length=512)  # what TRL >= 1.0 refuses with padding_free
    files = {"0": Path(spec["run_path"]) / "baseline_config.yaml", "3": work / "refused.yaml"}
    files["3"].write_text(yaml.safe_dump(refused))
    realized = child.interleave(HandoverSpec.from_dict({**spec, "realize": True}), files, work)
    baseline_run, best_run = realized["runs"]
    assert baseline_run["config"] == "baseline" and baseline_run["exit_code"] == 0 and baseline_run["train_runtime_s"] > 0
    assert best_run["exit_code"] != 0 and realized["best_trial"] == 0
    assert realized["refused"][0]["trial"] == 3 and "padding_free" in realized["refused"][0]["error"]


def test_a_lora_jobs_file_trains_the_adapter_the_trials_trained(tmp_path):
    trl_or_skip()
    spec, result = run_folder(tmp_path, method="lora")
    # `trl sft`'s own entry point on the file as it stands, as the hand-over runs it: forked from this
    # process once it has imported TRL (the console script's fresh start is the demo's test above).
    child.warm_trl({})
    log = tmp_path / "trl.log"
    words = ["sft", "--config", str(Path(spec["run_path"]) / "best_config.yaml"), "--max_steps", "2",
             "--output_dir", str(tmp_path / "out")]
    code = child._forked(words, log, 600, {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"})
    assert code == 0, log.read_text(errors="replace")[-3000:]
    adapter = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"]) == (16, 32, 0.0)
    assert sorted(adapter["target_modules"]) == result["lora_target_modules"]
    assert set(result["lora_target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"}


def test_a_vlm_lora_file_names_the_language_model_layers_the_trials_adapted(tmp_path):
    # peft's "all-linear" would also adapt the vision tower and projector, which the trials kept frozen.
    job = job_from_dict("vlm", {"smoke": True, "model": "tiny-qwen2-vl", "dataset": "synthetic", "max_len": 256,
                                "effective_batch": 2, "method": "lora"})
    run = tmp_path / "runs" / "vlm"
    run.mkdir(parents=True)
    config, _ = resolve_config(job)
    save_config(config, run / "model_config.json")
    write_rows(run / "rows.json", synthetic_rows(8, job.max_len, config.text_config.vocab_size, 0), 0,
               config.text_config.vocab_size)
    spec = {"job": job.to_dict(), "run_path": str(run), "work_dir": str(run / "work"),
            "rows_path": str(run / "rows.json"), "model_config_path": str(run / "model_config.json"),
            "candidates": [{"trial": 0, "knobs": job.start.to_dict(), "steps": 2}], "rounds": 1, "realize": False,
            "skip_reason": "an image-text model", "cpu": True, "run_timeout_s": 60, "offline": True}
    result = child.body(HandoverSpec.from_dict(spec))
    targets = result["files"]["0"]["lora_target_modules"]
    assert targets and all("language_model" in name or "text_model" in name for name in targets)
    assert not any("visual" in name or "vision" in name for name in targets)
    assert result["kwargs"]["0"]["lora_config"]["target_modules"] == targets
    assert not (run / "data").exists() and not (run / "model").exists()  # nothing trl sft could not take


def test_a_timed_run_gets_the_environment_its_file_header_names(tmp_path, monkeypatch):
    # expandable_segments is no trl sft field: the header says to set it, and the timed run sets it in
    # the forked child before TRL's entry point runs (there, before anything touches CUDA).
    import trl.cli

    from autotune.workloads.hf.trl_args import ALLOC_CONF, environment

    def main() -> int:
        os.write(1, f"{ALLOC_CONF}={os.environ.get(ALLOC_CONF)}".encode())   # fd 1: the run's log
        return 0

    monkeypatch.setattr(trl.cli, "main", main)
    monkeypatch.delenv(ALLOC_CONF, raising=False)
    env = environment(Knobs(expandable_segments=True))
    assert child._forked(["sft"], tmp_path / "on.log", 60, env) == 0
    assert (tmp_path / "on.log").read_text().strip() == f"{ALLOC_CONF}=expandable_segments:True"
    assert child._forked(["sft"], tmp_path / "off.log", 60, environment(Knobs())) == 0
    assert (tmp_path / "off.log").read_text().strip() == f"{ALLOC_CONF}=None"
    assert ALLOC_CONF not in os.environ       # the parent's own environment is left as it was
