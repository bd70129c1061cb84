"""Rows for a run: synthetic, a local file or a hub dataset, tokenized and truncated to max_len.

Runs in the child process (the frame writes the rows once; every trial reads the same file, so every
measurement of a run sees the same rows in the same order).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Iterable, Mapping, NotRequired, TypedDict

from ..config.messages import DataFacts
from ..util.io import write_json_atomic

SUFFIX_TO_BUILDER = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}
# Real chat SFT data: most rows short, a long tail that reaches the length cap (e.g. Alpaca, UltraChat).
SYNTHETIC_MEDIAN_SHARE = 1 / 6
SYNTHETIC_SIGMA = 1.0
# One example of the user's dataset, its own columns (`datasets` rows, a jsonl line): open-ended.
Example = Mapping[str, object]


class VisionMeta(TypedDict):
    """An image-text run's rows' images (workloads/vlm/images.py): per row the indices of its images in
    the images file and their (height, width); the images' end offsets there; the image-block tokens."""

    images: list[list[int]]
    sizes: list[list[tuple[int, int]]]
    ends: list[int]
    block_ids: list[int]


class StoredRows(TypedDict):
    """The run's rows file (written once by the frame, read by every trial)."""

    schema_version: int
    pad_id: int
    vocab_size: int
    rows: list[list[int]]
    vision: NotRequired[VisionMeta]


class ByteTokenizer:
    """UTF-8 bytes as tokens, for presets (random weights, no tokenizer files to download)."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2
    offset = 3
    vocab_size = 256 + offset

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id] + [b + self.offset for b in text.encode("utf-8")] + [self.eos_token_id]


def synthetic_rows(count: int, max_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Seeded rows whose lengths follow a log-normal spread (many short rows, a long tail)."""
    rng = random.Random(seed)
    median = max(8.0, max_len * SYNTHETIC_MEDIAN_SHARE)
    rows = []
    for _ in range(count):
        length = int(min(max_len, max(8, round(rng.lognormvariate(math.log(median), SYNTHETIC_SIGMA)))))
        rows.append([rng.randrange(3, vocab_size) for _ in range(length)])
    return rows


def row_text(example: Example, tokenizer: Any) -> str:
    """The training text of one example, from the usual SFT column layouts."""
    if isinstance(example.get("messages"), list):
        messages = example["messages"]
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(messages, tokenize=False)
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in messages)
    if isinstance(example.get("text"), str):
        return example["text"]
    for prompt_key, answer_key in (("prompt", "completion"), ("instruction", "output"), ("question", "answer")):
        if isinstance(example.get(prompt_key), str) and isinstance(example.get(answer_key), str):
            extra = example.get("input") or ""
            return "\n".join(part for part in (example[prompt_key], extra, example[answer_key]) if part)
    strings = [v for v in example.values() if isinstance(v, str)]
    if not strings:
        raise ValueError(f"no text column in dataset row with columns {sorted(example)}")
    return max(strings, key=len)


def load_examples(dataset: str, seed: int, limit: int) -> Iterable[Example]:
    """Up to `limit` examples in a seeded order, through `datasets.load_dataset`."""
    import datasets

    path = Path(dataset).expanduser()
    try:
        if path.suffix.lower() in SUFFIX_TO_BUILDER:
            data = datasets.load_dataset(SUFFIX_TO_BUILDER[path.suffix.lower()], data_files=str(path), split="train")
        elif path.is_dir():
            data = datasets.load_from_disk(str(path)) if (path / "dataset_info.json").exists() else datasets.load_dataset(str(path), split="train")
        else:
            name, _, config = dataset.partition(":")
            data = datasets.load_dataset(name, config or None, split="train")
    except Exception as error:  # noqa: BLE001 - the frame's crash reason names the dataset, not only the library's error
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        raise ValueError(f"dataset={dataset}: `datasets` cannot read it ({type(error).__name__}: {first[:300]})") from error
    if len(data) == 0:
        raise ValueError(f"dataset={dataset}: holds no rows; give a dataset with at least one")
    data = data.shuffle(seed=seed)
    return data.select(range(min(limit, len(data))))


def tokenize_rows(examples: Iterable[Example], tokenizer: Any, max_len: int) -> list[list[int]]:
    rows = []
    for example in examples:
        text = row_text(example, tokenizer)
        ids = tokenizer.encode(text) if isinstance(tokenizer, ByteTokenizer) else tokenizer(text)["input_ids"]
        if len(ids) >= 2:
            rows.append(list(ids[:max_len]))
    if not rows:
        raise ValueError("the dataset gave no row with at least 2 tokens")
    return rows


def length_facts(rows: list[list[int]], max_len: int) -> DataFacts:
    """What claims condition on: the length spread and the padding share of pad-to-max_len."""
    lengths = sorted(len(r) for r in rows)
    n = len(lengths)

    def pct(q: float) -> int:
        return lengths[min(n - 1, int(q * (n - 1) + 0.5))]

    mean = sum(lengths) / n
    return {
        "rows_sampled": n, "mean_len": round(mean, 1), "p10_len": pct(0.1), "p50_len": pct(0.5),
        "p90_len": pct(0.9), "max_seen_len": lengths[-1],
        "padding_share": round(1 - mean / max_len, 4),
        "truncated_share": round(sum(1 for x in lengths if x >= max_len) / n, 4),
    }


def write_rows(path: Path, rows: list[list[int]], pad_id: int, vocab_size: int,
               vision: VisionMeta | None = None) -> None:
    """The run's rows. An image-text run adds `vision`: per row its images (indices into the images
    file beside this one, see workloads/vlm/images.py) and their (height, width), and the image-block tokens."""
    data: StoredRows = {"schema_version": 1, "pad_id": pad_id, "vocab_size": vocab_size, "rows": rows}
    if vision is not None:
        data["vision"] = vision
    write_json_atomic(path, data, indent=None)


def read_rows(path: Path) -> StoredRows:
    stored: StoredRows = json.loads(Path(path).read_text())
    return stored
