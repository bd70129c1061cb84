"""Micro-batches from rows: padding modes, packing with rows kept apart, labels, row slots.

Padding-free packs a micro-batch's rows into one sequence. With `sdpa` or `eager` attention a
block-diagonal causal mask keeps packed rows from attending to each other; passing only restarting
`position_ids` leaks attention across rows when the model builds its mask with a cache (what
`DataCollatorWithFlattening` relies on). flash_attention_2 (and its Hub build) reads the row
boundaries from `position_ids` (varlen kernels), so it gets no dense mask.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict, Union

import torch

from ..config.knobs import VARLEN_BOUNDS

IGNORE = -100


class Batch(TypedDict):
    """One micro-batch's tensors. `slots`: per token, which row of the micro-batch it belongs to (-1 for
    padding); `flash`: flash-attention varlen's row bounds (packed rows); `vision`: a VLM's image inputs."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    slots: torch.Tensor
    real_tokens: int
    attention_mask: NotRequired[torch.Tensor]
    position_ids: NotRequired[torch.Tensor]
    flash: NotRequired[dict[str, Union[torch.Tensor, int]]]
    vision: NotRequired[dict[str, torch.Tensor]]


def step_plan(row_ids: list[int], effective_batch: int, micro: int) -> list[list[list[int]]]:
    """Optimizer steps, each a list of micro-batches of row ids, from rows in order."""
    steps = []
    for start in range(0, len(row_ids) - effective_batch + 1, effective_batch):
        step = row_ids[start:start + effective_batch]
        steps.append([step[i:i + micro] for i in range(0, effective_batch, micro)])
    return steps


def group_by_length(row_ids: list[int], lengths: list[int], micro: int) -> list[int]:
    """Rows of similar length side by side, within megabatches of 50 micro-batches (as HF's sampler)."""
    mega = 50 * micro
    ordered: list[int] = []
    for start in range(0, len(row_ids), mega):
        chunk = row_ids[start:start + mega]
        ordered.extend(sorted(chunk, key=lambda r: -lengths[r]))
    return ordered


def _labels(ids: list[int], ignore: frozenset[int] = frozenset()) -> list[int]:
    """Next-token targets inside one row; the last token has none, nor do image-block tokens (`ignore`):
    a VLM is not trained to predict the tokens that stand for its images."""
    return [IGNORE if t in ignore else t for t in ids[1:]] + [IGNORE]


def row_targets(ids: list[int], ignore: frozenset[int] = frozenset()) -> int:
    """How many loss targets a row has (what a step's loss is normalised by)."""
    return sum(1 for t in ids[1:] if t not in ignore)


def collate(rows: list[list[int]], padding: str, max_len: int, pad_id: int, attn: str,
            leak_packed_rows: bool = False, ignore: frozenset[int] = frozenset()) -> Batch:
    """Tensors for one micro-batch.

    `slots` gives, per token, which row of the micro-batch it belongs to (-1 for padding), so per-row
    losses can be read back. `leak_packed_rows` builds the known-wrong packing (position_ids only);
    it exists so tests can show the parity check catches it.
    """
    real_tokens = sum(len(r) for r in rows)
    if padding == "padding_free":
        ids = [t for r in rows for t in r]
        labels = [t for r in rows for t in _labels(r, ignore)]
        positions = [p for r in rows for p in range(len(r))]
        slots = [i for i, r in enumerate(rows) for _ in r]
        batch: Batch = {
            "input_ids": torch.tensor([ids]), "labels": torch.tensor([labels]),
            "position_ids": torch.tensor([positions]), "slots": torch.tensor([slots]), "real_tokens": real_tokens,
        }
        if attn in VARLEN_BOUNDS:
            # The row boundaries as flash-attention varlen wants them; left to position_ids, transformers
            # derives them in every layer with a device sync each time.
            bounds = torch.tensor([0] + [len(r) for r in rows]).cumsum(0).to(torch.int32)
            batch["flash"] = {"cu_seq_lens_q": bounds, "cu_seq_lens_k": bounds,
                              "max_length_q": max(len(r) for r in rows), "max_length_k": max(len(r) for r in rows)}
        elif not leak_packed_rows:
            batch["attention_mask"] = block_diagonal_mask(slots, attn)
        return batch
    width = max_len if padding == "max_length" else max(len(r) for r in rows)
    ids, labels, mask, slots = [], [], [], []
    for i, row in enumerate(rows):
        gap = width - len(row)
        ids.append(row + [pad_id] * gap)
        labels.append(_labels(row, ignore) + [IGNORE] * gap)
        mask.append([1] * len(row) + [0] * gap)
        slots.append([i] * len(row) + [-1] * gap)
    return {
        "input_ids": torch.tensor(ids), "labels": torch.tensor(labels),
        "attention_mask": torch.tensor(mask), "slots": torch.tensor(slots), "real_tokens": real_tokens,
    }


def block_diagonal_mask(slots: list[int], attn: str) -> torch.Tensor:
    """A (1, 1, T, T) causal mask that lets each token see only earlier tokens of its own row.

    sdpa takes a boolean mask (True = attend); eager adds the mask to the scores, so it gets 0 or the
    dtype minimum. The mask is built in float32; the model casts it under autocast.
    """
    seg = torch.tensor(slots)
    length = seg.numel()
    allowed = torch.tril(torch.ones(length, length, dtype=torch.bool)) & (seg[:, None] == seg[None, :])
    if attn == "sdpa":
        return allowed[None, None]
    return torch.zeros(length, length).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]


def worst_case_rows(micro: int, max_len: int, vocab_size: int) -> list[list[int]]:
    """Every row at max_len: the batch that decides whether a config fits for the whole run."""
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(3, vocab_size, (max_len,), generator=generator).tolist() for _ in range(micro)]
