"""Packed rows (padding_free) on image-text models: the same per-row losses as padded rows through the real
runner, M-RoPE positions as the model computes them per row, the parity check catching rows that see each
other, and the frame's limit only where the runner cannot pack."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from autotune.config.job import Job
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import NAIVE_START, Knobs
from autotune.config.presets import PRESETS
from autotune.probes import parity
from autotune.engine.batching import collate
from autotune.workloads.hf.models import _config_from_dict, build_model
from autotune.workloads.vlm.vision import Vision, byte_tokenizer, family_tokens, image_processor_for
from autotune.workloads.vlm.frame import vlm_limits
from autotune.engine.vision_pack import pack_vision
from tests.conftest import make_spec, run_runner

# LLaVA rows hold 256 image tokens each: max_len leaves room for captions of different lengths.
JOBS = {"tiny-llava": 300, "tiny-qwen2-vl": 160, "tiny-qwen2.5-vl": 160, "tiny-idefics3": 160, "tiny-smolvlm": 160}
FP32 = parity.tolerance("fp32", "fp32")


@pytest.fixture(scope="module", params=list(JOBS))
def packed_frame(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"pack-{request.param}")
    job = job_from_dict("p", {"model": request.param, "dataset": "synthetic", "max_len": JOBS[request.param],
                              "effective_batch": 4, "smoke": True})
    result = run_runner(folder, make_spec(folder, "frame", job=job, rows_needed=12), "frame")
    assert result["state"] == "complete", result
    return job, folder, result["frame"]


def _trial(folder, job, name: str, padding: str, **fields) -> dict:
    knobs = Knobs(**{**NAIVE_START, "per_device_train_batch_size": 2, "padding": padding,
                     "attn_implementation": "sdpa"})
    result = run_runner(folder, make_spec(folder, job=job, knobs=knobs, rows_needed=12, measure_steps=1,
                                          warmup_max=0, **fields), name)
    assert result["state"] in ("complete", "invalid"), result
    # One measured step may be judged an impossible window: the parity losses are still in the rejected one.
    return result.get("measurement") or result["measurement_rejected"]


def test_packed_vlm_rows_train_what_padded_rows_train_and_a_leak_is_caught(packed_frame):
    job, folder, frame = packed_frame
    assert not any(limit["knob"] == "padding" for limit in frame["limits"])
    padded = _trial(folder, job, "longest", "longest")["parity_losses"]
    # The memory ceiling packs copies of the heaviest row, images included: it runs through the same path.
    packed_trial = _trial(folder, job, "packed", "padding_free", ceiling=True)
    packed = packed_trial["parity_losses"]
    assert packed_trial["ceiling"]["fits"] is True
    assert len(padded["step1"]) == 4 and parity.compare(padded, packed, FP32)["ok"], (padded, packed)
    # Rows that see each other (positions only, a cache-built mask): the parity check must refuse them.
    leaky = _trial(folder, job, "leaky", "padding_free", leak_packed_rows=True)["parity_losses"]
    verdict = parity.compare(padded, leaky, FP32)
    assert not verdict["ok"], verdict


@pytest.mark.parametrize("preset", ["tiny-qwen2-vl", "tiny-qwen2.5-vl"])
def test_packed_mrope_positions_are_the_models_own_per_row(preset):
    config = _config_from_dict(dict(PRESETS[preset]))
    vision = Vision(config.model_type, image_processor_for(config), byte_tokenizer(family_tokens(config.model_type)),
                    config)
    model = build_model(Job(run="t", model=preset, dataset="synthetic", max_len=64, effective_batch=1),
                        Knobs(attn_implementation="sdpa"), "cpu",
                        config)
    sizes = [(224, 224), (336, 448), (480, 640)]
    rows = [[1] + vision.block(vision.count(h, w)) + list(range(40, 43 + 5 * i)) for i, (h, w) in enumerate(sizes)]
    pixels = vision.tensors([Image.new("RGB", (w, h), (9, 99, 199)) for h, w in sizes])
    batch = collate(rows, "padding_free", 999, 0, "flash_attention_2", ignore=vision.block_ids)
    pack_vision(batch, vision, rows, pixels)
    # Row bounds for flash attention come from the text positions, never as keyword arguments the
    # model would hand on to its vision tower.
    assert "flash" not in batch and batch["position_ids"].shape == (4, 1, sum(map(len, rows)))
    padded = collate(rows, "longest", 999, 0, "sdpa")
    # What the model computes itself for the padded rows (the path a padded forward takes).
    ids = padded["input_ids"]
    own = model.model.compute_3d_position_ids(input_ids=ids, image_grid_thw=pixels["image_grid_thw"],
                                              video_grid_thw=None,
                                              inputs_embeds=torch.zeros(*ids.shape, 1),
                                              attention_mask=padded["attention_mask"], cache=None,
                                              **vision.extra_inputs(ids))
    expected = torch.cat([own[:, i, :len(r)] for i, r in enumerate(rows)], dim=1)
    assert torch.equal(batch["position_ids"][1:, 0], expected)
    assert batch["position_ids"][0, 0].tolist() == [p for r in rows for p in range(len(r))]
    # The image blocks' 3D positions are not the 1D ones: packing with 1D positions alone would be wrong.
    assert not torch.equal(expected, batch["position_ids"][0, 0].expand(3, -1))


def test_padding_free_is_a_limit_only_where_packing_is_not_checked():
    def packing(model_type: str) -> list[dict]:
        return [limit for limit in vlm_limits(False, model_type, True, False) if limit["knob"] == "padding"]

    assert packing("llava") == packing("idefics3") == packing("smolvlm") == packing("qwen2_vl") == \
        packing("qwen2_5_vl") == []
    limit, = packing("some_new_vlm")
    assert limit["value"] == "padding_free" and not limit["silent"] and "some_new_vlm" in limit["reason"]
