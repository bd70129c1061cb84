"""Idefics3 / SmolVLM in the built-in runner: each image's block exactly as the family's own processor
writes it, micro-batches whose rows have different tile counts, and rows trained through the runner."""

from __future__ import annotations

import json
import math

import pytest
import torch
from PIL import Image

from autotune.config.job import Job
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import Knobs
from autotune.config.presets import PRESETS, preset_for_architecture
from autotune.engine.batching import IGNORE, collate
from autotune.workloads.hf.models import _config_from_dict, build_model
from autotune.workloads.vlm.vision import Vision, byte_tokenizer, family_tokens, image_processor_for
from tests.conftest import make_spec, run_runner

CONFIG = _config_from_dict(dict(PRESETS["tiny-idefics3"]))


def _vision(image_processor=None) -> Vision:
    return Vision("idefics3", image_processor or image_processor_for(CONFIG), byte_tokenizer(family_tokens("idefics3")),
                  CONFIG)


def _image(height: int, width: int, shade: int = 90) -> Image.Image:
    return Image.new("RGB", (width, height), (10, 200, shade))


@pytest.fixture(scope="module")
def model():
    model = build_model(Job(run="t", model="tiny-idefics3", dataset="synthetic", max_len=64, effective_batch=1),
                        Knobs(attn_implementation="sdpa"), "cpu",
                        CONFIG)
    return model.eval()


def test_hub_names_of_the_family_smoke_as_the_tiny_preset():
    assert preset_for_architecture("idefics3") == "tiny-idefics3"
    assert preset_for_architecture("huggingfacetb/smolvlm-256m-instruct") == "tiny-idefics3"
    # SmolVLM2 checkpoints are model type smolvlm, with classes of their own (tests/workloads/vlm/test_vlm_smolvlm.py).
    assert preset_for_architecture("huggingfacetb/smolvlm2-256m-video-instruct") == "tiny-smolvlm"


# Square images fill a 4 x 4 grid, 4:3 ones 3 x 4, long thin ones 1 x 4 or 4 x 1; tiny ones are scaled up.
@pytest.mark.parametrize("splitting,sizes", [(True, [(224, 224), (480, 640), (768, 1024), (1000, 100), (57, 300),
                                                      (20, 20)]),
                                             (False, [(480, 640), (20, 20)])])
