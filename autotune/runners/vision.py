"""Image-text models (VLMs): which configs are VLMs, their processors, and how images become tokens.

A VLM row is token ids in which each image stands as a block of image tokens (Qwen2-VL:
`<|vision_start|>`, `<|image_pad|>` x n, `<|vision_end|>`; LLaVA: `<image>` x n), followed by the
caption. n is what the model's processor expands an image to, so that the vision tower's features
and the image tokens match one to one. The image tensors themselves are made by the image processor
at collate time, as a real VLM collator does, so the processor's cost is part of every measured step.

Presets build their processor from parts, with no download: the family's image processor with its
defaults, and a byte-level tokenizer built in memory holding the family's special tokens at the ids
the preset's config names (259 up). Hub and local models load theirs with `AutoProcessor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

# Row-building families: the special tokens around an image, whether the image processor takes a
# pixel budget (a resolution limit), and whether the model needs per-token modality ids (M-RoPE).
FAMILIES: dict[str, dict[str, Any]] = {
    "qwen2_vl": {"start": "<|vision_start|>", "image": "<|image_pad|>", "end": "<|vision_end|>",
                 "extra": ("<|video_pad|>",), "resizable": True, "mm_token_type_ids": True},
    "qwen2_5_vl": {"start": "<|vision_start|>", "image": "<|image_pad|>", "end": "<|vision_end|>",
                   "extra": ("<|video_pad|>",), "resizable": True, "mm_token_type_ids": True},
    "llava": {"start": None, "image": "<image>", "end": None, "extra": (), "resizable": False,
              "mm_token_type_ids": False},
}
# The in-memory tokenizer: 3 specials, 256 byte tokens, then the family's tokens from id 259 (the ids
# the presets' configs name).
BYTE_OFFSET = 3


def is_vlm(config: Any) -> bool:
    """A composite config with a vision tower: loaded through the image-text classes."""
    return getattr(config, "vision_config", None) is not None


def vision_module(model: torch.nn.Module) -> torch.nn.Module | None:
    """The vision tower of a model, peft-wrapped or not (LLaVA's projector sits beside it, not in it)."""
    for module in model.modules():
        for name in ("visual", "vision_tower", "vision_model"):
            found = getattr(module, name, None)
            if isinstance(found, torch.nn.Module):
                return found
    return None


def family_tokens(model_type: str) -> list[str]:
    spec = FAMILIES[model_type]
    return [t for t in (spec["start"], spec["end"], spec["image"], *spec["extra"]) if t]


def byte_tokenizer(special: list[str]) -> Any:
    """A byte-level tokenizer built in memory: `<pad>` 0, `<s>` 1, `</s>` 2, bytes 3-258, then `special`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: BYTE_OFFSET + i for i, c in enumerate(alphabet)}}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=special)


def image_processor_for(config: Any) -> Any:
    """The family's image processor with its defaults, sized to the config (no download). The PIL
    backends: torchvision is not a dependency."""
    if config.model_type in ("qwen2_vl", "qwen2_5_vl"):
        from transformers import Qwen2VLImageProcessorPil

        vision = config.vision_config
        return Qwen2VLImageProcessorPil(patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
                                        temporal_patch_size=vision.temporal_patch_size)
    from transformers import CLIPImageProcessorPil

    side = config.vision_config.image_size
    return CLIPImageProcessorPil(size={"shortest_edge": side}, crop_size={"height": side, "width": side})


@dataclass
class Vision:
    """What turns images into tokens and tensors for one model: its image processor, tokenizer, family."""

    model_type: str
    image_processor: Any
    tokenizer: Any
    config: Any
    processor: Any = None  # a hub processor, when there is one: its own token count is the reference
    ids: dict[str, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = FAMILIES[self.model_type]
        self.ids = {role: (self.tokenizer.convert_tokens_to_ids(spec[role]) if spec[role] else None)
                    for role in ("start", "image", "end")}
        if self.ids["image"] != self.config.image_token_id:
            raise ValueError(f"the tokenizer's {spec['image']} is id {self.ids['image']}, the model's image token "
                             f"is {self.config.image_token_id}")

    @property
    def block_ids(self) -> frozenset[int]:
        """Tokens of image blocks: never loss targets, never cut."""
        return frozenset(i for i in self.ids.values() if i is not None)

    @property
    def resizable(self) -> bool:
        return FAMILIES[self.model_type]["resizable"]

    def _size(self, max_pixels: int) -> dict[str, Any]:
        if not max_pixels:
            return {}
        size = dict(self.image_processor.size)
        # A cap only lowers the processor's own limit, never raises it (rows were sized to that limit),
        # and its floor stays: a cap below it would be raised back anyway.
        cap = min(int(max_pixels), int(size.get("longest_edge") or max_pixels))
        size["longest_edge"] = max(cap, int(size.get("shortest_edge") or 0))
        return {"size": size}

    def _budget(self, max_pixels: int) -> dict[str, Any]:
        """The same cap as the processor's token arithmetic reads it (min_pixels / max_pixels keys)."""
        size = self._size(max_pixels).get("size")
        return {"min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"]} if size else {}

    def count(self, height: int, width: int, max_pixels: int = 0) -> int:
        """Image tokens one image of this size expands to, as the processor expands it."""
        if self.processor is not None and hasattr(self.processor, "_get_num_multimodal_tokens"):
            data = self.processor._get_num_multimodal_tokens(image_sizes=[(height, width)],
                                                               images_kwargs=self._budget(max_pixels))
            return int(data["num_image_tokens"][0])
        if self.resizable:
            patches = self.image_processor.get_number_of_image_patches(height, width, self._budget(max_pixels))
            return int(patches) // self.image_processor.merge_size ** 2
        vision = self.config.vision_config
        patches = (vision.image_size // vision.patch_size) ** 2
        return patches + (1 if getattr(self.config, "vision_feature_select_strategy", "default") == "full" else 0)

    def patches(self, height: int, width: int, max_pixels: int = 0) -> int:
        """The vision tower's sequence length for one image (what its attention and FLOPs scale with)."""
        if self.resizable:
            return int(self.image_processor.get_number_of_image_patches(height, width, self._budget(max_pixels)))
        vision = self.config.vision_config
        return (vision.image_size // vision.patch_size) ** 2 + 1  # CLIP adds a class token

    def block(self, count: int) -> list[int]:
        return ([self.ids["start"]] if self.ids["start"] is not None else []) + [self.ids["image"]] * count + \
            ([self.ids["end"]] if self.ids["end"] is not None else [])

    def tensors(self, images: list[Any], max_pixels: int = 0) -> dict[str, torch.Tensor]:
        """The vision inputs of a micro-batch's images, in row order: one processor call per micro-batch."""
        if not images:
            return {}
        out = self.image_processor(images=images, return_tensors="pt", **self._size(max_pixels))
        return {k: v for k, v in out.items() if torch.is_tensor(v)}

    def resize_row(self, row: list[int], sizes: list[tuple[int, int]], max_pixels: int) -> list[int]:
        """The row with each image's run of image tokens set to what the capped resolution gives."""
        if not max_pixels:
            return row
        image, out, k, i = self.ids["image"], [], 0, 0
        while i < len(row):
            if row[i] != image:
                out.append(row[i])
                i += 1
                continue
            while i < len(row) and row[i] == image:
                i += 1
            out.extend([image] * self.count(*sizes[k], max_pixels))
            k += 1
        return out

    def extra_inputs(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-token modality ids (1 = image) where the model computes M-RoPE positions from them."""
        if not FAMILIES[self.model_type]["mm_token_type_ids"]:
            return {}
        return {"mm_token_type_ids": (input_ids == self.ids["image"]).to(torch.int32)}


def load_vision(job: dict[str, Any], config: Any) -> Vision:
    """The model's processor: built from parts for presets and smoke, `AutoProcessor` otherwise."""
    from ..presets import PRESETS

    if config.model_type not in FAMILIES:
        raise ValueError(f"image-text rows for {config.model_type} models are not supported yet "
                         f"(supported: {', '.join(FAMILIES)})")
    if job["model"] in PRESETS or job.get("smoke"):
        return Vision(config.model_type, image_processor_for(config), byte_tokenizer(family_tokens(config.model_type)),
                      config)
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(job["model"])
    return Vision(config.model_type, processor.image_processor, processor.tokenizer, config, processor=processor)
