"""A VLM given as a local folder (a user's checkpoint, not a preset, not smoke): the runner loads its processor
with `AutoProcessor`, and the frame's image blocks are what that processor itself writes for each image.

Each family's folder holds the preset's config.json and the family's processor, saved as a checkpoint folder
has them: the preset's image processor and the in-memory byte tokenizer behind the real processor class."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import Knobs
from autotune.config.presets import PRESETS
from autotune.workloads.vlm.images import ImageStore
from autotune.workloads.hf.models import _config_from_dict
from autotune.workloads.vlm.vision import FAMILIES, byte_tokenizer, family_tokens, image_processor_for
from tests.conftest import make_spec, run_runner

# The max_len of the presets' own runner tests (LLaVA rows hold 256 image tokens each).
MAX_LEN = {"tiny-qwen2-vl": 160, "tiny-qwen2.5-vl": 160, "tiny-llava": 300, "tiny-idefics3": 112, "tiny-smolvlm": 112}
ROWS = 12
# What a user's text holds for one image (Qwen2-VL's chat template writes the start and end tokens around it).
PLACEHOLDER = {"qwen2_vl": "<|vision_start|><|image_pad|><|vision_end|>", "llava": "<image>", "idefics3": "<image>"}
PLACEHOLDER.update(qwen2_5_vl=PLACEHOLDER["qwen2_vl"], smolvlm="<image>")


def _save_folder(preset: str, folder: Path) -> None:
    from transformers import Idefics3Processor, LlavaProcessor

    config = _config_from_dict(dict(PRESETS[preset]))
    config.save_pretrained(folder)
    image_processor = image_processor_for(config)
    tokenizer = byte_tokenizer(family_tokens(config.model_type))
    if config.model_type in ("qwen2_vl", "qwen2_5_vl", "smolvlm"):
        # A Qwen2-VL checkpoint (Qwen/Qwen2-VL-2B-Instruct) has no processor_config.json: its processor is
        # preprocessor_config.json plus the tokenizer files, saved here the same way. (Qwen2VLProcessor and
        # SmolVLMProcessor cannot even be built without torchvision, which is not installed: their video
        # processors need it.)
        image_processor.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return
    vision = config.vision_config
    if config.model_type == "llava":
        # What llava-hf checkpoints write: the tower's patch size, its class token counted then dropped.
        processor = LlavaProcessor(image_processor, tokenizer, patch_size=vision.patch_size,
                                   vision_feature_select_strategy=config.vision_feature_select_strategy,
                                   num_additional_image_tokens=1)
    else:
        seq_len = (vision.image_size // vision.patch_size) ** 2 // config.scale_factor ** 2
        processor = Idefics3Processor(image_processor, tokenizer, image_seq_len=seq_len)
    processor.save_pretrained(folder)


def _reference_block(folder: Path, model_type: str, image) -> list[int]:
    """One image's tokens as the folder's own processor writes them for the family's image placeholder."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    spec = FAMILIES[model_type]
    placeholder = PLACEHOLDER[model_type]
    try:
        processor = AutoProcessor.from_pretrained(folder)
    except ImportError:
        # Qwen2-VL without torchvision: what its processor's __call__ does, from the image processor's own
        # output (each image placeholder becomes grid t*h*w / merge² image tokens), tokenized by the folder's
        # tokenizer.
        assert model_type in ("qwen2_vl", "qwen2_5_vl", "smolvlm")
        image_processor, tokenizer = AutoImageProcessor.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
        if model_type == "smolvlm":
            # SmolVLM2: its processor's own block function, for the grid its image processor reports.
            from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

            out = image_processor(images=[[image]], return_row_col_info=True)
            config = json.loads((folder / "config.json").read_text())
            seq_len = (config["vision_config"]["image_size"] // config["vision_config"]["patch_size"]) ** 2 // \
                config["scale_factor"] ** 2
            text = get_image_prompt_string(out["rows"][0][0], out["cols"][0][0], seq_len, spec.start, spec.image,
                                           "<global-img>")
            return tokenizer(text, add_special_tokens=False)["input_ids"]
        count = int(image_processor(images=[image], return_tensors="pt")["image_grid_thw"][0].prod())
        text = placeholder.replace(spec.image, spec.image * (count // image_processor.merge_size ** 2))
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    images = [[image]] if spec.tiles else [image]
    out = processor(images=images, text=[placeholder], add_special_tokens=False, return_tensors="pt")
    return out["input_ids"][0].tolist()


@pytest.fixture(scope="module", params=list(MAX_LEN))
def folder_frame(request, tmp_path_factory):
    preset = request.param
    model = tmp_path_factory.mktemp(f"{preset}-checkpoint")
    _save_folder(preset, model)
    folder = tmp_path_factory.mktemp(f"{preset}-run")
    job = job_from_dict("f", {"model": str(model), "dataset": "synthetic", "max_len": MAX_LEN[preset],
                              "effective_batch": 4, "weights": "random"})
    assert not job.smoke
    result = run_runner(folder, make_spec(folder, "frame", job=job, rows_needed=ROWS), "frame")
    assert result["state"] == "complete", result
    return preset, model, job, folder, result["frame"]


def test_the_frame_of_a_local_vlm_folder_writes_the_image_blocks_its_own_processor_writes(folder_frame):
    preset, model, job, folder, frame = folder_frame
    config = _config_from_dict(dict(PRESETS[preset]))
    assert frame["model"]["source"] == f"config of {model}"
    assert frame["model"]["model_type"] == config.model_type and frame["model"]["vision"]["params"] > 0
    stored = json.loads((folder / "rows.json").read_text())
    rows, meta = stored["rows"], stored["vision"]
    assert len(rows) == ROWS and all(len(row) <= job.max_len for row in rows)
    store = ImageStore(folder / "rows.json", meta["ends"])
    checked = {}
    for row, (index,), ((height, width),) in zip(rows, meta["images"], meta["sizes"]):
        image = store.image(index)
        assert (image.height, image.width) == (height, width)
        if (height, width) not in checked:
            checked[height, width] = _reference_block(model, config.model_type, image)
        block = checked[height, width]
        # <s>, the image's block exactly as the processor writes it, then caption text with no image token.
        assert row[0] == 1 and row[1:1 + len(block)] == block, (height, width)
        assert row.count(config.image_token_id) == block.count(config.image_token_id) > 0
    assert frame["data"]["p50_image_tokens"] > 0 and 0 < frame["data"]["image_token_share"] < 1


def test_a_trial_on_a_local_vlm_folder_trains_finite_per_row_losses(folder_frame):
    preset, model, job, folder, _ = folder_frame
    knobs = Knobs(per_device_train_batch_size=2, padding="longest", attn_implementation="sdpa")
    result = run_runner(folder, make_spec(folder, job=job, knobs=knobs, rows_needed=ROWS, measure_steps=1,
                                          warmup_max=0), "trial")
    assert result["state"] == "complete", result
    losses = result["measurement"]["parity_losses"]
    assert len(losses["step1"]) == 4 and all(math.isfinite(x) and x > 0 for x in losses["step1"]), losses
