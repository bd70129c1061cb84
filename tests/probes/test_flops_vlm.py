"""VLM FLOPs (vision tower per image or tile + language model per token) against PyTorch's FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from autotune.config.job import Job
from autotune.config.knobs import Knobs
from autotune.config.presets import PRESETS
from autotune.probes import flops
from autotune.probes.vision_flops import image_flops, vision_cost
from autotune.workloads.hf.models import _config_from_dict, build_model
from autotune.workloads.vlm.vision import byte_tokenizer, family_tokens, image_processor_for, Vision


def _setup(preset: str, method: str, size: tuple[int, int]):
    config = _config_from_dict(dict(PRESETS[preset]))
    job = Job(run="t", model=preset, dataset="synthetic", max_len=64, effective_batch=1, method=method, smoke=True)
    # eager: FlopCounterMode does not count the CPU kernels of sdpa, so attention shows only as matmuls
    model = build_model(job, Knobs(attn_implementation="eager"), "cpu", config)
    vision = Vision(config.model_type, image_processor_for(config), byte_tokenizer(family_tokens(config.model_type)),
                    config)
    from PIL import Image

    image = Image.new("RGB", (size[1], size[0]), (120, 40, 200))
    height, width = size
    row = [1] + vision.image_block(height, width) + list(range(40, 120))
    batch = {"input_ids": torch.tensor([row, row]), **vision.tensors([image, image]),
             **vision.extra_inputs(torch.tensor([row, row]))}
    # The vision tower's passes for one image: the image, or each of its tiles.
    return config, model, vision, batch, vision.units(height, width)


def _counted(model, batch) -> int:
    with FlopCounterMode(display=False) as counter:
        model(**batch).logits.sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("preset,method,size", [("tiny-qwen2-vl", "sft", (336, 448)), ("tiny-qwen2-vl", "lora", (336, 448)),
                                                ("tiny-qwen2.5-vl", "sft", (336, 448)),
                                                ("tiny-qwen2.5-vl", "lora", (480, 640)),
                                                ("tiny-llava", "sft", (224, 224)), ("tiny-llava", "lora", (224, 224)),
                                                ("tiny-idefics3", "sft", (480, 640)),
                                                ("tiny-idefics3", "lora", (224, 224)),
                                                ("tiny-smolvlm", "sft", (480, 640))])
def test_vlm_step_flops_match_flop_counter(preset, method, size):
    config, model, vision, batch, units = _setup(preset, method, size)
    cost = vision_cost(model, config)
    lengths = [batch["input_ids"].shape[1]] * 2
    text = flops.step_flops(flops.matmul_params(model, skip=cost.modules), flops.attention_shape(config), lengths,
                            False)["model"]
    ours = text + image_flops(cost, units * 2, False)["model"]
    counted = _counted(model, batch)
    assert abs(ours / counted - 1) < 0.15, (ours, counted)


@pytest.mark.parametrize("preset", ["tiny-qwen2-vl", "tiny-qwen2.5-vl"])
def test_the_vision_towers_own_flops_match_per_image(preset):
    """The vision side alone (full fine-tuning): per-patch blocks, patch embedding, merger, attention (for
    Qwen2.5-VL, within windows in its windowed blocks)."""
    config, model, vision, batch, units = _setup(preset, "sft", (448, 336))
    tower = model.model.visual
    with FlopCounterMode(display=False) as counter:
        out = tower(batch["pixel_values"], grid_thw=batch["image_grid_thw"])
        (out.pooler_output if hasattr(out, "pooler_output") else out[0]).sum().backward()
    ours = image_flops(vision_cost(model, config), units * 2, False)["model"]
    print(f"\n{preset} tower: ours / FlopCounterMode = {ours / counter.get_total_flops():.3f}")
    assert abs(ours / counter.get_total_flops() - 1) < 0.15, (ours, counter.get_total_flops())


@pytest.mark.parametrize("method,size", [("sft", (480, 640)), ("sft", (1000, 100)), ("lora", (224, 224))])
def test_the_idefics3_tower_and_connector_flops_match_per_tile(method, size):
    """Idefics3 (full fine-tuning and frozen under LoRA): the SigLIP tower per tile, attention within each
    tile, then the connector per image token; two images of 13 or 5 or 17 tiles."""
    config, model, vision, batch, units = _setup("tiny-idefics3", method, size)
    assert len(units) == batch["pixel_values"].shape[1] > 1
    with FlopCounterMode(display=False) as counter:
        features = model.model.get_image_features(batch["pixel_values"], batch["pixel_attention_mask"]).pooler_output
        total = torch.cat(features).sum()
        if total.requires_grad:
            total.backward()
    ours = image_flops(vision_cost(model, config), units * 2, False)["model"]
    assert abs(ours / counter.get_total_flops() - 1) < 0.15, (ours, counter.get_total_flops())


def test_a_frozen_tower_costs_its_forward_only_and_text_skips_it():
    config, model, vision, batch, units = _setup("tiny-qwen2-vl", "lora", (224, 224))
    cost = vision_cost(model, config)
    assert not cost.trains
    (patches, tokens), = image = units
    layers, heads, head_dim = cost.attention
    weights = sum(cost.patch.values()) + sum(cost.embed.values())
    forward = 2 * weights * patches + 2 * sum(cost.token.values()) * tokens + 4 * layers * heads * head_dim * patches ** 2
    assert image_flops(cost, image, False)["model"] == forward
    assert image_flops(cost, image, True)["hardware"] == forward  # nothing to recompute without a backward
    # The tower's weights are not counted again per text token.
    everything, text_only = flops.matmul_params(model), flops.matmul_params(model, skip=cost.modules)
    tower_weights = sum(cost.patch.values()) + sum(cost.token.values())
    assert sum(everything.values()) - sum(text_only.values()) == tower_weights
