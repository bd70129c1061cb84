"""Image-text models in the built-in runner: loading, synthetic image data, image tokens against max_len,
vision inputs through the engine, and parity on VLM rows through the real runner."""

from __future__ import annotations

import io
import json

import pytest
import torch
from PIL import Image

from autotune.config.job import Job
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import Knobs
from autotune.config.presets import PRESETS
from autotune.workloads.vlm.images import build_rows, load_image_examples, synthetic_examples, SYNTHETIC_SIZES
from autotune.workloads.hf.models import _config_from_dict, build_model, model_facts
from autotune.workloads.vlm.vision import Vision, byte_tokenizer, family_tokens, image_processor_for, is_vlm, vision_module
from tests.conftest import make_spec, run_runner


def _vision(preset: str) -> tuple:
    config = _config_from_dict(dict(PRESETS[preset]))
    return config, Vision(config.model_type, image_processor_for(config),
                          byte_tokenizer(family_tokens(config.model_type)), config)


def _image(height: int, width: int) -> Image.Image:
    return Image.new("RGB", (width, height), (10, 200, 90))


@pytest.mark.parametrize("values,cls", [(PRESETS["tiny-qwen2-vl"], "Qwen2VLForConditionalGeneration"),
                                        (PRESETS["tiny-qwen2.5-vl"], "Qwen2_5_VLForConditionalGeneration"),
                                        (PRESETS["tiny-llava"], "LlavaForConditionalGeneration"),
                                        (PRESETS["tiny-idefics3"], "Idefics3ForConditionalGeneration"),
                                        (PRESETS["tiny-smolvlm"], "SmolVLMForConditionalGeneration")])
@pytest.mark.parametrize("method", ["sft", "lora"])
def test_each_family_loads_from_a_config_through_the_image_text_class(values, cls, method):
    config = _config_from_dict(dict(values))
    assert is_vlm(config)
    model = build_model(Job(run="t", model="x", dataset="synthetic", max_len=64, effective_batch=1, method=method,
                        weights="random"), Knobs(), "cpu", config)
    assert cls in {type(m).__name__ for m in model.modules()}
    facts = model_facts(model, config)
    tower = vision_module(model)
    assert facts["layers"] == 2 and facts["vision"]["params"] == sum(p.numel() for p in tower.parameters()) > 0
    if method == "lora":
        # The usual VLM recipe: adapters on the language model; the tower trains nothing.
        assert facts["vision"]["trainable_params"] == 0 and 0 < facts["trainable_params"] < facts["params"]
    else:
        assert facts["vision"]["trainable_params"] == facts["vision"]["params"]


