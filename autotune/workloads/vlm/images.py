"""Image-text rows: synthetic, a local folder (images plus a jsonl) or a hub dataset; stored once.

The frame builds the rows: each example's images become blocks of image tokens (as many as the
processor expands each image to), then the caption; a row never exceeds max_len, and is never cut
inside an image's tokens: the caption is shortened, and a row whose images alone do not fit is
skipped. The images are kept encoded (JPEG or the source's own bytes) in a side file next to the
rows file, so every trial decodes and processes the very same images, as a training loader does.
"""

from __future__ import annotations

import io
import json
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, TypedDict

from ...engine.data import Example, StoredRows
from ...util.io import write_bytes_atomic
from .vision import Vision

if TYPE_CHECKING:
    import torch

# Sizes (width, height) of common image-text data, the smaller more frequent (COCO, VQA, charts,
# screenshots); at max_len=512 the largest do not fit a Qwen2-VL row and are skipped, as they would be.
SYNTHETIC_SIZES = ((224, 224), (336, 336), (384, 384), (448, 336), (336, 448), (512, 384), (640, 480),
                   (480, 640), (640, 360), (800, 600), (1024, 768))
SYNTHETIC_SIZE_WEIGHTS = (8, 8, 6, 6, 4, 5, 6, 3, 3, 2, 1)
# Captions and answers: short ones common (COCO-style, ~10 words), a tail of long descriptions
# (LLaVA-style answers of a few hundred tokens): log-normal words, median 10.
CAPTION_MEDIAN_WORDS, CAPTION_SIGMA, CAPTION_MAX_WORDS = 10, 0.9, 300
IMAGE_KEYS = ("images", "image", "img", "picture", "pixel_values")


class ImageExample(TypedDict):
    """One image-text example as the frame reads it: its images, encoded, and its text."""

    images: list[bytes]
    text: str


class BuiltRow(TypedDict):
    """A row that fits max_len: its token ids, its images (encoded) and their (height, width)."""

    ids: list[int]
    images: list[bytes]
    sizes: list[tuple[int, int]]


