"""Parity by row identity on a script's own loop, read through the trial hooks in this process: an
order-only change (rows sorted by length within each step) and a micro-batch split are kept and named;
a "grouping" that drops rows, a truncation and another objective are refused with what they did; fresh
random windows (nanoGPT's get_batch under another batch shape) are judged statistically."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from autotune.probes import parity, row_parity
from autotune.workloads.script.runner import MeasurementDone, Meter, _install

VOCAB, EFFECTIVE, STEPS = 64, 8, 4
TOL = parity.tolerance("fp32", "fp32")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model("qwen2", vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, use_cache=False)
    return AutoModelForCausalLM.from_config(config)


def _rows(count: int = EFFECTIVE * STEPS) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(1, VOCAB) for _ in range(rng.choice((4, 6, 10, 16)))] for _ in range(count)]


def _hooked(loop) -> Meter:
    """`loop(model)` run under the trial hooks, ended as a trial ends it: after two parity steps, one
    warm-up and one measured step."""
    meter = Meter(warmup=1, measure=1)
    handles = _install(meter)
    try:
        loop(_model())
    except MeasurementDone:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return meter


def plain(micro: int = 1, group: bool = False, decoy: bool = False, cut: int = 0, smoothing: float = 0.0) -> Meter:
    """A plain loop over fixed rows, padded to the longest of each micro-batch, the loss a token mean per
    micro-batch. `group`: each step's rows sorted by length; `decoy`: sorted, with the shortest row swapped
    for a second copy of the longest; `cut`: rows truncated to that many tokens; `smoothing`: label smoothing."""
    def loop(model: torch.nn.Module) -> None:
        rows = _rows()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        for step in range(STEPS):
            chunk = rows[step * EFFECTIVE:(step + 1) * EFFECTIVE]
            if group or decoy:
                chunk = sorted(chunk, key=len, reverse=True)
            if decoy:
                chunk = chunk[:1] + chunk[:-1]
            if cut:
                chunk = [r[:cut] for r in chunk]
            for start in range(0, EFFECTIVE, micro):
                batch = chunk[start:start + micro]
                width = max(len(r) for r in batch)
                ids = torch.zeros(len(batch), width, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for i, r in enumerate(batch):
                    ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
                logits = model(input_ids=ids, attention_mask=mask).logits
                labels = ids.masked_fill(mask == 0, -100)
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1),
                                                         label_smoothing=smoothing)
                (loss * micro / EFFECTIVE).backward()
            optimizer.step()
            optimizer.zero_grad()
    return _hooked(loop)


def windows(micro: int) -> Meter:
    """nanoGPT's get_batch: `micro` random windows of a token stream per call. On a GPU the windows a
    draw gives depend on its shape (Philox advances by the call); the CPU's generator does not, so the
    seed here depends on the shape."""
    def loop(model: torch.nn.Module) -> None:
        data = torch.randint(0, VOCAB, (4096,), generator=torch.Generator().manual_seed(1))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        torch.manual_seed(2 + micro)
        for _ in range(STEPS):
            for _ in range(EFFECTIVE // micro):
                ix = torch.randint(len(data) - 17, (micro,))
                x = torch.stack([data[i:i + 16] for i in ix])
                y = torch.stack([data[i + 1:i + 17] for i in ix])
                logits = model(input_ids=x).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
                (loss * micro / EFFECTIVE).backward()
            optimizer.step()
            optimizer.zero_grad()
    return _hooked(loop)


def loaded(sampler: str) -> Meter:
    """A DataLoader over the rows, one row per micro-batch: torch's RandomSampler, transformers'
    LengthGroupedSampler (length grouping by the library), or the script's own sampler class."""
    from torch.utils.data import DataLoader, RandomSampler, Sampler
    from transformers.trainer_pt_utils import LengthGroupedSampler

    class Longest(Sampler):   # the script's own: a claim the hooks do not take on trust
        def __init__(self, rows):
            self.rows = rows

        def __iter__(self):
            return iter(sorted(range(len(self.rows)), key=lambda i: -len(self.rows[i])))

        def __len__(self):
            return len(self.rows)

    def loop(model: torch.nn.Module) -> None:
        rows = _rows(4 * EFFECTIVE * STEPS)   # more than the compared steps see: they see other rows
        order = {"random": lambda: RandomSampler(rows), "own": lambda: Longest(rows),
                 "grouped": lambda: LengthGroupedSampler(1, lengths=[len(r) for r in rows])}[sampler]()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        batches = iter(DataLoader(rows, sampler=order, batch_size=1, collate_fn=lambda b: torch.tensor(b)))
        for _ in range(STEPS):
            for _ in range(EFFECTIVE):
                ids = next(batches)
                logits = model(input_ids=ids).logits
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
                (loss / EFFECTIVE).backward()
            optimizer.step()
            optimizer.zero_grad()
    return _hooked(loop)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # A model this small runs in milliseconds on one thread and far slower fighting for a loaded CPU's cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def baseline(one_thread) -> dict:
    return plain(micro=1).parity_rows


