"""How knobs map onto the names the installed TRL / transformers take: `SFTConfig` fields,
`from_pretrained` arguments, `trl sft`'s ModelConfig fields, the trial's environment. The table's
entries name these functions; workloads/hf/trl_args.py applies them.

Names are checked against the installed `SFTConfig`'s fields, not one version's: transformers 5.23
renamed `gradient_checkpointing` to `activation_checkpointing`, and 5.2 replaced `group_by_length` by
`train_sampling_strategy`.
"""

from __future__ import annotations

from typing import Any

from ..types import KnobView
from .entry import Fields, SftContext

# The 4-bit base the trials load (QLoRA's recipe): NF4 with bf16 compute, no nested quantisation.
QUANT_4BIT: Fields = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"}
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def checkpointing_name(fields: frozenset[str]) -> str:
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


def sampling_fields(group_by_length: bool, fields: frozenset[str], otherwise: str = "random") -> Fields:
    """Length grouping by the installed name; `otherwise` is the strategy when it is off (trials
    use "sequential" so every trial sees the frame's rows in the frame's order)."""
    if "train_sampling_strategy" in fields:
        return {"train_sampling_strategy": "group_by_length" if group_by_length else otherwise}
    return {"group_by_length": group_by_length}


def micro_batch(value: Any, knobs: KnobView, context: SftContext) -> Fields:
    micro = int(value)
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": context.effective_batch // micro}


def precision(value: Any, knobs: KnobView, context: SftContext) -> Fields:
    return {name: value == name for name in ("bf16", "fp16", "tf32")}


def checkpointing(value: Any, knobs: KnobView, context: SftContext) -> Fields:
    return {checkpointing_name(context.fields): bool(value)}


def grouping(value: Any, knobs: KnobView, context: SftContext) -> Fields:
    return sampling_fields(bool(value), context.fields, context.sampling)


def padding(value: Any, knobs: KnobView, context: SftContext) -> Fields:
    """Padding-free passes `max_length=None`: TRL (>= 1.0) refuses padding_free without packing when
    it is set, and the rows are truncated to max_len before they reach the trainer."""
    return {"padding_free": value == "padding_free",
            "max_length": None if value == "padding_free" else context.max_len,
            "pad_to_multiple_of": context.max_len if value == "max_length" else None}


def compile_mode(value: Any, knobs: KnobView, context: SftContext) -> Fields:
    # Any mode set turns torch_compile on in TrainingArguments: only with compile on, and "default" as unset.
    return {"torch_compile_mode": value if knobs.get("torch_compile") and value != "default" else None}


def prefetch(value: Any, knobs: KnobView, context: SftContext) -> Fields:
    return {"dataloader_prefetch_factor": int(value) or None}


def attention_load(value: Any, knobs: KnobView) -> Fields:
    """A Hub attention kernel is its repository ("kernels-community/flash-attn2"), the name transformers
    and `trl sft --attn_implementation` take."""
    return {"attn_implementation": value}


def dtype_load(value: Any, knobs: KnobView) -> Fields:
    return {"dtype": "bfloat16" if knobs.get("load_in_4bit") else value}  # QLoRA computes in bf16


def four_bit_model(value: Any, knobs: KnobView) -> Fields:
    """trl sft builds a BitsAndBytesConfig from these ModelConfig fields."""
    return {"load_in_4bit": True, "bnb_4bit_quant_type": QUANT_4BIT["bnb_4bit_quant_type"]} if value else {}


def allocator_env(value: Any) -> dict[str, str]:
    return {ALLOC_CONF: "expandable_segments:True"} if value else {}


def float8_outside(value: Any) -> list[str]:
    if not value:
        return []
    return ["before training: torchao.float8.convert_to_float8_training(model, module_filter_fn=lambda m, "
            "name: name != 'lm_head') (no trl sft field does this)"]