def synthetic_image(rng: random.Random, width: int, height: int) -> bytes:
    """Smooth random colours (a coarse random grid upscaled), JPEG-encoded like real photo data."""
    import numpy as np
    from PIL import Image

    coarse = np.random.default_rng(rng.randrange(2**32)).integers(0, 256, (max(2, height // 32), max(2, width // 32), 3),
                                                                  dtype=np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.BILINEAR)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90)
    return out.getvalue()


def synthetic_examples(count: int, seed: int) -> list[ImageExample]:
    """Seeded examples: one image of a realistic size and a caption of a realistic length each."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    examples: list[ImageExample] = []
    for _ in range(count):
        width, height = rng.choices(SYNTHETIC_SIZES, SYNTHETIC_SIZE_WEIGHTS)[0]
        words = int(min(CAPTION_MAX_WORDS, max(3, round(rng.lognormvariate(math.log(CAPTION_MEDIAN_WORDS),
                                                                                CAPTION_SIGMA)))))
        text = " ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(words))
        examples.append({"images": [synthetic_image(rng, width, height)], "text": text.capitalize() + "."})
    return examples


def _encoded(value: Any, folder: Path | None) -> bytes:
    """An image's bytes from what a dataset holds: a PIL image, {bytes, path}, raw bytes or a file name."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        value = value.get("path")
    if isinstance(value, str):
        path = Path(value) if folder is None or Path(value).is_absolute() else folder / value
        return path.read_bytes()
    if hasattr(value, "save"):  # a PIL image
        out = io.BytesIO()
        value.convert("RGB").save(out, format="PNG")
        return out.getvalue()
    raise ValueError(f"cannot read an image from a {type(value).__name__}")


def example_images(example: Example, folder: Path | None = None) -> list[bytes]:
    for key in IMAGE_KEYS:
        value = example.get(key)
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        return [_encoded(v, folder) for v in values]
    raise ValueError(f"no image column in dataset row with columns {sorted(example)} (looked for {', '.join(IMAGE_KEYS)})")


def example_text(example: Example) -> str:
    """The caption or answer text: the text parts of chat messages, else the usual text columns."""
    messages = example.get("messages") or example.get("conversations")
    if isinstance(messages, list):
        parts = []
        for message in messages:
            content = message.get("content", message.get("value", "")) if isinstance(message, dict) else ""
            if isinstance(content, list):
                parts += [c.get("text") or "" for c in content if isinstance(c, dict) and c.get("type") == "text"]
            elif isinstance(content, str):
                parts.append(content.replace("<image>", "").strip())
        return "\n".join(p for p in parts if p)
    for key in ("text", "caption", "answer", "response", "output"):
        if isinstance(example.get(key), str):
            return example[key]
    strings = [v for k, v in example.items() if isinstance(v, str) and k not in IMAGE_KEYS]
    if not strings:
        raise ValueError(f"no text column in dataset row with columns {sorted(example)}")
    return max(strings, key=len)


def load_image_examples(dataset: str, seed: int, limit: int) -> list[ImageExample]:
    """Up to `limit` examples as {"images": [bytes], "text": str}, in a seeded order."""
    if dataset == "synthetic":
        return synthetic_examples(limit, seed)
    path = Path(dataset).expanduser()
    if path.is_dir() and not (path / "dataset_info.json").exists() and list(path.glob("*.jsonl")):
        lines = [json.loads(line) for f in sorted(path.glob("*.jsonl")) for line in f.read_text().splitlines()
                 if line.strip()]
        random.Random(seed).shuffle(lines)
        return [{"images": example_images(e, path), "text": example_text(e)} for e in lines[:limit]]
    from ...engine.data import load_examples

    return [{"images": example_images(e), "text": example_text(e)} for e in load_examples(dataset, seed, limit)]


def image_size(data: bytes) -> tuple[int, int]:
    """(height, width), read from the header only."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.height, image.width


def build_rows(examples: Iterable[ImageExample], vision: Vision, max_len: int) -> tuple[list[BuiltRow], int]:
    """Rows {ids, images, sizes} that fit max_len, and how many examples were skipped (their images
    alone did not fit with two caption tokens)."""
    tokenizer = vision.tokenizer
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    rows: list[BuiltRow] = []
    skipped = 0
    for example in examples:
        sizes = [image_size(b) for b in example["images"]]
        head = bos + [t for h, w in sizes for t in vision.image_block(h, w)]
        room = max_len - len(head)
        caption = tokenizer(example["text"], add_special_tokens=False)["input_ids"] + eos
        if room < 2 or not sizes:
            skipped += 1
            continue
        rows.append({"ids": head + caption[:room], "images": example["images"], "sizes": sizes})
    return rows, skipped


def images_path(rows_path: Path) -> Path:
    return Path(str(rows_path) + ".images")


def write_images(rows_path: Path, images: list[bytes]) -> list[int]:
    """All images, back to back, in one file beside the rows file (atomic); their end offsets."""
    return write_bytes_atomic(images_path(rows_path), images)


class ImageStore:
    """The run's images, decoded on demand (in loader workers when there are any)."""

    def __init__(self, rows_path: Path, ends: list[int]) -> None:
        self.data = images_path(rows_path).read_bytes()
        self.starts, self.ends = [0] + ends[:-1], ends

    def image(self, index: int) -> Any:
        from PIL import Image

        with Image.open(io.BytesIO(self.data[self.starts[index]:self.ends[index]])) as image:
            return image.convert("RGB")


class VisionRows:
    """The image side of a run's rows for one trial: which images each row has, processed per micro-batch
    with the trial's resolution limit (0: the processor's own)."""

    def __init__(self, vision: Vision, stored: StoredRows, rows_path: Path, max_pixels: int = 0) -> None:
        meta = stored["vision"]
        self.vision, self.max_pixels = vision, max_pixels
        self.images, self.sizes = meta["images"], [[tuple(s) for s in sizes] for sizes in meta["sizes"]]
        self.store = ImageStore(rows_path, meta["ends"])
        self.ignore = vision.block_ids

    def micro_batch(self, row_ids: tuple, rows: list[list[int]]) -> tuple[list[list[int]], dict[str, torch.Tensor]]:
        """The rows as the model sees them at this resolution, and their images' tensors in row order."""
        rows = [self.vision.resize_row(row, self.sizes[r], self.max_pixels) for r, row in zip(row_ids, rows)]
        images = [self.store.image(i) for r in row_ids for i in self.images[r]]
        return rows, self.vision.tensors(images, self.max_pixels, [len(self.images[r]) for r in row_ids])

    def worst_case(self, micro: int, max_len: int, stored_rows: list[list[int]]) -> tuple[tuple, list[list[int]]]:
        """`micro` copies of the row with the most image tokens, its caption repeated up to max_len: the
        largest vision input and the longest row together."""
        image = self.vision.ids["image"]
        heaviest = max(range(len(stored_rows)), key=lambda r: stored_rows[r].count(image))
        row = list(stored_rows[heaviest])
        text = [t for t in row if t not in self.ignore] or [BYTE_FILLER]
        while len(row) < max_len:
            row.append(text[len(row) % len(text)])
        return (heaviest,) * micro, [row] * micro


# A plain byte token ('a' in the in-memory tokenizer) for a worst-case row with no caption at all.
BYTE_FILLER = 100
