"""The built-in runner's image-text side: the frame's rows, facts and limits, a trial's images, FLOPs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...config.job import Job
from ...config.knobs import CATALOG, IMAGE_PIXEL_CAP, Knobs
from ...config.messages import DataFacts, TrialSpec
from ...config.types import JsonObject
from ...engine.data import StoredRows, VisionMeta


def text_limits() -> list[JsonObject]:
    """A text-only model has no vision knobs: dropped without a note, so text reports stay as they were."""
    return [{"knob": name, "reason": "a text-only model has no vision tower", "silent": True}
            for name, knob in CATALOG.items() if knob.vision]


def vlm_limits(allow_image_resize: bool, model_type: str, resizable: bool, tower_trains: bool,
               caps_nothing: bool = False) -> list[JsonObject]:
    """`allow_image_resize`: the job's; `caps_nothing`: the cap the ranking tries leaves this processor's
    own limit as it is."""
    from ...engine.vision_pack import packing_limit

    limits = packing_limit(model_type)
    if not allow_image_resize:
        limits += [{"knob": name, "silent": False,
                    "reason": "a resolution limit changes what is trained; allow it with allow_image_resize=true"}
                   for name, knob in CATALOG.items() if knob.changes_training]
    elif not resizable:
        limits.append({"knob": "max_image_pixels", "silent": False,
                       "reason": f"the {model_type} image processor has one fixed input size"})
    elif caps_nothing:
        limits.append({"knob": "max_image_pixels", "value": IMAGE_PIXEL_CAP, "silent": False,
                       "reason": f"the {model_type} image processor's own limit is already within "
                                 f"{IMAGE_PIXEL_CAP} pixels: the cap would measure the same config"})
    if tower_trains:
        limits.append({"knob": "freeze_vision_tower", "value": True, "silent": False,
                       "reason": "this method trains the vision tower: freezing it would train something else"})
    return limits


def frame_vlm(spec: TrialSpec, job: Job, config: Any, model: Any, needed: int,
              sample_rows: int) -> tuple[DataFacts, list[JsonObject]]:
    """Build and store the run's image-text rows; the data facts and the knob limits of this model."""
    from ...engine.data import length_facts, write_rows
    from .images import build_rows, load_image_examples, write_images
    from .vision import load_vision, vision_module

    vision = load_vision(job, config)
    examples = load_image_examples(job.dataset, job.seed, max(needed, sample_rows))
    built, skipped = build_rows(examples, vision, job.max_len)
    if not built:
        raise ValueError(f"no example fits max_len={job.max_len}: each one's image tokens alone exceed it; "
                         "raise max_len")
    # Small datasets repeat; the images file holds each used example's images once.
    used = built[:min(needed, len(built))]
    offsets: list[list[int]] = []
    images: list[bytes] = []
    for row in used:
        offsets.append(list(range(len(images), len(images) + len(row["images"]))))
        images += row["images"]
    rows_path = spec.rows_file
    ends = write_images(rows_path, images)
    order = [i % len(used) for i in range(needed)]
    tokenizer = vision.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    meta: VisionMeta = {"images": [offsets[i] for i in order], "sizes": [used[i]["sizes"] for i in order], "ends": ends,
            "block_ids": sorted(vision.block_ids)}
    write_rows(rows_path, [used[i]["ids"] for i in order], pad_id,
               config.get_text_config(decoder=True).vocab_size, meta)
    sample = [r["ids"] for r in built]
    image_tokens = [sum(1 for t in r if t == vision.ids["image"]) for r in sample]
    tower = vision_module(model)
    data: DataFacts = {**length_facts(sample, job.max_len), "rows_available": len(sample), "dataset": job.dataset,
            "images_per_row": round(sum(len(r["images"]) for r in built) / len(built), 3),
            "image_token_share": round(sum(image_tokens) / sum(len(r) for r in sample), 4),
            "p50_image_tokens": sorted(image_tokens)[len(image_tokens) // 2],
            "rows_skipped_share": round(skipped / (skipped + len(built)), 4)}
    trains = any(p.requires_grad for p in tower.parameters())
    return data, vlm_limits(job.allow_image_resize, config.model_type, vision.resizable, trains,
                            not vision.caps(IMAGE_PIXEL_CAP))


def vision_rows(job: Job, knobs: Knobs, config: Any, stored: StoredRows, rows_path: Path) -> Any:
    """A trial's image side (None for a text run): the processor and the stored images at the trial's
    resolution limit."""
    if "vision" not in stored:
        return None
    from .images import VisionRows
    from .vision import load_vision

    return VisionRows(load_vision(job, config), stored, rows_path, knobs.max_image_pixels)


def vlm_flops(model: Any, config: Any, vision: Any, rows: list[list[int]], measured: range,
              gradient_checkpointing: bool) -> dict[str, float]:
    """The language model's FLOPs over the measured rows (image tokens included, at the trial's
    resolution) plus the vision side's per image."""
    from ...probes import flops
    from ...probes.vision_flops import image_flops, vision_cost

    cost = vision_cost(model, config)
    lengths, images = [], []
    for r in measured:
        row = vision.vision.resize_row(rows[r], vision.sizes[r], vision.max_pixels)
        lengths.append(len(row))
        images += [unit for h, w in vision.sizes[r] for unit in vision.vision.units(h, w, vision.max_pixels)]
    text = flops.step_flops(flops.matmul_params(model, skip=cost.modules), flops.attention_shape(config), lengths,
                            gradient_checkpointing)
    side = image_flops(cost, images, gradient_checkpointing)
    return {name: text[name] + side[name] for name in ("model", "hardware")}