def test_image_blocks_are_what_the_idefics3_processor_writes_and_the_model_takes(model, splitting, sizes):
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor

    side = CONFIG.vision_config.image_size
    def make():
        return Idefics3ImageProcessorPil(max_image_size={"longest_edge": side}, size={"longest_edge": 4 * side},
                                         do_image_splitting=splitting)
    vision = _vision(make())
    tokenizer = byte_tokenizer(family_tokens("idefics3"))
    # The reference: transformers' own processor from the same parts, at the model's image_seq_len.
    reference = Idefics3Processor(make(), tokenizer, image_seq_len=model.model.image_seq_len)
    ab, cd = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("ab", "cd"))
    grids = set()
    for height, width in sizes:
        image = _image(height, width)
        out = reference(images=[[image]], text=["ab<image>cd"], return_tensors="pt")
        block = vision.image_block(height, width)
        # What the processor writes is the reference. (Its private token count, _get_num_multimodal_tokens,
        # stopped agreeing with what it writes in transformers 5.25: 68 against 108 written for 224 x 224.)
        assert out["input_ids"][0].tolist() == ab + block + cd
        tensors = vision.tensors([image])
        assert torch.equal(tensors["pixel_values"], out["pixel_values"])
        tiles = out["pixel_values"].shape[1]
        units = vision.units(height, width)
        assert len(units) == tiles and units[0] == ((side // 14) ** 2, model.model.image_seq_len)
        assert block.count(vision.ids["image"]) == tiles * model.model.image_seq_len
        grids.add(tiles)
        ids = torch.tensor([[1] + block + [50, 60]])
        with torch.no_grad():
            model(input_ids=ids, **tensors)
            with pytest.raises(Exception, match="do not match"):
                model(input_ids=torch.tensor([[1] + block[:-2] + block[-1:] + [50]]), **tensors)
    assert grids == ({17, 13, 5} if splitting else {1})


def test_a_micro_batch_of_rows_with_different_tile_counts_matches_each_row_alone(model):
    vision = _vision()
    # Row 0: two images (13 + 5 tiles); row 1: one image (17 tiles). Shades differ so a swap would show.
    per_row = [[_image(480, 640, 30), _image(1000, 100, 160)], [_image(224, 224, 250)]]
    rows = [[1] + [t for image in images for t in vision.image_block(image.height, image.width)] + [50, 51, 52][:3 - i]
            for i, images in enumerate(per_row)]
    tensors = vision.tensors([image for images in per_row for image in images], per_row=[2, 1])
    assert tuple(tensors["pixel_values"].shape) == (2, 18, 3, 56, 56)
    assert tensors["pixel_attention_mask"].shape == (2, 18, 56, 56)
    batch = collate(rows, "longest", 0, 0, "sdpa", ignore=vision.block_ids)
    with torch.no_grad():
        together = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **tensors).logits
        for i, (row, images) in enumerate(zip(rows, per_row)):
            alone = model(input_ids=torch.tensor([row]), **vision.tensors(images, per_row=[len(images)])).logits
            assert torch.allclose(together[i, :len(row)], alone[0], atol=1e-4)
    targets = batch["labels"][batch["labels"] != IGNORE].tolist()
    assert targets and not set(targets) & vision.block_ids


JOB = {"model": "tiny-idefics3", "dataset": "synthetic", "max_len": 112, "effective_batch": 4, "smoke": True}


def test_idefics3_rows_train_through_the_runner_in_micro_batches(tmp_path):
    job = job_from_dict("i", JOB)
    frame = run_runner(tmp_path, make_spec(tmp_path, "frame", job=job, rows_needed=12), "frame")
    assert frame["state"] == "complete", frame
    assert frame["frame"]["model"]["model_type"] == "idefics3"
    stored = json.loads((tmp_path / "rows.json").read_text())
    assert all(len(row) <= 112 for row in stored["rows"])
    # Rows of several tile grids, so micro-batches of two mix tile counts.
    assert len({row.count(CONFIG.image_token_id) for row in stored["rows"]}) > 1
    knobs = Knobs(per_device_train_batch_size=2, padding="longest", attn_implementation="sdpa")
    result = run_runner(tmp_path, make_spec(tmp_path, job=job, knobs=knobs, rows_needed=12, measure_steps=1,
                                            warmup_max=1, peaks={"matmul_flops": {"fp32": 1e11}}, ceiling=True),
                        "trial")
    assert result["state"] == "complete", result
    losses = result["measurement"]["parity_losses"]
    assert len(losses["step1"]) == 4 and all(math.isfinite(x) and x > 0 for x in losses["step1"]), losses
    assert result["measurement"]["model_flops"] > 0 and result["measurement"]["mfu"] > 0
    assert result["measurement"]["ceiling"]["fits"] is True  # the worst case: the most tiles, at max_len
    # A resolution cap (where the user allows one): at most 2 x 2 tiles, so fewer tokens in each step.
    cap = Knobs(**{**knobs.to_dict(), "max_image_pixels": 112 * 112})
    capped = run_runner(tmp_path, make_spec(tmp_path, job=job, knobs=cap, rows_needed=12, measure_steps=1, warmup_max=1,
                                            peaks={"matmul_flops": {"fp32": 1e11}}), "capped")
    assert capped["state"] == "complete", capped
    assert sum(capped["measurement"]["real_tokens_per_step"]) < sum(result["measurement"]["real_tokens_per_step"])
    from autotune.workloads.vlm.frame import vlm_limits

    from autotune.config.knobs import IMAGE_PIXEL_CAP

    # The cap the ranking tries is 448 px on the longest edge: above this preset's own 224, so the frame
    # drops that value (it would measure the same config); a lower cap is allowed.
    vision = _vision()
    assert vision.caps(112 * 112) and not vision.caps(IMAGE_PIXEL_CAP)
    limits = vlm_limits(True, "idefics3", vision.resizable, tower_trains=True,
                        caps_nothing=not vision.caps(IMAGE_PIXEL_CAP))
    assert [limit.get("value") for limit in limits if limit["knob"] == "max_image_pixels"] == [IMAGE_PIXEL_CAP]


@pytest.mark.parametrize("max_pixels,edge", [(112 * 112, 112), (130 * 130, 112), (40 * 40, 56), (10**7, 224)])
def test_a_resolution_cap_gives_what_the_processor_writes_at_that_longest_edge(model, max_pixels, edge):
    from transformers import Idefics3Processor

    vision = _vision()
    # The reference: transformers' own processor told the longest edge (SmolVLM's documented knob).
    reference = Idefics3Processor(image_processor_for(CONFIG), byte_tokenizer(family_tokens("idefics3")),
                                  image_seq_len=model.model.image_seq_len)
    sizes = [(480, 640), (1000, 100)]
    images = [_image(h, w, 40 * i) for i, (h, w) in enumerate(sizes)]
    out = reference(images=[images], text=["ab<image>x<image>cd"], return_tensors="pt",
                    images_kwargs={"size": {"longest_edge": edge}})
    uncapped = vision.tokenizer("ab", add_special_tokens=False)["input_ids"] + vision.image_block(*sizes[0]) + \
        vision.tokenizer("x", add_special_tokens=False)["input_ids"] + vision.image_block(*sizes[1]) + \
        vision.tokenizer("cd", add_special_tokens=False)["input_ids"]
    capped = vision.resize_row(uncapped, sizes, max_pixels)
    assert capped == out["input_ids"][0].tolist()
    tensors = vision.tensors(images, max_pixels, per_row=[2])
    assert torch.equal(tensors["pixel_values"], out["pixel_values"])
    tiles = sum(len(vision.units(h, w, max_pixels)) for h, w in sizes)
    assert tiles == int(out["pixel_attention_mask"].flatten(2).any(-1).sum())
    assert capped.count(vision.ids["image"]) == tiles * model.model.image_seq_len
    with torch.no_grad():
        model(input_ids=torch.tensor([capped]), **tensors)  # the model takes the capped row as it is
    if edge < 224:
        assert len(capped) < len(uncapped)
    else:
        assert capped == uncapped
