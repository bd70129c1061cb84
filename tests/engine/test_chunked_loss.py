"""The chunked cross-entropy (knob `chunked_cross_entropy`, autotune's own loop): per-row losses and
gradients equal to the full-logits loss within fp32 tolerance, and a lower peak memory at the same
micro-batch, read by autotune's own memory probe in a fresh child process per variant."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autotune.engine.batching import collate  # noqa: E402
from autotune.engine.train import Engine  # noqa: E402

VOCAB, MAX_LEN, MICRO = 32768, 1024, 2


def _model(vocab: int = 512, tied: bool = False):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("qwen2", vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                  max_position_embeddings=MAX_LEN, tie_word_embeddings=tied)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)


def _knobs(chunked: bool) -> Any:
    from autotune.config.knobs import Knobs

    return Knobs(padding="longest", attn_implementation="sdpa", chunked_cross_entropy=chunked)


def _batch(vocab: int, lengths: list[int], max_len: int) -> dict:
    generator = torch.Generator().manual_seed(1)
    rows = [torch.randint(1, vocab, (n,), generator=generator).tolist() for n in lengths]
    return collate(rows, "longest", max_len, 0, "sdpa")


@pytest.mark.parametrize("tied", [False, True])
def test_per_row_losses_and_gradients_equal_the_full_logits_loss(tied):
    batch = _batch(512, [40, 17, 29], 64)
    readings = {}
    for chunked in (False, True):
        engine = Engine(_model(tied=tied), _knobs(chunked), "cpu")
        if chunked:  # the head's weights are still the model's, tied to the embeddings where the model ties them
            assert (engine.head.weight is engine.model.get_input_embeddings().weight) is tied
        loss, token_losses, labels = engine.micro_step(batch, int((batch["labels"] != -100).sum()))
        rows = Engine.row_losses(token_losses, labels, batch, (0, 1, 2))
        grads = {name: p.grad.clone() for name, p in engine.model.named_parameters() if p.grad is not None}
        readings[chunked] = (float(loss), rows, grads)
    (loss_a, rows_a, grads_a), (loss_b, rows_b, grads_b) = readings[False], readings[True]
    assert loss_b == pytest.approx(loss_a, rel=1e-5)
    assert rows_b.keys() == rows_a.keys() and all(rows_b[r] == pytest.approx(rows_a[r], rel=1e-5) for r in rows_a)
    assert grads_b.keys() == grads_a.keys()
    for name, grad in grads_a.items():
        assert torch.allclose(grads_b[name], grad, rtol=1e-4, atol=1e-6), name


def test_a_chunk_smaller_than_the_rows_is_what_runs():
    from autotune.engine.chunked_loss import chunk_tokens

    # The memory test below needs its rows to span several chunks, or there is nothing to save.
    assert chunk_tokens(VOCAB) < MICRO * MAX_LEN
    assert chunk_tokens(151_936) >= 16


CHILD = """
import json, sys, torch
sys.path.insert(0, {root!r})
from tests.engine.test_chunked_loss import _model, _knobs, _batch, VOCAB, MAX_LEN, MICRO
from autotune.probes import memory
from autotune.engine.train import Engine
chunked = {chunked}
engine = Engine(_model(VOCAB), _knobs(chunked), "cpu")
batch = _batch(VOCAB, [MAX_LEN] * MICRO, MAX_LEN)
targets = int((batch["labels"] != -100).sum())
engine.micro_step(batch, targets)  # the first step allocates what every step reuses
engine.optimizer_step()
memory.reset_peak("cpu")
engine.micro_step(batch, targets)
print(json.dumps(memory.read_peak("cpu")))
"""


def _peak(chunked: bool) -> int:
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=root, chunked=chunked)], capture_output=True,
                         text=True, timeout=600, check=True, env={"OMP_NUM_THREADS": "1", "PATH": ""}, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])["bytes"]


def test_the_chunked_loss_peaks_lower_than_the_standard_loss_at_the_same_micro_batch():
    from autotune.probes.memory import read_peak

    if read_peak("cpu")["bytes"] <= 0:
        pytest.skip("this system reports no peak memory for a process")
    logits_bytes = MICRO * MAX_LEN * VOCAB * 4
    standard, chunked = _peak(False), _peak(True)
    # The standard loss holds the full logits, their log-softmax and the gradient at once; the chunked
    # one holds one chunk at a time: it saves more than one full logits tensor.
    assert chunked < standard - logits_bytes, (standard, chunked, logits_bytes)
