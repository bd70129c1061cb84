"""A trial's edits against what the hooks saw the user's script do: a model compiled under the hooks,
and each kind of unapplied edit named in the trial's reason."""

from __future__ import annotations

import shutil

import pytest
import torch

from autotune.workloads.script.runner import Meter, _install
from autotune.workloads.script.checks import Observed, mismatch, observed

SEEN: Observed = {"rows_per_micro_batch": 4, "micro_batches_per_step": 2, "compute_dtypes": ["float32"],
                  "compiled": False, "gradient_checkpointing": True, "attn_implementation": "eager",
                  "widths": [256, 256], "all_widths_max": True, "packed": False, "length_jumps": None}


@pytest.mark.parametrize("expect, reason", [
    ({"per_device_train_batch_size": 8}, "did not apply per_device_train_batch_size=8: it ran 4 rows per micro-batch"),
    ({"micro_batches_per_step": 1}, "(1 micro-batches per step): it ran 2"),
    ({"precision": "bf16"}, "did not apply precision=bf16: its model computed in float32"),
    ({"torch_compile": True}, "did not apply torch_compile=True: nothing was compiled"),
    ({"gradient_checkpointing": False}, "its model checkpoints activations"),
    ({"attn_implementation": "sdpa"}, "its model runs eager attention"),
    ({"padding": "longest"}, "every batch was padded to 256 tokens"),
    ({"padding": "padding_free"}, "padded, one per batch row"),
])
def test_an_edit_the_run_does_not_show_is_named(expect, reason):
    assert reason in mismatch(expect, SEEN, 256)


def test_edits_the_run_shows_pass():
    assert mismatch({"per_device_train_batch_size": 4, "micro_batches_per_step": 2, "precision": "fp32",
                     "padding": "max_length", "gradient_checkpointing": True}, SEEN, 256) is None


# inductor: the C++ code torch.compile makes by default (it needs a C++ compiler on the CPU).
@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.skipif(
    not shutil.which("g++") and not shutil.which("c++"), reason="inductor needs a C++ compiler (g++) on a CPU"))])
def test_a_model_compiles_under_the_hooks_and_is_seen_compiled(backend):
    torch._dynamo.reset()
    meter = Meter(warmup=0, measure=1)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
    compiled = torch.compile(model, backend=backend)
    handles = _install(meter)
    try:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            compiled(torch.randint(0, 16, (3, 5))).sum().backward()
            optimizer.step()
    except BaseException as error:   # MeasurementDone ends the run as it ends a script
        assert type(error).__name__ == "MeasurementDone"
    finally:
        for handle in handles:
            handle.remove()
    seen = observed(meter)
    assert seen["compiled"] and seen["rows_per_micro_batch"] == 3 and seen["micro_batches_per_step"] == 1
    assert mismatch({"torch_compile": True, "per_device_train_batch_size": 3}, seen, None) is None
