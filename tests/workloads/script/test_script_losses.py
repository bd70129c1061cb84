"""Parity for scripts whose model is not called with `labels`: per-row losses from the loss the script
computes (targets passed positionally, a cross_entropy on the logits, a compiled model's returned
loss), read with dropout off for the two parity steps and the script's dropout back for the timed ones."""

from __future__ import annotations

import types

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from autotune.probes import parity
from autotune.workloads.script.runner import Meter, _install

VOCAB, LENGTH, ROWS = 64, 16, 4


class GPT(torch.nn.Module):
    """nanoGPT's interface on a GPT-2 with dropout 0.1: forward(idx, targets) -> (logits, loss)."""

    def __init__(self, nll: bool = False) -> None:
        super().__init__()
        config = AutoConfig.for_model("gpt2", vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=1, n_head=2,
                                      resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, bos_token_id=0, eos_token_id=0)
        self.transformer = AutoModelForCausalLM.from_config(config)
        self.nll = nll

    def forward(self, idx, targets=None):
        logits = self.transformer(input_ids=idx).logits
        if targets is None:
            return logits
        if self.nll:   # a loss the hooks do not see computed: only the returned value says how it aligns
            log_p = torch.log_softmax(logits, -1)
            return logits, torch.nn.functional.nll_loss(log_p.view(-1, VOCAB), targets.view(-1))
        return logits, torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def train(micro: int, loss_in: str = "model") -> Meter:
    """The two parity steps, each one effective batch of ROWS rows in micro-batches of `micro`."""
    torch.manual_seed(0)
    model = GPT(nll=loss_in == "returned")
    data = torch.randint(0, VOCAB, (2, ROWS, LENGTH + 1), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    meter = Meter(warmup=0, measure=1)
    handles = _install(meter)
    try:
        for step in range(2):
            for start in range(0, ROWS, micro):
                x, y = (data[step, start:start + micro, :-1].contiguous(),
                        data[step, start:start + micro, 1:].contiguous())
                if loss_in in ("model", "returned"):
                    _, loss = model(x, y)
                elif loss_in == "loop":
                    loss = torch.nn.CrossEntropyLoss()(model(x).reshape(-1, VOCAB), y.reshape(-1))
                else:
                    loss = (model(x).float() ** 2).mean()     # no cross-entropy the hooks can pair with rows
                (loss * micro / ROWS).backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        for handle in handles:
            handle.remove()
    meter.model = model
    return meter


@pytest.mark.parametrize("loss_in, route", [("model", "cross_entropy in the model"),
                                            ("loop", "cross_entropy on the logits"), ("returned", "returned loss")])
def test_a_micro_batch_change_passes_parity_on_a_gpt2_with_dropout(loss_in, route):
    base, split = train(1, loss_in), train(2, loss_in)
    assert base.parity is not None and len(base.parity["step1"]) == ROWS and split.reader.route == route
    result = parity.compare(base.parity, split.parity, parity.tolerance("fp32", "fp32"))
    assert result["ok"], result["reason"]
    # Dropout is back for the timed steps: the model's own 0.1, as the script set it.
    assert {m.p for m in base.model.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}


def test_a_loss_the_hooks_cannot_read_says_so():
    meter = train(2, "none")
    assert meter.parity is None
    assert meter.reader.why_not.startswith("parity not checked: the script's model gets no labels or targets")


def test_trls_fused_head_log_probs_are_the_per_row_losses():
    # TRL's SFTTrainer calls model(..., labels=..., fused_lm_head=True): per-token log-probs, no logits.
    from autotune.workloads.script.rows import row_keys
    from autotune.workloads.script.losses import LossReader

    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    log_probs = -torch.tensor([[1.0, 2.0, 3.0], [4.0, 6.0, 0.0]])
    output = types.SimpleNamespace(log_probs=log_probs, label_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]))
    reader = LossReader()
    reader.begin()
    reader.end(1, row_keys(ids, mask, None), ids, (), {"input_ids": ids, "labels": ids}, output)
    assert reader.route == "log_probs" and sorted(reader.losses["step1"].values()) == [2.0, 5.0]
