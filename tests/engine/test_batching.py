"""Micro-batches from rows: padding modes, packing with rows kept apart, labels, slots, step plans."""

from __future__ import annotations

import pytest
import torch

from autotune.config.knobs import HUB_FLASH
from autotune.engine.batching import IGNORE, block_diagonal_mask, collate, group_by_length, step_plan

PAD = 0
ROWS = [[11, 12, 13], [21, 22, 23, 24, 25], [31, 32]]
MAX_LEN = 8


def test_max_length_pads_every_row_to_max_len():
    batch = collate(ROWS, "max_length", MAX_LEN, PAD, "sdpa")
    assert batch["input_ids"].shape == (3, MAX_LEN)
    assert batch["input_ids"][0].tolist() == [11, 12, 13] + [PAD] * 5
    assert batch["attention_mask"][2].tolist() == [1, 1] + [0] * 6
    assert batch["labels"].shape == batch["input_ids"].shape == batch["slots"].shape


def test_longest_pads_to_the_longest_row_of_the_micro_batch():
    batch = collate(ROWS, "longest", MAX_LEN, PAD, "sdpa")
    assert batch["input_ids"].shape == (3, 5)
    assert batch["input_ids"].tolist() == [[11, 12, 13, PAD, PAD], [21, 22, 23, 24, 25], [31, 32, PAD, PAD, PAD]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert "position_ids" not in batch


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_padding_free_is_one_row_with_restarting_positions_and_a_square_mask(attn):
    batch = collate(ROWS, "padding_free", MAX_LEN, PAD, attn)
    total = sum(len(r) for r in ROWS)
    assert batch["input_ids"].tolist() == [[t for r in ROWS for t in r]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4, 0, 1]]
    assert batch["attention_mask"].shape == (1, 1, total, total)
    assert PAD not in batch["input_ids"].flatten().tolist()


@pytest.mark.parametrize("attn", ["flash_attention_2", HUB_FLASH])
def test_padding_free_with_flash_attention_has_no_dense_mask(attn):
    batch = collate(ROWS, "padding_free", MAX_LEN, PAD, attn)
    assert "attention_mask" not in batch
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4, 0, 1]]
    # The varlen kernel's row bounds, as transformers' flash_attention_forward takes them.
    assert batch["flash"]["cu_seq_lens_q"].tolist() == [0, 3, 8, 10] and batch["flash"]["max_length_k"] == 5


def test_leaky_packing_has_positions_only():
    batch = collate(ROWS, "padding_free", MAX_LEN, PAD, "sdpa", leak_packed_rows=True)
    assert "attention_mask" not in batch and "position_ids" in batch


def _row_spans(rows):
    spans, start = [], 0
    for r in rows:
        spans.append(range(start, start + len(r)))
        start += len(r)
    return spans


def test_sdpa_block_diagonal_mask_keeps_rows_apart_and_causal():
    mask = collate(ROWS, "padding_free", MAX_LEN, PAD, "sdpa")["attention_mask"][0, 0]
    assert mask.dtype == torch.bool
    first, second, third = _row_spans(ROWS)
    for q in second:
        for k in first:
            assert not mask[q, k], f"token {q} of row 2 sees token {k} of row 1"
    for q in third:
        for k in list(first) + list(second):
            assert not mask[q, k]
    for span in (first, second, third):
        for q in span:
            for k in span:
                assert bool(mask[q, k]) == (k <= q), (q, k)


def test_eager_block_diagonal_mask_holds_the_float32_minimum_across_rows():
    mask = collate(ROWS, "padding_free", MAX_LEN, PAD, "eager")["attention_mask"][0, 0]
    assert mask.dtype == torch.float32
    lowest = torch.finfo(torch.float32).min
    first, second, _ = _row_spans(ROWS)
    for q in second:
        for k in first:
            assert mask[q, k].item() == lowest
    for q in second:
        for k in second:
            assert mask[q, k].item() == (0.0 if k <= q else lowest)
    # eager and sdpa agree on which positions are visible
    allowed = block_diagonal_mask([0, 0, 0, 1, 1, 1, 1, 1, 2, 2], "sdpa")[0, 0]
    assert torch.equal(mask == 0, allowed)


@pytest.mark.parametrize("padding", ["max_length", "longest"])
def test_padded_labels_are_next_tokens_with_ignore_on_last_token_and_padding(padding):
    batch = collate(ROWS, padding, MAX_LEN, PAD, "sdpa")
    labels = batch["labels"].tolist()
    width = batch["input_ids"].shape[1]
    assert labels[0] == [12, 13, IGNORE] + [IGNORE] * (width - 3)
    assert labels[1] == [22, 23, 24, 25, IGNORE] + [IGNORE] * (width - 5)
    assert labels[2] == [32, IGNORE] + [IGNORE] * (width - 2)
    padding_positions = batch["attention_mask"] == 0
    assert (batch["labels"][padding_positions] == IGNORE).all()


def test_packed_labels_never_predict_across_a_row_boundary():
    labels = collate(ROWS, "padding_free", MAX_LEN, PAD, "sdpa")["labels"].tolist()
    assert labels == [[12, 13, IGNORE, 22, 23, 24, 25, IGNORE, 32, IGNORE]]


@pytest.mark.parametrize("padding", ["max_length", "longest"])
def test_slots_map_tokens_to_rows_and_padding_to_minus_one(padding):
    batch = collate(ROWS, padding, MAX_LEN, PAD, "sdpa")
    slots = batch["slots"]
    for i, row in enumerate(ROWS):
        assert slots[i, :len(row)].tolist() == [i] * len(row)
        assert (slots[i, len(row):] == -1).all()
    assert torch.equal(slots == -1, batch["attention_mask"] == 0)


def test_packed_slots():
    assert collate(ROWS, "padding_free", MAX_LEN, PAD, "sdpa")["slots"].tolist() == [[0, 0, 0, 1, 1, 1, 1, 1, 2, 2]]


@pytest.mark.parametrize("padding", ["max_length", "longest", "padding_free"])
def test_real_tokens_counts_no_padding(padding):
    assert collate(ROWS, padding, MAX_LEN, PAD, "sdpa")["real_tokens"] == 10


def test_step_plan_splits_rows_into_steps_and_micro_batches():
    plan = step_plan(list(range(8)), effective_batch=4, micro=2)
    assert plan == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert step_plan(list(range(8)), effective_batch=4, micro=4) == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    assert step_plan(list(range(8)), effective_batch=4, micro=1) == [[[0], [1], [2], [3]], [[4], [5], [6], [7]]]


def test_step_plan_drops_an_incomplete_last_step():
    plan = step_plan(list(range(10)), effective_batch=4, micro=2)
    assert len(plan) == 2
    assert all(sum(len(m) for m in step) == 4 for step in plan)
    assert step_plan([1, 2, 3], effective_batch=4, micro=2) == []


def test_group_by_length_keeps_the_same_rows_and_orders_them_by_length():
    lengths = [5, 40, 12, 7, 33, 20, 9, 1]
    ids = list(range(len(lengths)))
    ordered = group_by_length(ids, lengths, micro=2)
    assert sorted(ordered) == ids
    assert [lengths[r] for r in ordered] == sorted(lengths, reverse=True)


def test_group_by_length_stays_within_megabatches():
    lengths = list(range(250))  # rising: each megabatch of 50 x micro sorts on its own
    ordered = group_by_length(list(range(250)), lengths, micro=2)
    assert sorted(ordered) == list(range(250))
    assert set(ordered[:100]) == set(range(100))
    assert set(ordered[100:200]) == set(range(100, 200))
    assert ordered[0] == 99 and ordered[100] == 199
