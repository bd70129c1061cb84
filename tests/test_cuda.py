"""On a CUDA device (skipped without one): the runners' CUDA-only paths, run as the executor runs them.

The card's peaks are measured, every precision trains the same rows within the parity tolerance, the
allocator's peak is what memory reads, pinned memory and loader workers work, fp16 loss scaling runs,
torch.compile runs, and an allocation failure is an `oom` state, not a crash.
"""

from __future__ import annotations

import pytest
from conftest import make_spec

from autotune.executors import LocalExecutor
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import Knobs
from autotune.probes import parity, peaks

pytestmark = pytest.mark.gpu

HF_JOB = {"model": "tiny-qwen2", "dataset": "synthetic", "max_len": 128, "effective_batch": 8}
MLP_JOB = {"model": "mlp", "mlp_width": 1024, "mlp_depth": 4, "max_len": 512, "effective_batch": 64}


def run(tmp_path, spec: dict, name: str) -> dict:
    return LocalExecutor().run(spec, tmp_path / name, timeout_s=300)


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """Each runner's frame on the card, once: (folder, frame) per runner."""
    made = {}
    for runner, keys in (("hf", HF_JOB), ("mlp", MLP_JOB)):
        folder = tmp_path_factory.mktemp(runner)
        job = job_from_dict("g", keys)
        result = run(folder, {**make_spec(folder, "frame", job=job), "runner": runner}, "frame")
        assert result["state"] == "complete", result
        made[runner] = (folder, job, result["frame"])
    return made


def trial(frames, runner: str, name: str, **knobs) -> dict:
    folder, job, frame = frames[runner]
    spec = {**make_spec(folder, job=job, knobs=Knobs(**knobs), ceiling=True, peaks=frame["device"]["peaks"],
                        profile_steps=1), "runner": runner}
    return run(folder, spec, name)


def test_the_frame_measures_the_card(frames):
    device = frames["hf"][2]["device"]
    assert device["kind"] == "cuda" and device["memory_bytes"] > 2**30 and device["tf32"]
    flops = device["peaks"]["matmul_flops"]
    assert flops["bf16"] > flops["fp32"] and device["peaks"]["copy_bytes_per_s"] > 1e11
    # Every precision at the full size: a small product on a GPU measures its launch, not its arithmetic.
    assert set(device["peaks"]["matmul_size"].values()) == {peaks.MATMUL_SIZE["cuda"]}


@pytest.mark.parametrize("runner", ["hf", "mlp"])
def test_every_precision_trains_the_same_rows_on_the_card(frames, runner):
    extra = {"padding": "padding_free", "attn_implementation": "sdpa"} if runner == "hf" else {}
    base = trial(frames, runner, "fp32", **extra)
    assert base["state"] == "complete", base
    for precision in ("tf32", "bf16", "fp16"):
        result = trial(frames, runner, precision, precision=precision, per_device_train_batch_size=4,
                       dataloader_num_workers=1, dataloader_pin_memory=True, **extra)
        assert result["state"] == "complete", (precision, result)
        measurement = result["measurement"]
        assert measurement["peak_memory"]["kind"] == "cuda_allocator" and measurement["ceiling"]["fits"]
        assert 0 < measurement["mfu"] < 1
        check = parity.compare(base["measurement"]["parity_losses"], measurement["parity_losses"],
                               parity.tolerance("fp32", precision))
        assert check["ok"], (precision, check)


def test_compiled_and_fused_steps_run_on_the_card(frames):
    result = trial(frames, "mlp", "compiled", torch_compile=True, optim="adamw_torch_fused",
                   per_device_train_batch_size=64)
    assert result["state"] == "complete", result


def test_an_allocation_failure_on_the_card_is_an_oom_state(frames):
    folder, job, frame = frames["mlp"]
    spec = {**make_spec(folder, job=job, inject_fault="oom"), "runner": "mlp"}
    result = run(folder, spec, "oom")
    assert result["state"] == "oom", result


def test_text_trials_train_inside_sft_trainer_on_the_card(frames):
    """bf16 autocast, padding-free with flash-attention varlen (TRL's collator passes cu_seq_lens),
    torch.compile through the trainer's dynamo plugin and fused AdamW: each a complete trial inside
    trl.SFTTrainer that trains the rows the fp32 padded baseline trains."""
    device = frames["hf"][2]["device"]
    base = trial(frames, "hf", "sft-fp32")
    assert base["state"] == "complete", base
    assert base["measurement"]["env"]["trainer"].startswith("trl.SFTTrainer")
    configs = {"bf16-fused": dict(precision="bf16", optim="adamw_torch_fused", per_device_train_batch_size=4),
               "bf16-compiled": dict(precision="bf16", torch_compile=True, per_device_train_batch_size=2)}
    if device.get("flash_attn"):
        configs["bf16-flash-packed"] = dict(precision="bf16", attn_implementation="flash_attention_2",
                                            padding="padding_free", per_device_train_batch_size=4)
    for name, knobs in configs.items():
        result = trial(frames, "hf", name, **knobs)
        assert result["state"] == "complete", (name, result)
        measurement = result["measurement"]
        assert 0 < measurement["mfu"] < 1 and measurement["ceiling"]["fits"], (name, measurement)
        assert measurement["breakdown"]["forward_share"] > 0, (name, measurement["breakdown"])
        check = parity.compare(base["measurement"]["parity_losses"], measurement["parity_losses"],
                               parity.tolerance("fp32", "bf16"))
        assert check["ok"], (name, check)
    if not device.get("flash_attn"):
        pytest.skip("flash_attn is not installed: the flash-attention padding-free trial did not run")


def test_fp16_loss_scaling_runs_inside_sft_trainer_on_the_card(frames):
    result = trial(frames, "hf", "sft-fp16", precision="fp16", per_device_train_batch_size=4)
    assert result["state"] == "complete", result
    assert result["measurement"]["ceiling"]["fits"]
