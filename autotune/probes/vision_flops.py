"""FLOPs of a VLM's vision side, per image, in the convention of probes/flops.py.

The vision tower runs once per image over its patches (Qwen2-VL: the image processor's grid; LLaVA's
CLIP: (side/patch)^2 patches plus a class token), or once per tile where the family splits images
(Idefics3: (side/patch)^2 patches per tile, the tiles plus a global view); the patch embedding is a
matmul per patch (a conv whose stride is its kernel). What maps features to the language model
(Qwen2-VL's merger, LLaVA's projector, Idefics3's connector after its pixel shuffle) runs once per image
token. Attention in the tower: 4·L·H·Q·p² forward per pass of p patches (all patches of an image, or
of a tile, attend to each other, and to nothing else); Qwen2.5-VL's windowed blocks 4·H·Q·Σw² over
the image's windows of w patches.

Backward: the tower's backward runs only when something in it (or its projector) trains; a frozen
tower under LoRA, or one run without autograd, costs its forward alone (2 per weight per patch), as
nothing upstream of it needs a gradient. When it trains: 6 per trainable weight, 4 per frozen one,
3x the attention forward, as for the text model; the patch embedding 4 (its input, pixels, needs no
gradient). Norms, activations and rotary embeddings are left out, as for the text model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch

from .flops import _idle_linears

# Children of a tower that run per image token, not per patch.
PER_TOKEN_CHILDREN = ("merger",)
PROJECTORS = ("multi_modal_projector", "connector")


def vision_module(model: torch.nn.Module) -> torch.nn.Module | None:
    """The vision tower of a model, peft-wrapped or not (LLaVA's projector sits beside it, not in it)."""
    for module in model.modules():
        for name in ("visual", "vision_tower", "vision_model"):
            found = getattr(module, name, None)
            if isinstance(found, torch.nn.Module):
                return found
    return None


def vision_parts(model: torch.nn.Module) -> tuple[torch.nn.Module | None, list[torch.nn.Module]]:
    """The vision tower and the per-image-token modules (merger inside it, projector beside it)."""
    tower = vision_module(model)
    if tower is None:
        return None, []
    per_token = [getattr(tower, name) for name in PER_TOKEN_CHILDREN
                 if isinstance(getattr(tower, name, None), torch.nn.Module)]
    for module in model.modules():
        for name in PROJECTORS:
            found = getattr(module, name, None)
            if isinstance(found, torch.nn.Module) and found not in per_token:
                per_token.append(found)
    return tower, per_token


def _weights(roots: Iterable[torch.nn.Module], skip: set[int], kinds: tuple[type, ...]) -> dict[str, int]:
    counts = {"frozen": 0, "trainable": 0}
    for root in roots:
        for module in root.modules():
            if id(module) in skip or not isinstance(module, kinds):
                continue
            counts["trainable" if module.weight.requires_grad else "frozen"] += module.weight.numel()
    return counts


@dataclass(frozen=True)
class VisionCost:
    """The vision side's weights by where they run (each {"frozen", "trainable"} counts), the tower's
    attention shape (layers, heads, head_dim) and windowed blocks, whether the tower trains, and the
    modules it is made of (which the text model's FLOPs skip)."""

    patch: dict[str, int]
    token: dict[str, int]
    embed: dict[str, int]
    attention: tuple[int, int, int]
    windowed: int
    trains: bool
    modules: list[torch.nn.Module]


def vision_cost(model: torch.nn.Module, config: Any) -> VisionCost | None:
    """Per-patch and per-image-token weights, the tower's attention shape, and whether it trains."""
    tower, per_token = vision_parts(model)
    if tower is None:
        return None
    idle = _idle_linears(model)
    token_ids = {id(sub) for root in per_token for sub in root.modules()}
    vision = config.vision_config
    width = getattr(vision, "embed_dim", None) or vision.hidden_size
    heads = getattr(vision, "num_heads", None) or vision.num_attention_heads
    layers = getattr(vision, "depth", None) or vision.num_hidden_layers
    patch = _weights([tower], idle | token_ids, (torch.nn.Linear,))
    token = _weights(per_token, idle, (torch.nn.Linear,))
    # The patch embedding reads pixels, which need no gradient: forward and weight gradient only.
    embed = _weights([tower], idle | token_ids, (torch.nn.Conv2d, torch.nn.Conv3d))
    # Qwen2.5-VL: blocks not in fullatt_block_indexes attend within windows of the image.
    full = getattr(vision, "fullatt_block_indexes", None)
    windowed = (sum(i not in full for i in range(int(layers)))
                if getattr(vision, "window_size", None) is not None and full is not None else 0)
    # The tower's backward runs only if the tower itself trains: a trainable projector after a frozen
    # tower needs no gradient from it.
    return VisionCost(patch=patch, token=token, embed=embed, attention=(int(layers), int(heads), int(width // heads)),
                      windowed=windowed, trains=patch["trainable"] > 0, modules=[tower, *per_token])


def image_flops(cost: VisionCost, images: Iterable[tuple[int, ...]],
                gradient_checkpointing: bool) -> dict[str, float]:
    """FLOPs of the vision side over the tower's passes (an image, or a tile), each given as (patches in
    the tower, image tokens it yields[, the sum of its attention windows' lengths squared, where the
    tower has windowed blocks]): {"model", "hardware"}."""
    layers, heads, head_dim = cost.attention
    windowed = cost.windowed
    patches = tokens = squares = 0
    for unit in images:
        p, t = unit[0], unit[1]
        window = unit[2] if len(unit) > 2 else p * p
        patches, tokens = patches + p, tokens + t
        squares += (layers - windowed) * p * p + windowed * window
    attention_forward = 4.0 * heads * head_dim * squares
    if cost.trains:
        per = {name: 4.0 * weights["frozen"] + 6.0 * weights["trainable"]
               for name, weights in (("patch", cost.patch), ("token", cost.token))}
        embed = 2.0 * cost.embed["frozen"] + 4.0 * cost.embed["trainable"]
        model = (per["patch"] + embed) * patches + per["token"] * tokens + 3.0 * attention_forward
        recompute = (2.0 * sum(cost.patch.values()) * patches + 2.0 * sum(cost.token.values()) * tokens
                     + attention_forward) if gradient_checkpointing else 0.0
        return {"model": model, "hardware": model + recompute}
    # Frozen and nothing upstream trains: forward only; a trainable projector still gets weight gradients.
    model = (2.0 * (sum(cost.patch.values()) + sum(cost.embed.values())) * patches
             + (2.0 * cost.token["frozen"] + 4.0 * cost.token["trainable"]) * tokens + attention_forward)
    return {"model": model, "hardware": model}
