"""The steps after a script trial's measured ones, on their own (no script): worst-case batches as the
script's DataLoader hands them over, and where a step's time goes from the hook marks."""

from __future__ import annotations

import time

import torch

from autotune.workloads.script.stages import Phases, WorstCase, timed_backward


def test_a_loader_batch_becomes_max_len_rows_with_labels_and_mask_to_match():
    worst = WorstCase(16)
    worst.vocab = 50
    ids = torch.randint(1, 50, (2, 10))
    batch = {"input_ids": ids, "attention_mask": torch.ones(2, 10, dtype=torch.long),
             "labels": ids.masked_fill(torch.rand(2, 10) > 0.5, -100), "weights": torch.rand(2, 10)}
    out = worst.widen(batch)
    assert out["input_ids"].shape == (2, 16) and torch.equal(out["labels"], out["input_ids"])
    assert bool((out["attention_mask"] == 1).all()) and bool((out["input_ids"] >= 1).all())
    assert out["weights"] is batch["weights"]            # not token ids: left as the script made it
    x, y = worst.widen((ids, ids.roll(1, 1)))             # nanoGPT-style (X, Y) pairs
    assert x.shape == y.shape == (2, 16)
    assert worst.widen({"input_ids": torch.zeros(2, 16, dtype=torch.long)})["input_ids"].shape == (2, 16)
    from transformers import BatchEncoding   # what transformers' collators hand over

    encoded = worst.widen(BatchEncoding({"input_ids": ids, "labels": ids}))
    assert encoded["input_ids"].shape == encoded["labels"].shape == (2, 16)


def test_the_ceiling_counts_only_when_every_model_call_was_max_len_wide():
    worst = WorstCase(16)
    model = torch.nn.Embedding(50, 4)
    worst.begin(model)
    try:
        loader = torch.utils.data.DataLoader([list(range(1, 9))] * 4, batch_size=2,
                                             collate_fn=lambda rows: {"input_ids": torch.tensor(rows)})
        widths = [next(iter(loader))["input_ids"].shape[1]]
        model(torch.zeros(2, 8, dtype=torch.long))        # a batch that came another way: too narrow
        assert not worst.complete
        worst.restart()
        model(worst.widen({"input_ids": torch.zeros(2, 8, dtype=torch.long)})["input_ids"])
        assert worst.complete and worst.rows == 2
    finally:
        worst.end()
    assert widths == [16]
    assert next(iter(loader))["input_ids"].shape[1] == 8  # the loader is the script's own again


class _Meter:
    def __init__(self) -> None:
        self.phases = Phases(lambda: None)


def test_phases_split_a_step_into_data_forward_backward_and_optimizer():
    meter = _Meter()
    undo = timed_backward(meter)
    phases = meter.phases
    try:
        weight = torch.ones(3, requires_grad=True)
        start = time.perf_counter()
        phases.begin()
        time.sleep(0.02)                    # the loader
        phases.forward_start()
        loss = (weight * 2).sum()
        time.sleep(0.01)
        phases.forward_end()
        loss.backward()
        phases.optimizer_start()
        time.sleep(0.03)
        phases.optimizer_end(time.perf_counter() - start)
    finally:
        undo.remove()
    totals = phases.totals()
    assert totals["steps"] == 1 and weight.grad is not None
    assert totals["data_wait"] >= 0.02 and totals["optimizer"] >= 0.03 and totals["backward"] > 0
    assert sum(totals[p] for p in ("data_wait", "forward", "backward", "optimizer")) <= totals["step_total"] * 1.05


def test_a_worst_case_peak_over_the_limit_ends_the_trial_oom():
    import pytest

    from autotune.engine.train import TrialFault
    from autotune.workloads.script.stages import ceiling

    job = {"max_len": 256, "mem_limit": 2**30, "mem_margin": 0.1}
    assert ceiling({"kind": "cpu_peak_rss", "bytes": 2**29}, "cpu", job, 4)["fits"]
    with pytest.raises(TrialFault) as fault:
        ceiling({"kind": "cpu_peak_rss", "bytes": 2**30}, "cpu", job, 4)
    assert fault.value.state == "oom" and "worst-case batch (4 x 256 tokens) peaks at 1.00 GiB" in fault.value.reason
