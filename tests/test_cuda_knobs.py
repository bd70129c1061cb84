"""On a CUDA device (skipped without one): the knobs of issue #20, each a complete trial that trains the
rows its baseline trains within the knob's tolerance, with its memory peak and speed printed
(`pytest -s` shows them; scripts/gpu_session.sh keeps the log). A knob whose package is missing skips,
naming the package, as not_applicable does in a tune."""

from __future__ import annotations

import json

import pytest
from conftest import make_spec

from autotune.executors import LocalExecutor
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import HUB_FLASH, NUMERICS, Knobs, not_applicable
from autotune.probes import parity

pytestmark = pytest.mark.gpu

TEXT = {"model": "tiny-qwen2", "dataset": "synthetic", "max_len": 256, "effective_batch": 8}
BF16 = {"precision": "bf16", "attn_implementation": "sdpa", "per_device_train_batch_size": 4}


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    made = {}
    for name, keys in (("sft", TEXT), ("lora", {**TEXT, "method": "lora"}),
                       ("vlm", {"model": "tiny-qwen2-vl", "dataset": "synthetic", "max_len": 256, "effective_batch": 4})):
        folder = tmp_path_factory.mktemp(name)
        job = job_from_dict("g", keys)
        result = LocalExecutor().run({**make_spec(folder, "frame", job=job), "runner": "hf"}, folder / "frame", 300)
        assert result["state"] == "complete", result
        made[name] = (folder, job, result["frame"])
    return made


def trial(frames, kind: str, name: str, **knobs) -> dict:
    folder, job, frame = frames[kind]
    spec = {**make_spec(folder, job=job, knobs=Knobs(**knobs), ceiling=True, peaks=frame["device"]["peaks"]),
            "runner": "hf"}
    result = LocalExecutor().run(spec, folder / name, timeout_s=300)
    assert result["state"] == "complete", (name, result)
    measurement = result["measurement"]
    print(json.dumps({"trial": f"{kind}/{name}", "samples_per_s": round(measurement["samples_per_s"], 2),
                      "mfu": measurement["mfu"], "peak_gib": round(measurement["peak_memory"]["bytes"] / 2**30, 3),
                      "ceiling_gib": round(measurement["ceiling"]["bytes"] / 2**30, 3)}))
    return measurement


def applies_or_skip(frames, kind: str, base: dict, name: str, value) -> None:
    why = not_applicable(name, value, Knobs(**base), frames[kind][2]["device"], frames[kind][1].effective_batch)
    if why:
        pytest.skip(f"{name}={value}: {why}")


def same_rows(base: dict, measurement: dict, knobs: dict) -> None:
    tolerance = max([parity.tolerance("bf16", "bf16")] + [NUMERICS[(k, v)][0] for k, v in knobs.items() if (k, v) in NUMERICS])
    check = parity.compare(base["parity_losses"], measurement["parity_losses"], tolerance)
    assert check["ok"], check


@pytest.fixture(scope="module")
def baselines(frames):
    return {kind: trial(frames, kind, "base", **BF16) for kind in ("sft", "lora", "vlm")}


@pytest.mark.parametrize("kind, name, value", [
    ("sft", "use_liger_kernel", True), ("sft", "activation_offloading", True), ("sft", "expandable_segments", True),
    ("sft", "optim", "adamw_torch_fused"), ("sft", "optim", "adamw_bnb_8bit"), ("sft", "optim", "paged_adamw_8bit"),
    ("sft", "attn_implementation", "flash_attention_2"), ("sft", "attn_implementation", "flash_attention_3"),
    ("sft", "attn_implementation", HUB_FLASH),
    ("sft", "float8_training", True), ("lora", "dtype", "bfloat16"), ("lora", "load_in_4bit", True),
    ("vlm", "chunked_cross_entropy", True),
])
def test_each_gpu_knob_trains_the_same_rows_on_the_card(frames, baselines, kind, name, value):
    applies_or_skip(frames, kind, BF16, name, value)
    knobs = {**BF16, name: value}
    if name == "attn_implementation":
        knobs["padding"] = "padding_free"  # the kernels take variable lengths: rows packed without padding
    measurement = trial(frames, kind, f"{name}-{value}".replace("/", "_"), **knobs)  # a Hub kernel names its repo
    same_rows(baselines[kind], measurement, {name: value})
    if name == "expandable_segments":
        assert measurement["env"].get("alloc_conf") == "expandable_segments:True"
    if name == "chunked_cross_entropy":  # the VLM's full fp32 logits never exist
        assert measurement["ceiling"]["bytes"] < baselines[kind]["ceiling"]["bytes"]


def test_compile_modes_and_loader_settings_on_the_card(frames, baselines):
    compiled = {**BF16, "torch_compile": True}
    base = trial(frames, "sft", "compiled", **compiled)
    same_rows(baselines["sft"], base, {})
    tuned = trial(frames, "sft", "reduce-overhead", **compiled, torch_compile_mode="reduce-overhead")
    same_rows(baselines["sft"], tuned, {})
    # Compile time stays in the warm-up steps, outside the timed window.
    assert max(tuned["warmup_times_s"]) > max(tuned["step_times_s"])
    loader = trial(frames, "sft", "loader", **BF16, dataloader_num_workers=2, dataloader_persistent_workers=True,
                   dataloader_prefetch_factor=4)
    same_rows(baselines["sft"], loader, {})
