"""flops: the FLOP convention checked against torch's FlopCounterMode on tiny random-weight models.

FlopCounterMode counts matmuls (mm, addmm, bmm, sdpa, ...) only, the same scope as the convention:
biases, norms, softmax and the loss add nothing there. Where the counter and the convention differ,
the test names the difference and checks it exactly, rather than widening the tolerance.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch.utils.flop_counter import FlopCounterMode
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from autotune.probes.flops import attention_shape, hfu, matmul_params, mfu, step_flops

SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=512, attn_implementation="eager", use_cache=False)
BATCH, T = 2, 128  # long enough that attention is ~24% of the step: a wrong l² term shows
TOLERANCE = 0.10


def _config(kind: str):
    if kind == "qwen2":
        return Qwen2Config(**SHAPE)  # untied lm_head, biases on q/k/v (addmm)
    return LlamaConfig(**SHAPE, tie_word_embeddings=True)


def _model(kind: str, lora: bool = False, checkpointing: bool = False, **lora_kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    config = _config(kind)
    model = (Qwen2ForCausalLM if kind == "qwen2" else LlamaForCausalLM)(config)
    if lora:
        model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear", lora_dropout=0.0,
                                                 task_type="CAUSAL_LM", **lora_kwargs))
    if checkpointing:
        # transformers 5.24 name; gradient_checkpointing_enable is its deprecated alias (FutureWarning).
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model.train()


def _counted(model: torch.nn.Module, batch: int = BATCH, length: int = T) -> tuple[int, dict[str, int]]:
    """Counted FLOPs of one forward + backward over an unpadded (batch, length) block."""
    ids = torch.randint(0, SHAPE["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(1))
    with FlopCounterMode(display=False) as counter:
        logits = model(input_ids=ids).logits
        # Loss computed here rather than by HF's labels path; either way it is no matmul, so 0 counted.
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        loss.backward()
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    return counter.get_total_flops(), by_op


def _predicted(model: torch.nn.Module, kind: str, checkpointing: bool = False) -> dict[str, float]:
    return step_flops(matmul_params(model), attention_shape(_config(kind)), [T] * BATCH, checkpointing)


def _weights(model: torch.nn.Module, suffix: str) -> int:
    return sum(m.weight.numel() for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and name.endswith(suffix))


def _relative(counted: float, predicted: float) -> float:
    return counted / predicted - 1.0


@pytest.mark.parametrize("kind", ["qwen2", "llama"])  # llama: lm_head tied to the embedding
def test_full_finetune_matches_flop_counter(kind):
    model = _model(kind)
    counted, by_op = _counted(model)
    predicted = _predicted(model, kind)
    assert abs(_relative(counted, predicted["model"])) < TOLERANCE
    # Eager attention is two torch.matmul (bmm) per layer over the full l×l scores, causal half
    # included, as in the convention: the attention term alone is exact.
    layers, heads, head_dim = attention_shape(_config(kind))
    assert by_op["aten.bmm"] == 12 * layers * heads * head_dim * T * T * BATCH
    assert counted == predicted["model"]


def test_lora_matches_flop_counter():
    model = _model("qwen2", lora=True)
    counted, _ = _counted(model)
    predicted = _predicted(model, "qwen2")
    assert abs(_relative(counted, predicted["model"])) < TOLERANCE
    # The one difference (counted 2.7% lower): the embedding output needs no gradient under LoRA, so
    # autograd skips the input gradient of layer 0's q/k/v (base weights and lora_A), 2 FLOPs per
    # weight per token. The convention keeps it (4 per frozen weight everywhere).
    layer0_qkv = sum(_weights(model, f"layers.0.self_attn.{p}_proj.{part}")
                     for p in "qkv" for part in ("base_layer", "lora_A.default"))
    assert counted == predicted["model"] - 2 * layer0_qkv * BATCH * T


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_gradient_checkpointing_counts_as_hardware_not_model_flops(lora):
    plain = _predicted(_model("qwen2", lora=lora), "qwen2")
    model = _model("qwen2", lora=lora, checkpointing=True)
    counted, _ = _counted(model)
    predicted = _predicted(model, "qwen2", checkpointing=True)
    assert predicted["model"] == plain["model"]
    assert predicted["hardware"] > predicted["model"]
    assert abs(_relative(counted, predicted["hardware"])) < TOLERANCE
    # The convention recomputes the whole forward; the device runs less: HF checkpoints the decoder
    # layers only (lm_head is not recomputed), and non-reentrant checkpointing stops recomputing once
    # every saved tensor is back, so the last matmul of each layer (down_proj; under LoRA its lora_B,
    # base_layer runs before lora_A) is skipped. Both are 2 FLOPs per weight per token.
    last = "mlp.down_proj.lora_B.default" if lora else "mlp.down_proj"
    not_recomputed = _weights(model, "lm_head") + _weights(model, last)
    # Under checkpointing HF makes the embedding output require grad, so layer 0 is full price here.
    assert counted == predicted["hardware"] - 2 * not_recomputed * BATCH * T


def test_matmul_params_counts_lora_and_each_linear_once():
    plain = matmul_params(_model("qwen2"))
    c = _config("qwen2")
    kv = c.num_key_value_heads * c.hidden_size // c.num_attention_heads
    per_layer = 2 * c.hidden_size * c.hidden_size + 2 * c.hidden_size * kv + 3 * c.hidden_size * c.intermediate_size
    expected = c.num_hidden_layers * per_layer + c.hidden_size * c.vocab_size  # + lm_head; no embedding
    assert plain == {"frozen": 0, "trainable": expected}
    # Tied lm_head: still one matmul weight, not zero (it is the embedding's tensor) and not two.
    assert matmul_params(_model("llama")) == {"frozen": 0, "trainable": expected}

    model = _model("qwen2", lora=True)
    lora = sum(p.numel() for name, p in model.named_parameters() if ".lora_A." in name or ".lora_B." in name)
    counts = matmul_params(model)
    assert lora > 0
    assert counts["trainable"] == lora
    assert counts["frozen"] + counts["trainable"] == expected + lora


def test_matmul_params_skips_adapters_that_do_not_run():
    model = _model("qwen2", lora=True)
    one = matmul_params(model)
    model.add_adapter("other", LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert matmul_params(model) == one  # "default" stays the active one
    with model.disable_adapter():
        assert matmul_params(model) == {"frozen": one["frozen"], "trainable": 0}

    saved = _model("qwen2", lora=True, modules_to_save=["lm_head"])
    head = _weights(saved, "lm_head.original_module")
    # The trainable copy runs instead of the original: lm_head counted once, as trainable.
    assert matmul_params(saved) == {"frozen": one["frozen"] - head, "trainable": one["trainable"] + head}


def test_attention_shape_reads_head_dim_or_derives_it():
    assert attention_shape(Qwen2Config(**SHAPE)) == (2, 4, 16)  # no head_dim: hidden // heads
    assert attention_shape(LlamaConfig(**SHAPE, head_dim=32)) == (2, 4, 32)


def test_two_short_rows_cost_less_attention_than_one_long():
    params, shape = {"frozen": 0, "trainable": 1000}, (2, 4, 16)
    short, long = step_flops(params, shape, [10, 10], False), step_flops(params, shape, [20], False)
    matmuls = 6 * 1000 * 20  # same 20 tokens either way
    assert long["model"] - matmuls == 2 * (short["model"] - matmuls)  # l²: 400 against 2 × 100
    # The counter agrees on the attention part: bmm FLOPs of (2, 10) are half those of (1, 20).
    model = _model("qwen2")
    assert _counted(model, 2, 10)[1]["aten.bmm"] * 2 == _counted(model, 1, 20)[1]["aten.bmm"]


def test_padding_adds_no_flops():
    params, shape = {"frozen": 500, "trainable": 1000}, (2, 4, 16)
    mask = torch.tensor([[1] * 10 + [0] * 10, [1] * 20])  # a right-padded batch of rows 10 and 20
    real = step_flops(params, shape, mask.sum(-1).tolist(), True)
    assert real == step_flops(params, shape, [10, 20], True)
    assert real == step_flops(params, shape, [10, 20, 0], True)  # an all-padding row is free
    assert real["model"] < step_flops(params, shape, [20, 20], True)["model"]
    with pytest.raises(ValueError):
        step_flops(params, shape, [10, -1], False)


@pytest.mark.parametrize("ratio", [mfu, hfu])
def test_utilisation_rejects_non_positive_time_and_peak(ratio):
    assert ratio(4e12, 2.0, 4e12) == pytest.approx(0.5)
    for seconds, peak in [(0.0, 1e12), (-1.0, 1e12), (1.0, 0.0), (1.0, -1e12), (float("nan"), 1e12)]:
        with pytest.raises(ValueError, match="positive"):
            ratio(1e12, seconds, peak)
