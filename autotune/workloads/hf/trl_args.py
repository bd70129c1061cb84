"""Knobs in the names the installed TRL / transformers / peft take.

One mapping serves the trials (which train inside `trl.SFTTrainer`) and the files handed over, so
what is exported is what was measured. Names are checked against the installed `SFTConfig`'s
fields, not one version's: transformers 5.23 renamed `gradient_checkpointing` to
`activation_checkpointing`, and 5.2 replaced `group_by_length` by `train_sampling_strategy`.
A knob's identity in autotune (and in knowledge bases) stays its catalog name.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

# The adapter every LoRA trial trains; exported as it is, so `trl sft` trains the same one
# (its own defaults are dropout 0.05 on q_proj/v_proj only).
LORA_SETTINGS: dict[str, Any] = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}


@functools.lru_cache(maxsize=1)
def sft_fields() -> frozenset[str]:
    """The field names of the installed `trl.SFTConfig` (imports trl: call where it is installed)."""
    from trl import SFTConfig

    return frozenset(field.name for field in dataclasses.fields(SFTConfig))


def checkpointing_name(fields: frozenset[str]) -> str:
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


def sampling_fields(group_by_length: bool, fields: frozenset[str], otherwise: str = "random") -> dict[str, Any]:
    """Length grouping by the installed name; `otherwise` is the strategy when it is off (trials
    use "sequential" so every trial sees the frame's rows in the frame's order)."""
    if "train_sampling_strategy" in fields:
        return {"train_sampling_strategy": "group_by_length" if group_by_length else otherwise}
    return {"group_by_length": group_by_length}


# SFTConfig fields of knobs added after the first twelve, dropped where unset and not installed.
LATER_FIELDS = frozenset({"use_liger_kernel", "activation_offloading", "torch_compile_mode",
                          "dataloader_persistent_workers", "dataloader_prefetch_factor"})


def knob_fields(knobs: Mapping[str, Any], max_len: int, effective_batch: int, *, cpu: bool = False,
                sampling: str = "random", fields: frozenset[str] | None = None) -> dict[str, Any]:
    """The `SFTConfig` keyword arguments that set these knobs, every one explicit: TRL defaults to
    bf16 and checkpointing on, and transformers pins memory by default, so an omitted False would
    train something else than what was measured.

    `cpu`: the config runs on a CPU (`use_cpu`, which bf16 there needs). Padding-free passes
    `max_length=None`: TRL (>= 1.0) refuses padding_free without packing when it is set, and the
    rows are truncated to max_len before they reach the trainer.
    """
    fields = sft_fields() if fields is None else fields
    micro = int(knobs["per_device_train_batch_size"])
    args: dict[str, Any] = {"per_device_train_batch_size": micro,
                            "gradient_accumulation_steps": effective_batch // micro}
    precision = knobs["precision"]
    for name in ("bf16", "fp16", "tf32"):
        args[name] = precision == name
    args[checkpointing_name(fields)] = bool(knobs["gradient_checkpointing"])
    args["torch_compile"] = bool(knobs["torch_compile"])
    args["dataloader_num_workers"] = int(knobs["dataloader_num_workers"])
    args["dataloader_pin_memory"] = bool(knobs["dataloader_pin_memory"])
    args["optim"] = knobs["optim"]
    # Knobs added later: a config recorded before them has none, and means them off.
    args["use_liger_kernel"] = bool(knobs.get("use_liger_kernel", False))
    args["activation_offloading"] = bool(knobs.get("activation_offloading", False))
    mode = knobs.get("torch_compile_mode", "default")
    # Any mode set turns torch_compile on in TrainingArguments: only with compile on, and "default" as unset.
    args["torch_compile_mode"] = mode if knobs["torch_compile"] and mode != "default" else None
    args["dataloader_persistent_workers"] = bool(knobs.get("dataloader_persistent_workers", False))
    args["dataloader_prefetch_factor"] = int(knobs.get("dataloader_prefetch_factor", 0)) or None
    args.update(sampling_fields(bool(knobs["group_by_length"]), fields, sampling))
    padding = knobs["padding"]
    args["padding_free"] = padding == "padding_free"
    args["max_length"] = None if padding == "padding_free" else max_len
    args["pad_to_multiple_of"] = max_len if padding == "max_length" else None
    if cpu:
        args["use_cpu"] = True
    # A trl without a later field still runs the configs that leave it off.
    for name in LATER_FIELDS - fields:
        if args.get(name) in (False, None):
            args.pop(name, None)
    unknown = sorted(set(args) - fields)
    if unknown:
        from ...util.errors import AutotuneError

        raise AutotuneError(f"the installed trl.SFTConfig has no field {', '.join(unknown)}: "
                            "install trl >= 1.16 (pip install -e .)")
    return args


def model_init_kwargs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """`from_pretrained` arguments (SFTConfig's `model_init_kwargs`). Trials load fp32 master weights
    (mixed precision is autocast) unless a LoRA job's frozen base is loaded in bf16 (`dtype`);
    transformers' own default ("auto") would load bf16 weights. A Hub attention kernel is its repository
    ("kernels-community/flash-attn2"), the name transformers and `trl sft --attn_implementation` take."""
    dtype = "bfloat16" if knobs.get("load_in_4bit") else knobs.get("dtype", "float32")  # QLoRA computes in bf16
    return {"attn_implementation": knobs["attn_implementation"], "dtype": dtype}


# The 4-bit base the trials load (QLoRA's recipe): NF4 with bf16 compute, no nested quantisation.
QUANT_4BIT = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"}
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def environment(knobs: Mapping[str, Any]) -> dict[str, str]:
    """The environment a config runs in (set before CUDA starts): its allocator settings."""
    return {ALLOC_CONF: "expandable_segments:True"} if knobs.get("expandable_segments") else {}


def outside_trl(knobs: Mapping[str, Any]) -> list[str]:
    """Settings of `knobs` that `trl sft --config` cannot take from the file, each as a line the user reads."""
    lines = [f"run it with {name}={value} in the environment" for name, value in environment(knobs).items()]
    if knobs.get("float8_training"):
        lines.append("before training: torchao.float8.convert_to_float8_training(model, module_filter_fn=lambda m, "
                     "name: name != 'lm_head') (no trl sft field does this)")
    return lines


def lora_kwargs(target_modules: list[str] | None = None) -> dict[str, Any]:
    """`peft.LoraConfig` arguments of the adapter the trials trained; `target_modules`: the module names
    "all-linear" resolved to on this model (what a file hands over, exact whatever peft's shorthand does)."""
    settings = dict(LORA_SETTINGS, target_modules=target_modules) if target_modules else LORA_SETTINGS
    return {"task_type": "CAUSAL_LM", **settings}


# `trl sft` reads the model's load arguments and the adapter from its ModelConfig, under these names.
MODEL_KEYS = ("model_name_or_path", "dtype", "attn_implementation", "use_peft", "lora_r", "lora_alpha",
              "lora_dropout", "lora_target_modules", "lora_task_type", "load_in_4bit", "bnb_4bit_quant_type")
# ...and the dataset from its ScriptArguments / DatasetMixtureConfig.
DATA_KEYS = ("dataset_name", "dataset_config", "datasets")


def model_fields(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """`model_init_kwargs` as `trl sft`'s ModelConfig fields (its script passes them to from_pretrained,
    a 4-bit base as a BitsAndBytesConfig it builds from `load_in_4bit` and `bnb_4bit_quant_type`)."""
    fields = dict(model_init_kwargs(knobs))
    if knobs.get("load_in_4bit"):
        fields.update(load_in_4bit=True, bnb_4bit_quant_type=QUANT_4BIT["bnb_4bit_quant_type"])
    return fields


def lora_fields(target_modules: list[str]) -> dict[str, Any]:
    """The trials' adapter as `trl sft` fields: without them it trains peft's defaults (dropout 0.05,
    q_proj/v_proj only), another adapter than the one measured."""
    return {"use_peft": True, "lora_r": LORA_SETTINGS["r"], "lora_alpha": LORA_SETTINGS["lora_alpha"],
            "lora_dropout": LORA_SETTINGS["lora_dropout"], "lora_target_modules": list(target_modules),
            "lora_task_type": "CAUSAL_LM"}