def test_the_rows_of_every_step_are_counted_by_content(baseline):
    assert baseline["steps"] == STEPS and sum(entry[0] for entry in baseline["rows"].values()) == EFFECTIVE * STEPS
    assert [len(micro) for micro in baseline["splits"][0]] == [1] * EFFECTIVE
    assert len(baseline["step1"]) == len(baseline["step2"]) == EFFECTIVE


def test_a_micro_batch_split_is_the_same_rows_with_another_weighting(baseline):
    split = plain(micro=4).parity_rows
    result = row_parity.compare([baseline], split, TOL)
    # The token mean of each micro-batch weighs rows of unequal length otherwise after the split.
    assert result["ok"] and result["kind"] == "weighting", result["reason"]
    assert result["worst"] > TOL and "another weighting" in result["reason"] and "data order" not in result["reason"]
    strict = row_parity.compare([baseline], split, TOL, strict=True)
    assert not strict["ok"] and "strict_parity=true" in strict["reason"]


def test_rows_sorted_by_length_within_each_step_are_an_order_change(baseline):
    result = row_parity.compare([baseline], plain(micro=2, group=True).parity_rows, TOL)
    assert result["ok"], result["reason"]
    assert "data order changed" in result["reason"]


def test_a_grouping_that_drops_a_row_is_refused_as_other_data(baseline):
    result = row_parity.compare([baseline], plain(micro=2, decoy=True).parity_rows, TOL)
    assert not result["ok"] and result["kind"] == "rows"
    assert "dropped" in result["reason"] and "duplicated" in result["reason"], result["reason"]


def test_truncated_rows_are_refused_and_named(baseline):
    result = row_parity.compare([baseline], plain(micro=1, cut=8).parity_rows, TOL)
    assert not result["ok"] and "truncated" in result["reason"], result["reason"]


def test_another_loss_on_the_same_rows_is_another_objective(baseline):
    result = row_parity.compare([baseline], plain(micro=1, smoothing=0.5).parity_rows, TOL)
    assert not result["ok"] and result["kind"] == "objective"
    assert "at the initial weights" in result["reason"] and "trains something else" in result["reason"]


def test_fresh_random_windows_under_another_batch_shape_are_checked_statistically():
    base, other = windows(1).parity_rows, windows(4).parity_rows
    assert not set(base["rows"]) & set(other["rows"])        # nothing to match: the windows are new
    result = row_parity.compare([base], other, TOL)
    assert result["ok"] and result["kind"] == "statistical", result["reason"]
    assert "the check was statistical" in result["reason"]


def test_a_library_sampler_that_hands_out_every_row_once_is_an_order_change():
    base = loaded("random").parity_rows
    assert base["order"] == {"sampler": "RandomSampler", "rows": 4 * EFFECTIVE * STEPS, "permutation": True}
    result = row_parity.compare([base], loaded("grouped").parity_rows, TOL)
    assert result["ok"] and result["kind"] == "order", result["reason"]
    assert result["reason"].startswith("data order changed: the script's own sampler (LengthGroupedSampler) hands "
                                       f"out each of the {4 * EFFECTIVE * STEPS} rows once an epoch")
    # A sampler of the script's own makes no claim: other rows in the compared steps are other data.
    own = row_parity.compare([base], loaded("own").parity_rows, TOL)
    assert not own["ok"] and own["kind"] == "rows", own["reason"]
