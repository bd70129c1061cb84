"""What an image-text job's best config cannot say in trainer arguments: the notes best_config.json and
the report carry for packed image-text rows, image caps and a frozen vision tower."""

from __future__ import annotations

from ...config.knobs import VARLEN_BOUNDS, Knobs


def _packed_vlm_note(knobs: Knobs, vlm: str) -> str:
    """What the built-in runner did for packed image-text rows, which TRL does not offer."""
    mrope = (" and the model's M-RoPE positions computed per row with its `get_rope_index`, concatenated and "
             "passed as a 4 x T `position_ids` whose first row is the per-row text positions"
             if vlm in ("qwen2_vl", "qwen2_5_vl") else "")
    bounds = ("the row bounds taken from the position ids (no cu_seq_lens keyword arguments: the model hands them "
              "on to its vision tower)" if knobs.attn_implementation in VARLEN_BOUNDS else
              "a block-diagonal attention mask")
    return (f"padding_free was measured on packed image-text rows ({vlm}): each micro-batch's rows in one sequence, "
            f"their images passed in row order, position ids restarting per row{mrope}, and {bounds}. TRL's "
            "SFTTrainer refuses padding_free for vision-language models, so the `trl sft` command above stops "
            "with an error: pack the rows that way in your own collator, or keep padding=longest with SFTTrainer.")


def caveats(knobs: Knobs, vlm: str | None = None) -> list[str]:
    """Notes on what the trainer arguments cannot say; `vlm`: the model type of an image-text model."""
    notes = []
    if knobs.padding == "padding_free" and vlm:
        notes.append(_packed_vlm_note(knobs, vlm))
    if knobs.max_image_pixels and vlm in ("idefics3", "smolvlm"):
        notes.append(f"max_image_pixels={knobs.max_image_pixels} was measured with the processor's longest edge "
                     "lowered to k tiles: k the largest whole number (at least 1) with (k x tile)^2 within that many "
                     "pixels, the tile your processor's `max_image_size[\"longest_edge\"]`. TrainingArguments and "
                     "`trl sft` have no such setting: pass it to your processor (`AutoProcessor.from_pretrained(model, "
                     "size={\"longest_edge\": k * tile})`).")
    elif knobs.max_image_pixels:
        notes.append(f"max_image_pixels={knobs.max_image_pixels} was measured with each image capped at that many "
                     "pixels before the processor. TrainingArguments and `trl sft` have no such setting: pass it to "
                     "your processor (Qwen2-VL: `AutoProcessor.from_pretrained(model, max_pixels=...)`).")
    if knobs.freeze_vision_tower:
        notes.append("freeze_vision_tower was measured with the vision tower run without autograd (its parameters "
                     "frozen). TrainingArguments has no such setting: set `requires_grad_(False)` on the tower and "
                     "run it under `torch.no_grad()`, or keep LoRA off its layers.")
    return notes
