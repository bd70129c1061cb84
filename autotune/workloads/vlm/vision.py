"""Image-text models (VLMs): which configs are VLMs, their processors, and how images become tokens.

A VLM row is token ids in which each image stands as a block of image tokens (Qwen2-VL:
`<|vision_start|>`, `<|image_pad|>` x n, `<|vision_end|>`; LLaVA: `<image>` x n), followed by the
caption. n is what the model's processor expands an image to, so that the vision tower's features
and the image tokens match one to one. Idefics3 (SmolVLM checkpoints of model type idefics3 too)
and SmolVLM2 (model type smolvlm, the same image layout) split an image into tiles plus a downscaled
global view; its block is what its processor writes for that tile grid (`<fake_token_around_image>`,
`<row_r_col_c>` or `<global-img>`, `<image>` x image_seq_len per tile, newlines between tile rows),
taken from the processor, not re-derived. The
image tensors themselves are made by the image processor at collate time, as a real VLM collator does,
so the processor's cost is part of every measured step.

Presets build their processor from parts, with no download: the family's image processor with its
defaults, and a byte-level tokenizer built in memory holding the family's special tokens at the ids
the preset's config names (259 up). Hub and local models load theirs with `AutoProcessor` (or, where
it needs torchvision for a video processor, as Qwen2-VL's and SmolVLM2's do, the image processor and
tokenizer alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ...config.job import Job
from ...probes.vision_flops import vision_module  # noqa: F401 - the tower, for the VLM runners

# Idefics3's tile tags: its processor looks up a 6 x 6 grid of them.
ROW_COL = tuple(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7))


@dataclass(frozen=True)
class Family:
    """How a family of image-text models builds its rows: the special tokens around an image, other tags
    inside an image's block (`marks`), how the image processor takes a resolution limit (`cap`: a pixel
    budget, a longest edge, or none), whether the model needs per-token modality ids (M-RoPE), and
    whether images are split into tiles the tower sees apart."""

    start: str | None
    image: str
    end: str | None
    extra: tuple[str, ...]
    marks: tuple[str, ...]
    cap: str | None
    mm_token_type_ids: bool
    tiles: bool

    def token(self, role: str) -> str | None:
        """The family's token for `role` (start, image, end)."""
        return {"start": self.start, "image": self.image, "end": self.end}[role]


FAMILIES: dict[str, Family] = {
    "qwen2_vl": Family("<|vision_start|>", "<|image_pad|>", "<|vision_end|>", ("<|video_pad|>",), (), "pixels",
                       mm_token_type_ids=True, tiles=False),
    "qwen2_5_vl": Family("<|vision_start|>", "<|image_pad|>", "<|vision_end|>", ("<|video_pad|>",), (), "pixels",
                         mm_token_type_ids=True, tiles=False),
    "llava": Family(None, "<image>", None, (), (), None, mm_token_type_ids=False, tiles=False),
    # Every image is scaled to the processor's longest edge, then cut into tiles of one side: a pixel cap
    # is a lower longest edge, in whole tiles (SmolVLM's documented `size={"longest_edge": N * 512}`).
    "idefics3": Family("<fake_token_around_image>", "<image>", None, ("<global-img>", "<end_of_utterance>", *ROW_COL),
                       ("<global-img>", *ROW_COL), "edge", mm_token_type_ids=False, tiles=True),
}
# SmolVLM2 writes an image's block as Idefics3 does (its processor's get_image_prompt_string).
FAMILIES["smolvlm"] = FAMILIES["idefics3"]

# The in-memory tokenizer: 3 specials, 256 byte tokens, then the family's tokens from id 259 (the ids
# the presets' configs name).
BYTE_OFFSET = 3


def is_vlm(config: Any) -> bool:
    """A composite config with a vision tower: loaded through the image-text classes."""
    return getattr(config, "vision_config", None) is not None


