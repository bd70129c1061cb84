"""Knobs in the names the installed TRL / transformers / peft take.

One mapping serves the trials (which train inside `trl.SFTTrainer`) and the files handed over, so
what is exported is what was measured. Each knob's own mapping is in its table entry
(config/knobs/table.py, functions in config/knobs/mapping.py); this module applies them, with the
installed `SFTConfig`'s field names. A knob's identity in autotune (and in knowledge bases) stays
its table name.
"""

from __future__ import annotations

import dataclasses
import functools
from ...config.knobs import TABLE, Knobs, SftContext
from ...config.types import JsonObject, KnobView
from ...config.knobs.mapping import ALLOC_CONF, QUANT_4BIT, checkpointing_name, sampling_fields  # noqa: F401

# The adapter every LoRA trial trains; exported as it is, so `trl sft` trains the same one
# (its own defaults are dropout 0.05 on q_proj/v_proj only).
LORA_SETTINGS: JsonObject = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}


@functools.lru_cache(maxsize=1)
def sft_fields() -> frozenset[str]:
    """The field names of the installed `trl.SFTConfig` (imports trl: call where it is installed)."""
    from trl import SFTConfig

    return frozenset(field.name for field in dataclasses.fields(SFTConfig))


def knob_fields(knobs: Knobs, max_len: int, effective_batch: int, *, cpu: bool = False,
                sampling: str = "random", fields: frozenset[str] | None = None) -> JsonObject:
    """The `SFTConfig` keyword arguments that set these knobs (each table entry's `sft` mapping), every
    one explicit: TRL defaults to bf16 and checkpointing on, and transformers pins memory by default, so
    an omitted False would train something else than what was measured.

    `cpu`: the config runs on a CPU (`use_cpu`, which bf16 there needs). A knob added later than a
    config was recorded means its naive value (off).

    The result is `SFTConfig`'s keyword arguments (and a `trl sft` file's fields): JSON values by the
    installed library's names.
    """
    fields = sft_fields() if fields is None else fields
    context = SftContext(max_len=max_len, effective_batch=effective_batch, fields=fields, sampling=sampling)
    view = knobs.to_dict()
    args: JsonObject = {}
    for knob in TABLE:
        if knob.sft is not None:
            args.update(knob.sft(knob.value_of(view), view, context))
    if cpu:
        args["use_cpu"] = True
    # A trl without a later field still runs the configs that leave it off.
    for knob in TABLE:
        if knob.sft_later and knob.name not in fields and args.get(knob.name) in (False, None):
            args.pop(knob.name, None)
    unknown = sorted(set(args) - fields)
    if unknown:
        from ...util.errors import AutotuneError

        raise AutotuneError(f"the installed trl.SFTConfig has no field {', '.join(unknown)}: "
                            "install trl >= 1.16 (pip install -e .)")
    return args


def model_init_kwargs(knobs: Knobs) -> JsonObject:
    """`from_pretrained` arguments (SFTConfig's `model_init_kwargs`), each table entry's `load` mapping.
    Trials load fp32 master weights (mixed precision is autocast) unless a LoRA job's frozen base is
    loaded in bf16 (`dtype`); transformers' own default ("auto") would load bf16 weights."""
    view = knobs.to_dict()
    kwargs: JsonObject = {}
    for knob in TABLE:
        if knob.load is not None:
            kwargs.update(knob.load(knob.value_of(view), view))
    return kwargs


def environment(knobs: Knobs) -> dict[str, str]:
    """The environment a config runs in (set before CUDA starts): its allocator settings."""
    view: KnobView = knobs.to_dict()
    env: dict[str, str] = {}
    for knob in TABLE:
        if knob.env is not None:
            env.update(knob.env(knob.value_of(view)))
    return env


def outside_trl(knobs: Knobs) -> list[str]:
    """Settings of `knobs` that `trl sft --config` cannot take from the file, each as a line the user reads."""
    lines = [f"run it with {name}={value} in the environment" for name, value in environment(knobs).items()]
    view: KnobView = knobs.to_dict()
    for knob in TABLE:
        if knob.outside is not None:
            lines += knob.outside(knob.value_of(view))
    return lines


def lora_kwargs(target_modules: list[str] | None = None) -> JsonObject:
    """`peft.LoraConfig` arguments of the adapter the trials trained; `target_modules`: the module names
    "all-linear" resolved to on this model (what a file hands over, exact whatever peft's shorthand does)."""
    settings = dict(LORA_SETTINGS, target_modules=target_modules) if target_modules else LORA_SETTINGS
    return {"task_type": "CAUSAL_LM", **settings}


# `trl sft` reads the model's load arguments and the adapter from its ModelConfig, under these names.
MODEL_KEYS = ("model_name_or_path", "dtype", "attn_implementation", "use_peft", "lora_r", "lora_alpha",
              "lora_dropout", "lora_target_modules", "lora_task_type", "load_in_4bit", "bnb_4bit_quant_type")
# ...and the dataset from its ScriptArguments / DatasetMixtureConfig.
DATA_KEYS = ("dataset_name", "dataset_config", "datasets")


def model_fields(knobs: Knobs) -> JsonObject:
    """`model_init_kwargs` as `trl sft`'s ModelConfig fields (its script passes them to from_pretrained,
    a 4-bit base as a BitsAndBytesConfig it builds from `load_in_4bit` and `bnb_4bit_quant_type`)."""
    fields = dict(model_init_kwargs(knobs))
    view = knobs.to_dict()
    for knob in TABLE:
        if knob.trl_model is not None:
            fields.update(knob.trl_model(knob.value_of(view), view))
    return fields


def lora_fields(target_modules: list[str]) -> JsonObject:
    """The trials' adapter as `trl sft` fields: without them it trains peft's defaults (dropout 0.05,
    q_proj/v_proj only), another adapter than the one measured."""
    return {"use_peft": True, "lora_r": LORA_SETTINGS["r"], "lora_alpha": LORA_SETTINGS["lora_alpha"],
            "lora_dropout": LORA_SETTINGS["lora_dropout"], "lora_target_modules": list(target_modules),
            "lora_task_type": "CAUSAL_LM"}
