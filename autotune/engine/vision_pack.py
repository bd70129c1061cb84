"""Packed rows (`padding=padding_free`) for image-text models: which families take them, and how.

Packing a VLM's rows trains what padding trains when three things hold per row: the image features
land on that row's image tokens (every family here scatters the micro-batch's features into the image
tokens in order, so images passed in row order do), attention stays inside the row (the collate's
block-diagonal mask, or flash-attention varlen from the position ids), and each row's positions are
the ones it has alone. LLaVA's and Idefics3's positions are plain 1D ones: the collate's restarting
position ids (Idefics3's tiles, nested by row, flatten in row order).
Qwen2-VL/Qwen2.5-VL use M-RoPE: 3D positions laid out from each row's tokens and image grids. Those
are the model's own `get_rope_index` over the rows (padded, as in a padded forward), cut to each row
and concatenated, with the 1D text positions in front (4 x T): transformers' Qwen2-VL reads that
first row as the text positions for its packed-row mask and flash varlen.

A family missing here keeps `padding_free` as a frame limit until its layout is checked the same way.
"""

from __future__ import annotations

from types import MethodType, SimpleNamespace
from typing import Any

import torch

from ..config.types import JsonObject
from .batching import Batch

# How a packable family's positions are made: "1d" (the collate's) or "mrope" (get_rope_index per row).
PACKED_POSITIONS: dict[str, str] = {"llava": "1d", "idefics3": "1d", "smolvlm": "1d", "qwen2_vl": "mrope",
                                     "qwen2_5_vl": "mrope"}


def packable(model_type: str) -> bool:
    return model_type in PACKED_POSITIONS


def packing_limit(model_type: str) -> list[JsonObject]:
    """The frame's limit on padding_free for a family the runner cannot pack (none for one it can)."""
    if packable(model_type):
        return []
    return [{"knob": "padding", "value": "padding_free", "silent": False,
             "reason": f"packed rows with images are not supported for {model_type} in the built-in runner: how its "
                       "image features and positions lay out across packed rows is not checked yet (packable: "
                       f"{', '.join(sorted(PACKED_POSITIONS))})"}]


def _rope_index(config: Any) -> Any:
    """The model class's own `get_rope_index`, bound to a stand-in holding only the config: it reads
    nothing else, and collation (in loader workers) has no model."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    cls = MODEL_MAPPING[type(config)]
    holder = SimpleNamespace(config=config)
    holder.get_vision_position_ids = MethodType(cls.get_vision_position_ids, holder)
    return MethodType(cls.get_rope_index, holder)


def mrope_positions(config: Any, rows: list[list[int]], image_token_id: int,
                    image_grid_thw: torch.Tensor) -> torch.Tensor:
    """(4, 1, T) position ids of the packed rows: per-row 1D text positions, then the per-row M-RoPE."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    types = ((ids == image_token_id) & mask.bool()).to(torch.int32)
    grid = image_grid_thw if image_grid_thw.numel() else None
    three, _ = _rope_index(config)(ids, types, image_grid_thw=grid, attention_mask=mask)
    packed = torch.cat([three[:, i, :len(r)] for i, r in enumerate(rows)], dim=1)
    text = torch.cat([torch.arange(len(r)) for r in rows])
    return torch.cat([text[None], packed.to(text.dtype)])[:, None, :]


def pack_vision(batch: Batch, vision: Any, rows: list[list[int]], pixels: dict[str, torch.Tensor]) -> None:
    """Make a packed (padding_free) micro-batch right for `vision`'s model, in place."""
    # The model passes its extra keyword arguments to the vision tower too: text row bounds there would
    # cut the image attention wrongly (CLIP) or clash with the tower's own (Qwen2-VL). Flash attention
    # derives the bounds from the position ids instead (text positions restart per row).
    batch.pop("flash", None)
    if PACKED_POSITIONS.get(vision.model_type) == "mrope":
        grid = pixels.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long))
        batch["position_ids"] = mrope_positions(vision.config, rows, vision.ids["image"], grid)