def test_synthetic_images_are_seeded_realistic_and_captions_spread():
    first, again, other = synthetic_examples(40, 3), synthetic_examples(40, 3), synthetic_examples(40, 4)
    assert [e["images"] for e in first] == [e["images"] for e in again] and first != other
    sizes = set()
    for example in first:
        with Image.open(io.BytesIO(example["images"][0])) as image:
            assert image.format == "JPEG"
            sizes.add(image.size)
    assert sizes <= set(SYNTHETIC_SIZES) and len(sizes) >= 4
    words = sorted(len(e["text"].split()) for e in synthetic_examples(400, 0))
    assert words[0] >= 3 and words[len(words) * 9 // 10] >= 2 * words[len(words) // 2]


def test_a_local_folder_of_images_and_a_jsonl(tmp_path):
    for name in ("a.png", "b.png"):
        _image(64, 96).save(tmp_path / name)
    lines = [{"image": "a.png", "text": "first"},
             {"images": ["b.png", "a.png"], "messages": [{"role": "user", "content": [{"type": "image"}]},
                                                       {"role": "assistant", "content": [{"type": "text", "text": "second"}]}]}]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    examples = load_image_examples(str(tmp_path), 0, 10)
    assert sorted(e["text"] for e in examples) == ["first", "second"]
    assert sorted(len(e["images"]) for e in examples) == [1, 2]


@pytest.mark.parametrize("preset,sizes", [("tiny-qwen2-vl", [(224, 224), (480, 640), (336, 448), (1024, 768)]),
                                          ("tiny-qwen2.5-vl", [(224, 224), (480, 640), (1024, 768)]),
                                          ("tiny-llava", [(224, 224), (480, 640)])])
def test_image_tokens_are_what_the_processor_and_the_model_expand_to(preset, sizes):
    config, vision = _vision(preset)
    model = build_model(Job(run="t", model=preset, dataset="synthetic", max_len=64, effective_batch=1),
                        Knobs(attn_implementation="sdpa"), "cpu", config)
    for height, width in sizes:
        tensors = vision.tensors([_image(height, width)])
        if "image_grid_thw" in tensors:  # the processor's own arithmetic: grid / merge²
            assert vision.count(height, width) == int(tensors["image_grid_thw"].prod()) // 4
            assert vision.patches(height, width) == tensors["pixel_values"].shape[0]
        ids = torch.tensor([[1] + vision.block(vision.count(height, width)) + [50, 60, 70]])
        # The model checks features against image tokens: a wrong count raises here.
        model(input_ids=ids, **tensors, **vision.extra_inputs(ids))
        with pytest.raises(Exception, match="do not match"):
            bad = torch.tensor([[1] + vision.block(vision.count(height, width) - 1) + [50]])
            model(input_ids=bad, **tensors, **vision.extra_inputs(bad))


# The in-memory tokenizer's "\n": Idefics3 writes newlines between its tile rows.
NEWLINE = byte_tokenizer([]).convert_tokens_to_ids("Ċ")


@pytest.mark.parametrize("preset,max_lens", [("tiny-qwen2-vl", (160, 512)), ("tiny-idefics3", (96, 110))])
def test_rows_never_exceed_max_len_and_images_are_never_cut(preset, max_lens):
    config, vision = _vision(preset)
    examples = synthetic_examples(60, 0)
    for max_len in max_lens:
        rows, skipped = build_rows(examples, vision, max_len)
        assert rows and skipped and len(rows) + skipped == len(examples)
        for row in rows:
            assert len(row["ids"]) <= max_len
            (height, width), = row["sizes"]
            block = vision.image_block(height, width)
            image = vision.ids["image"]
            assert row["ids"][1:1 + len(block)] == block and row["ids"].count(image) == block.count(image)
            assert block.count(image) and set(block) - {image} <= vision.block_ids | {NEWLINE}
        for example in examples:  # what was skipped could not fit even with two caption tokens
            with Image.open(io.BytesIO(example["images"][0])) as image:
                fits = 1 + len(vision.image_block(image.height, image.width)) + 2 <= max_len
            assert fits == any(r["images"] == example["images"] for r in rows)


def test_a_resolution_cap_rewrites_the_image_blocks_to_match_the_processor():
    config, vision = _vision("tiny-qwen2-vl")
    cap = 256 * 28 * 28
    row = [1] + vision.block(vision.count(768, 1024)) + [40, 41]
    capped = vision.resize_row(row, [(768, 1024)], cap)
    tensors = vision.tensors([_image(768, 1024)], cap)
    image = vision.ids["image"]
    assert capped.count(image) == int(tensors["image_grid_thw"].prod()) // 4 <= 256 < row.count(image)
    assert capped[-2:] == [40, 41] and vision.resize_row(row, [(768, 1024)], 0) == row
    # A cap above the processor's own limit changes nothing: rows were sized to that limit and max_len.
    above = int(vision.image_processor.size["longest_edge"]) * 4
    assert vision.count(4000, 3000, above) == vision.count(4000, 3000)
    assert vision.resize_row(row, [(768, 1024)], above) == row


VLM_JOB = {"model": "tiny-qwen2-vl", "dataset": "synthetic", "max_len": 160, "effective_batch": 4, "smoke": True}


@pytest.fixture(scope="module")
def vlm_frame(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vlm-frame")
    job = job_from_dict("v", VLM_JOB)
    result = run_runner(folder, make_spec(folder, "frame", job=job, rows_needed=16), "frame")
    assert result["state"] == "complete", result
    return job, folder, result["frame"]


def test_frame_of_a_vlm_stores_rows_with_images_and_declares_its_limits(vlm_frame):
    job, folder, frame = vlm_frame
    stored = json.loads((folder / "rows.json").read_text())
    assert len(stored["rows"]) == len(stored["vision"]["images"]) == 16
    assert all(len(row) <= 160 for row in stored["rows"])
    assert (folder / "rows.json.images").stat().st_size == stored["vision"]["ends"][-1]
    assert frame["model"]["model_type"] == "qwen2_vl" and frame["model"]["vision"]["trainable_params"] > 0
    assert 0 < frame["data"]["image_token_share"] < 1 and frame["data"]["images_per_row"] == 1
    limits = {(limit["knob"], limit.get("value")): limit for limit in frame["limits"]}
    # Qwen2-VL packs (engine/vision_pack.py): padding_free is no limit for it.
    assert ("padding", "padding_free") not in limits and ("freeze_vision_tower", True) in limits
    assert "allow_image_resize=true" in limits[("max_image_pixels", None)]["reason"]
    assert not any(limit["silent"] for limit in frame["limits"])


def test_vlm_trials_keep_parity_across_micro_batch_and_padding_and_count_vision_flops(vlm_frame, tmp_path):
    job, folder, _ = vlm_frame
    base = run_runner(folder, make_spec(folder, job=job, rows_needed=16, measure_steps=2, warmup_max=1,
                                        peaks={"matmul_flops": {"fp32": 1e11}}), "base")
    other = run_runner(folder, make_spec(folder, job=job, knobs=Knobs(per_device_train_batch_size=2, padding="longest",
                                                                      attn_implementation="sdpa"),
                                         rows_needed=16, measure_steps=2, warmup_max=1, ceiling=True), "other")
    assert base["state"] == other["state"] == "complete", (base, other)
    from autotune.probes.parity import compare

    a, b = base["measurement"]["parity_losses"], other["measurement"]["parity_losses"]
    assert len(a["step1"]) == 4 and compare(a, b, 1e-4)["ok"], (a, b)
    assert other["measurement"]["ceiling"]["fits"] is True
    assert 0 < base["measurement"]["mfu"] and base["measurement"]["model_flops"] > 0


def test_a_vlm_trial_with_the_chunked_loss_trains_the_same_rows(vlm_frame):
    """autotune's own loop (image-text models) is where the full logits exist: the chunked loss there
    trains the rows the standard loss trains, through the VLM's own LM head."""
    job, folder, _ = vlm_frame
    runs = {chunked: run_runner(folder, make_spec(folder, job=job, knobs=Knobs(attn_implementation="sdpa",
                                                                              chunked_cross_entropy=chunked),
                                                  rows_needed=16, measure_steps=2, warmup_max=1), f"chunked-{chunked}")
            for chunked in (False, True)}
    assert all(r["state"] == "complete" for r in runs.values()), runs
    from autotune.probes.parity import compare

    check = compare(runs[False]["measurement"]["parity_losses"], runs[True]["measurement"]["parity_losses"], 1e-4)
    assert check["ok"], check


def test_text_frames_keep_vision_knobs_silent(tmp_path, framed):
    frame = framed()
    silent = {limit["knob"] for limit in frame["limits"] if limit["silent"]}
    assert silent == {"max_image_pixels", "freeze_vision_tower"}
    # The rest say why (trl.SFTTrainer's own chunked loss, a full fine-tune's weights, the numbers opt-in).
    said = {limit["knob"] for limit in frame["limits"] if not limit["silent"]}
    assert said == {"chunked_cross_entropy", "dtype", "load_in_4bit", "optim", "float8_training"}


def test_hub_names_of_qwen_vl_families_smoke_as_their_own_preset():
    from autotune.config.presets import preset_for_architecture

    assert preset_for_architecture("qwen/qwen2.5-vl-7b-instruct") == preset_for_architecture("qwen2_5_vl") == \
        "tiny-qwen2.5-vl"
    assert preset_for_architecture("qwen/qwen2-vl-2b-instruct") == preset_for_architecture("qwen2_vl") == "tiny-qwen2-vl"
    assert preset_for_architecture("qwen/qwen2.5-7b") == "tiny-qwen2"
