"""Model FLOPs of an optimizer step, and MFU / HFU.

Convention (every report that shows MFU uses this one):

- Matmul weights: every ``nn.Linear`` weight that takes part in the step, counted per token:
  2 FLOPs forward, 2 for the activation gradient, 2 for the weight gradient. A frozen weight gets no
  weight gradient, so it costs 4 and a trainable one 6 (full fine-tuning: 6·N; LoRA:
  4·N_frozen + 6·N_lora). A tied ``lm_head`` is a matmul once; the embedding lookup is not a matmul.
  Biases, norms, activations, softmax and the loss are left out (they are not matmuls and are small).
- Attention, per row of real length l: 12·L·H·Q·l² (QKᵀ and AV: 4·L·H·Q·l² forward, twice that
  backward). The causal half is not discounted, as in PaLM appendix B and nanoGPT's estimate_mfu.
- Only real tokens count: padding is waste, so a padded batch does not raise MFU.
- "model" FLOPs never count recomputation. "hardware" FLOPs add one more forward when gradient
  checkpointing is on (2 per matmul weight per token, plus 4·L·H·Q·l² per row): the usual 8·N HFU
  convention (Korthikanti et al. 2022). It is an upper bound of what the device really runs: HF
  checkpoints the decoder layers only (``lm_head`` is not recomputed) and PyTorch's non-reentrant
  checkpoint stops recomputing once the saved tensors are back (the last matmul of each layer, e.g.
  ``down_proj``, is skipped).

MFU = model FLOPs / seconds / measured peak FLOP/s; HFU the same with hardware FLOPs.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def _idle_linears(model: torch.nn.Module) -> set[int]:
    """ids of Linear modules that exist but do not run: adapters that are not active, disabled or
    merged into the base weight, and the copy a peft modules_to_save wrapper does not call.

    Duck-typed on peft's attribute names (LoraLayer.lora_A / lora_B, ModulesToSaveWrapper
    .original_module / .modules_to_save) so that this module does not import peft.
    """
    idle: set[int] = set()
    for module in model.modules():
        lora_a, lora_b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
        copies, original = getattr(module, "modules_to_save", None), getattr(module, "original_module", None)
        is_lora = isinstance(lora_a, torch.nn.ModuleDict) and isinstance(lora_b, torch.nn.ModuleDict)
        is_wrapper = isinstance(copies, torch.nn.ModuleDict) and isinstance(original, torch.nn.Module)
        if not (is_lora or is_wrapper):
            continue  # read adapter state only here: on an HF model the same names are methods
        off = bool(module.disable_adapters)
        active = list(module.active_adapters)
        if is_lora:
            # A merged adapter runs inside the base weight's matmul, not in its own.
            running = set() if off or module.merged else set(active)
            for bank in (lora_a, lora_b):
                for name, adapter in bank.items():
                    if name not in running:
                        idle.update(id(sub) for sub in adapter.modules())
        if is_wrapper:
            # Mirrors ModulesToSaveWrapper.forward: the first active adapter's copy, else the original.
            used = original if off or not active or active[0] not in copies else copies[active[0]]
            for candidate in (original, *copies.values()):
                if candidate is not used:
                    idle.update(id(sub) for sub in candidate.modules())
    return idle


def matmul_params(model: torch.nn.Module, skip: Iterable[torch.nn.Module] = ()) -> dict[str, int]:
    """Weights that take part in a matrix product per token, split by whether they get a gradient.

    Walks modules, not parameters: a tied lm_head shares its tensor with the embedding, and
    ``named_parameters`` would report it once under the embedding, which is a lookup, not a matmul.
    `skip`: subtrees counted elsewhere (a VLM's vision tower and projector run per image, not per token).
    """
    idle = _idle_linears(model)
    for root in skip:
        idle.update(id(sub) for sub in root.modules())
    counts = {"frozen": 0, "trainable": 0}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module) not in idle:
            counts["trainable" if module.weight.requires_grad else "frozen"] += module.weight.numel()
    return counts


def attention_shape(config: object) -> tuple[int, int, int]:
    """(layers, query heads, head dim) of an HF config; the text part of a composite (VLM) config."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = int(text.num_attention_heads)
    # Some configs carry head_dim=None rather than no attribute (the modeling code treats both alike).
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return int(text.num_hidden_layers), heads, int(head_dim)


def step_flops(params: dict[str, int], attention: tuple[int, int, int], row_lengths: Iterable[int],
               gradient_checkpointing: bool) -> dict[str, float]:
    """FLOPs of one optimizer step over rows of these real (unpadded) lengths: {"model", "hardware"}."""
    lengths = [int(n) for n in row_lengths]
    if any(n < 0 for n in lengths):
        raise ValueError(f"row lengths must be >= 0, got {lengths}")
    frozen, trainable = int(params.get("frozen", 0)), int(params.get("trainable", 0))
    if frozen < 0 or trainable < 0:
        raise ValueError(f"parameter counts must be >= 0, got {params}")
    layers, heads, head_dim = attention
    tokens = sum(lengths)
    # Attention grows with each row's own length squared: rows packed or padded together do not
    # attend across rows, so the cost is a sum over rows, not (rows × longest²).
    squares = sum(n * n for n in lengths)
    attention_forward = 4.0 * layers * heads * head_dim * squares
    model = (4.0 * frozen + 6.0 * trainable) * tokens + 3.0 * attention_forward
    recompute = 2.0 * (frozen + trainable) * tokens + attention_forward if gradient_checkpointing else 0.0
    return {"model": model, "hardware": model + recompute}


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: share of the device's measured peak spent on the model's own FLOPs."""
    if not seconds > 0:
        raise ValueError(f"utilisation needs a positive step time, got {seconds!r} s")
    if not peak_flops_per_s > 0:
        raise ValueError(f"utilisation needs a positive measured peak, got {peak_flops_per_s!r} FLOP/s")
    if flops < 0:
        raise ValueError(f"FLOPs must be >= 0, got {flops!r}")
    return flops / seconds / peak_flops_per_s


def hfu(flops: float, seconds: float, peak_flops_per_s: float) -> float:
    """Hardware FLOPs utilisation: as mfu, given step_flops(...)["hardware"] (recomputation included)."""
    return mfu(flops, seconds, peak_flops_per_s)
