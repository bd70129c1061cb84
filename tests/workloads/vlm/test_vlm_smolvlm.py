"""SmolVLM2 (model type smolvlm) in the built-in runner: each image's block as its processor's own function
writes it for the tile grid its image processor returns, at full and capped resolution, and taken by the
model. (SmolVLMProcessor itself needs a video processor, hence torchvision, which is not a dependency.)"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from autotune.config.job import Job
from autotune.config.knobs import Knobs
from autotune.config.presets import PRESETS, preset_for_architecture
from autotune.workloads.hf.models import _config_from_dict, build_model
from autotune.workloads.vlm.vision import Vision, byte_tokenizer, family_tokens, image_processor_for

CONFIG = _config_from_dict(dict(PRESETS["tiny-smolvlm"]))


@pytest.fixture(scope="module")
def model():
    model = build_model(Job(run="t", model="tiny-smolvlm", dataset="synthetic", max_len=64, effective_batch=1),
                        Knobs(attn_implementation="sdpa"), "cpu",
                        CONFIG)
    return model.eval()


def test_hub_names_of_smolvlm2_smoke_as_its_preset(model):
    assert type(model).__name__ == "SmolVLMForConditionalGeneration"
    assert preset_for_architecture("huggingfacetb/smolvlm2-2.2b-instruct") == preset_for_architecture("smolvlm") == \
        "tiny-smolvlm"


@pytest.mark.parametrize("edge", [None, 112])
def test_image_blocks_are_what_smolvlm_writes_for_its_image_processors_grid(model, edge):
    from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

    vision = Vision("smolvlm", image_processor_for(CONFIG), byte_tokenizer(family_tokens("smolvlm")), CONFIG)
    reference = image_processor_for(CONFIG)
    cap = edge * edge if edge else 0
    grids = set()
    for height, width in [(224, 224), (480, 640), (1000, 100), (20, 20)]:
        image = Image.new("RGB", (width, height), (10, 200, 90))
        # The grid as SmolVLM's image processor reports it to its processor, at the capped edge if any.
        out = reference(images=[[image]], return_row_col_info=True, return_tensors="pt",
                        **({"size": {"longest_edge": edge}} if edge else {}))
        rows, cols = out["rows"][0][0], out["cols"][0][0]
        text = get_image_prompt_string(rows, cols, model.model.image_seq_len, "<fake_token_around_image>", "<image>",
                                       "<global-img>")
        block = vision.image_block(height, width, cap)
        assert block == vision.tokenizer(text, add_special_tokens=False)["input_ids"]
        tensors = vision.tensors([image], cap)
        assert torch.equal(tensors["pixel_values"], out["pixel_values"])
        assert len(vision.units(height, width, cap)) == tensors["pixel_values"].shape[1]
        grids.add(tensors["pixel_values"].shape[1])
        ids = torch.tensor([[1] + block + [50, 60]])
        with torch.no_grad():
            model(input_ids=ids, **tensors)
            with pytest.raises(Exception, match="do not match"):
                model(input_ids=torch.tensor([[1] + block[:-2] + block[-1:] + [50]]), **tensors)
    assert grids == ({5, 3} if edge else {17, 13, 5}), grids  # 20 x 20 is scaled up like the rest