def family_tokens(model_type: str) -> list[str]:
    spec = FAMILIES[model_type]
    return [t for t in (spec.start, spec.end, spec.image, *spec.extra) if t]


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


def tile_processor(config: Any, image_processor: Any, tokenizer: Any) -> Any:
    """The tiling family's block writer from parts: Idefics3's processor, or SmolVLM2's own block function
    (its processor also needs a video processor and num2words, which images do not)."""
    vision = config.vision_config
    # The model's own arithmetic (Idefics3Model.image_seq_len): patches per tile over the pixel shuffle.
    seq_len = int(((vision.image_size // vision.patch_size) ** 2) / (config.scale_factor ** 2))
    if config.model_type == "smolvlm":
        # The family's tag names (SmolVLM2's tokenizers use these): the same ones `block_ids` keeps out of
        # the loss targets.
        spec = FAMILIES["smolvlm"]
        return SmolVLMBlocks(seq_len, str(spec.start), spec.image, "<global-img>")
    from transformers import Idefics3Processor

    return Idefics3Processor(image_processor, tokenizer, image_seq_len=seq_len)


@dataclass(frozen=True)
class SmolVLMBlocks:
    """What SmolVLMProcessor writes for an image of a tile grid, by its own module's function."""

    image_seq_len: int
    around: str
    image: str
    global_view: str

    def replace_image_token(self, image_inputs: dict[str, list[list[int]]], image_idx: int) -> str:
        from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

        rows = [r for group in image_inputs["rows"] for r in group][image_idx]
        cols = [c for group in image_inputs["cols"] for c in group][image_idx]
        return get_image_prompt_string(rows, cols, self.image_seq_len, self.around, self.image, self.global_view)


def image_processor_for(config: Any) -> Any:
    """The family's image processor with its defaults, sized to the config (no download). The PIL
    backends: torchvision is not a dependency."""
    if config.model_type in ("qwen2_vl", "qwen2_5_vl"):
        from transformers import Qwen2VLImageProcessorPil

        vision = config.vision_config
        return Qwen2VLImageProcessorPil(patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
                                        temporal_patch_size=vision.temporal_patch_size)
    if config.model_type in ("idefics3", "smolvlm"):
        from transformers import Idefics3ImageProcessorPil, SmolVLMImageProcessorPil

        side = config.vision_config.image_size
        # The family's own ratio: images up to 4 tiles a side (Idefics3-8B 364/1456, SmolVLM 512/2048).
        kind = SmolVLMImageProcessorPil if config.model_type == "smolvlm" else Idefics3ImageProcessorPil
        return kind(max_image_size={"longest_edge": side}, size={"longest_edge": 4 * side})
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
    _blocks: dict[tuple[int, int], list[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        spec = FAMILIES[self.model_type]
        if spec.tiles and self.processor is None:
            self.processor = tile_processor(self.config, self.image_processor, self.tokenizer)
        self.ids = {role: (self.tokenizer.convert_tokens_to_ids(spec.token(role)) if spec.token(role) else None)
                    for role in ("start", "image", "end")}
        if self.ids["image"] != self.config.image_token_id:
            raise ValueError(f"the tokenizer's {spec.image} is id {self.ids['image']}, the model's image token "
                             f"is {self.config.image_token_id}")

    @property
    def block_ids(self) -> frozenset[int]:
        """Tokens of image blocks: never loss targets, never cut. (Idefics3's newlines between tile rows
        are plain text tokens, shared with captions: they stay targets, as in the family's own recipes.)"""
        marks = [self.tokenizer.convert_tokens_to_ids(t) for t in FAMILIES[self.model_type].marks]
        return frozenset(i for i in [*self.ids.values(), *marks] if i is not None)

    @property
    def tiled(self) -> bool:
        return FAMILIES[self.model_type].tiles

    @property
    def resizable(self) -> bool:
        return FAMILIES[self.model_type].cap is not None

    def _size(self, max_pixels: int) -> dict[str, dict[str, int]]:
        # A processor with no resolution limit is never capped (the frame does not offer it the knob).
        if not max_pixels or not self.resizable:
            return {}
        size = dict(self.image_processor.size)
        if FAMILIES[self.model_type].cap == "edge":
            # The longest edge whose square holds `max_pixels`, in whole tiles, at least one tile, and
            # never above the processor's own (rows were sized to that).
            tile = int(self.image_processor.max_image_size["longest_edge"])
            edge = max(tile, math.isqrt(int(max_pixels)) // tile * tile)
            return {"size": {"longest_edge": min(edge, int(size["longest_edge"]))}}
        # A cap only lowers the processor's own limit, never raises it (rows were sized to that limit),
        # and its floor stays: a cap below it would be raised back anyway.
        cap = min(int(max_pixels), int(size.get("longest_edge") or max_pixels))
        size["longest_edge"] = max(cap, int(size.get("shortest_edge") or 0))
        return {"size": size}

    def caps(self, max_pixels: int) -> bool:
        """Whether this cap lowers the processor's own limit (else a capped trial measures the same thing)."""
        size = self._size(max_pixels).get("size")
        return bool(size) and int(size["longest_edge"]) < int(self.image_processor.size["longest_edge"])

    def _budget(self, max_pixels: int) -> dict[str, object]:
        """The same cap as the processor's token arithmetic reads it (a pixel budget as min_pixels /
        max_pixels keys, a longest edge as `size`)."""
        if FAMILIES[self.model_type].cap == "edge":
            return dict(self._size(max_pixels))
        size = self._size(max_pixels).get("size")
        return {"min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"]} if size else {}

    def count(self, height: int, width: int, max_pixels: int = 0) -> int:
        """Image tokens one image of this size expands to, as the processor expands it (a tiling family:
        its whole block, tags and newlines included)."""
        if self.tiled:
            return len(self.image_block(height, width, max_pixels))
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
        """The vision tower's sequence length for one image, over all its tiles."""
        if self.tiled:
            return sum(p for p, _ in self.units(height, width, max_pixels))
        if self.resizable:
            return int(self.image_processor.get_number_of_image_patches(height, width, self._budget(max_pixels)))
        vision = self.config.vision_config
        return (vision.image_size // vision.patch_size) ** 2 + 1  # CLIP adds a class token

    def units(self, height: int, width: int, max_pixels: int = 0) -> list[tuple[int, int]]:
        """(tower sequence length, image tokens) per separate pass of the vision tower: one per image, one
        per tile when the family tiles (attention stays within a tile, so its cost goes with each tile's
        length squared)."""
        if not self.tiled:
            unit = (self.patches(height, width, max_pixels), self.count(height, width, max_pixels))
            windows = self._window_squares(height, width, max_pixels)
            return [unit + (windows,) if windows is not None else unit]
        tiles, _, _ = self.image_processor.get_number_of_image_patches(height, width, self._budget(max_pixels))
        vision = self.config.vision_config
        # 0 tiles from the processor means the image was not split: it is one tile.
        return [((vision.image_size // vision.patch_size) ** 2, int(self.processor.image_seq_len))] * max(1, tiles)

    def _window_squares(self, height: int, width: int, max_pixels: int) -> int | None:
        """Qwen2.5-VL: the sum over one image's attention windows of their length squared (its windowed
        blocks attend within windows), from the model's own window split; None for other families."""
        if getattr(self.config.vision_config, "window_size", None) is None or not self.resizable:
            return None
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
        from transformers.vision_utils import get_vision_window_index

        vision, size = self.config.vision_config, self.image_processor.size
        budget = {"min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"], **self._budget(max_pixels)}
        h, w = smart_resize(height, width, vision.patch_size * vision.spatial_merge_size, **budget)
        grid = torch.tensor([[1, h // vision.patch_size, w // vision.patch_size]])
        _, bounds = get_vision_window_index(grid, vision.spatial_merge_size, vision.window_size, vision.patch_size)
        return int((bounds.diff().long() ** 2).sum())

    def image_block(self, height: int, width: int, max_pixels: int = 0) -> list[int]:
        """One image's tokens in a row: what the processor writes for it, tokenized."""
        if not self.tiled:
            return self.block(self.count(height, width, max_pixels))
        _, rows, cols = self.image_processor.get_number_of_image_patches(height, width, self._budget(max_pixels))
        if (rows, cols) not in self._blocks:
            # The block starts and ends with special tokens, so alone it tokenizes as it does in a row.
            text = self.processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0)
            self._blocks[rows, cols] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return list(self._blocks[rows, cols])

    def block(self, count: int) -> list[int]:
        return ([self.ids["start"]] if self.ids["start"] is not None else []) + [self.ids["image"]] * count + \
            ([self.ids["end"]] if self.ids["end"] is not None else [])

    def tensors(self, images: list[Any], max_pixels: int = 0,
                per_row: list[int] | None = None) -> dict[str, torch.Tensor]:
        """The vision inputs of a micro-batch's images, in row order: one processor call per micro-batch.
        `per_row`: how many of the images each row has (default one each); a tiling family takes them
        nested by row, as its collators pass them: (rows, most tiles in a row, 3, H, W), short rows
        padded with all-zero tiles that the model drops, and a pixel mask."""
        if not images:
            return {}
        if self.tiled:
            nested, start = [], 0
            for n in per_row or [1] * len(images):
                nested.append(images[start:start + n])
                start += n
            images = [group for group in nested if group]
        out = self.image_processor(images=images, return_tensors="pt", **self._size(max_pixels))
        return {k: v for k, v in out.items() if torch.is_tensor(v)}

    def resize_row(self, row: list[int], sizes: list[tuple[int, int]], max_pixels: int) -> list[int]:
        """The row with each image's block set to what the capped resolution gives (more or fewer image
        tokens; for a tiling family, another tile grid)."""
        if not max_pixels or not self.resizable:
            return row
        # Rows were built with each image's uncapped block, whole (blocks are never cut): find each in
        # turn and put the capped one in its place.
        out, i = [], 0
        for height, width in sizes:
            old = self.image_block(height, width)
            while row[i:i + len(old)] != old:
                if i >= len(row):
                    raise ValueError(f"an image block of {height}x{width} is not in the row")
                out.append(row[i])
                i += 1
            out.extend(self.image_block(height, width, max_pixels))
            i += len(old)
        return out + row[i:]

    def extra_inputs(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-token modality ids (1 = image) where the model computes M-RoPE positions from them."""
        if not FAMILIES[self.model_type].mm_token_type_ids:
            return {}
        return {"mm_token_type_ids": (input_ids == self.ids["image"]).to(torch.int32)}


def load_vision(job: Job, config: Any) -> Vision:
    """The model's processor: built from parts for presets and smoke, `AutoProcessor` otherwise."""
    from ...config.presets import PRESETS

    if config.model_type not in FAMILIES:
        raise ValueError(f"image-text rows for {config.model_type} models are not supported yet "
                         f"(supported: {', '.join(FAMILIES)})")
    if job.model in PRESETS or job.smoke:
        return Vision(config.model_type, image_processor_for(config), byte_tokenizer(family_tokens(config.model_type)),
                      config)
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        processor = AutoProcessor.from_pretrained(job.model)
    except ImportError:
        # Qwen2-VL's processor also loads a video processor, which needs torchvision (not a dependency);
        # rows need only its image processor and tokenizer, and the count is the same arithmetic.
        return Vision(config.model_type, AutoImageProcessor.from_pretrained(job.model),
                      AutoTokenizer.from_pretrained(job.model), config)
    return Vision(config.model_type, processor.image_processor, processor.tokenizer, config, processor=processor)
