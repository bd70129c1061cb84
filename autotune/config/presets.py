"""Built-in model presets: configs only (random weights), so smoke runs and tests need no download.

Pure data: the parent process validates names against this without importing torch.
"""

from __future__ import annotations

import re

from .types import JsonObject

# Small enough for a CPU trial in seconds, large enough that batching and attention choices matter.
_TINY: JsonObject = dict(
    vocab_size=2048, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
)

# The Qwen VL presets' language model (M-RoPE sections over the tiny head size) and token ids, which
# follow workloads/vlm/vision.py's in-memory tokenizer (259 up).
_QWEN_VL_TEXT: JsonObject = {
    "text_config": {**{k: v for k, v in _TINY.items() if k != "vocab_size"}, "vocab_size": 512,
                    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]}},
    "vision_start_token_id": 259, "vision_end_token_id": 260, "image_token_id": 261, "video_token_id": 262,
}

# Each preset is a model's config.json: the keyword arguments transformers builds its config from.
PRESETS: dict[str, JsonObject] = {
    "tiny-llama": {"model_type": "llama", **_TINY},
    "tiny-qwen2": {"model_type": "qwen2", **_TINY, "tie_word_embeddings": True},
    # The shape of Qwen2.5-0.5B (its public config.json), with random weights: a real GPU workload
    # that needs no download.
    "qwen2.5-0.5b-shape": {
        "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
    },
    # A Qwen2-VL image-text model: the tiny text model above behind a two-block vision tower (patch 14,
    # 2x2 merge, as the real family).
    "tiny-qwen2-vl": {
        "model_type": "qwen2_vl", **_QWEN_VL_TEXT,
        "vision_config": {"depth": 2, "embed_dim": 64, "hidden_size": 128, "num_heads": 2, "mlp_ratio": 2,
                          "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
    },
    # A Qwen2.5-VL model: its tower's first block attends within
    # windows of 112 px (4 x 4 merged patches), its last over the whole image, as the real family
    # alternates them (fullatt_block_indexes).
    "tiny-qwen2.5-vl": {
        "model_type": "qwen2_5_vl", **_QWEN_VL_TEXT,
        "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
                          "out_hidden_size": 128, "patch_size": 14, "spatial_merge_size": 2,
                          "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [1]},
    },
    # A LLaVA model: a two-layer CLIP vision tower at 224 px (256 image tokens per image) and a projector.
    "tiny-llava": {
        "model_type": "llava",
        "text_config": {"model_type": "llama", **{k: v for k, v in _TINY.items() if k != "vocab_size"},
                        "vocab_size": 512},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 224, "patch_size": 14},
        "image_token_id": 259,
    },
    # An Idefics3 (SmolVLM) model: a two-layer SigLIP tower over 56 px tiles (patch 14, pixel shuffle 2:
    # 4 image tokens a tile), images scaled to 224 px on their longest edge and split into up to 4 x 4
    # tiles plus a global view, as the real family does at 364 or 512 px tiles. Token ids follow
    # workloads/vlm/vision.py's in-memory tokenizer: <fake_token_around_image> 259, <image> 260, the tile
    # tags after them.
    "tiny-idefics3": {
        "model_type": "idefics3", "scale_factor": 2, "image_token_id": 260,
        "text_config": {"model_type": "llama", **{k: v for k, v in _TINY.items() if k != "vocab_size"},
                        "vocab_size": 512, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
        "vision_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "image_size": 56, "patch_size": 14},
    },
}
# SmolVLM2 (model type smolvlm): the same tiles, tower and tokens under its own classes.
PRESETS["tiny-smolvlm"] = {**PRESETS["tiny-idefics3"], "model_type": "smolvlm"}

# What `smoke` shrinks any architecture to: same model_type, tiny dimensions.
SMOKE_DIMENSIONS = {k: v for k, v in _TINY.items() if k != "vocab_size"}
DEMO_PRESET = "tiny-qwen2"


def is_vision_preset(name: str) -> bool:
    """An image-text preset (its config has a vision tower): smoke keeps it as it is, it is tiny already."""
    return "vision_config" in PRESETS.get(name, {})


def preset_for_architecture(model_type: str | None) -> str:
    """The tiny preset closest to an architecture, for smoke runs whose config cannot be read."""
    if model_type and "qwen" in model_type and re.search(r"[-_]vl\b|[-_]vl[-_]", model_type):
        return "tiny-qwen2.5-vl" if re.search(r"qwen2[._]5", model_type) else "tiny-qwen2-vl"
    if model_type and "llava" in model_type:
        return "tiny-llava"
    # SmolVLM (v1) checkpoints are Idefics3; SmolVLM2's (model type smolvlm) have classes of their own.
    if model_type and ("smolvlm2" in model_type or model_type == "smolvlm"):
        return "tiny-smolvlm"
    if model_type and ("idefics3" in model_type or "smolvlm" in model_type):
        return "tiny-idefics3"
    if model_type and "qwen" in model_type:
        return "tiny-qwen2"
    return "tiny-llama"
