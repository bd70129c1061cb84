"""Model and tokenizer for a trial: a preset, a hub id or a local folder; random or trained weights; LoRA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..presets import PRESETS, SMOKE_DIMENSIONS, preset_for_architecture
from .data import ByteTokenizer

# Large vocabularies dominate a tiny smoke model's time and memory; smoke keeps the architecture,
# not the vocabulary.
SMOKE_VOCAB = 2048
LORA = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear")


def _config_from_dict(values: dict[str, Any]):
    from transformers import AutoConfig

    values = dict(values)
    return AutoConfig.for_model(values.pop("model_type"), **values)


def resolve_config(job: dict[str, Any]) -> tuple[Any, str]:
    """The model config, and a note on where it came from (smoke shrinks it to a tiny model)."""
    from transformers import AutoConfig

    model = job["model"]
    if model in PRESETS:
        values = dict(PRESETS[model])
        if job.get("smoke"):
            values.update(SMOKE_DIMENSIONS)
            values["vocab_size"] = min(values["vocab_size"], SMOKE_VOCAB)
        return _config_from_dict(values), f"preset {model}"
    try:
        try:
            # A cached config first: an offline machine would otherwise spend ~30 s in hub retries.
            config = AutoConfig.from_pretrained(model, local_files_only=True)
        except OSError:
            config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as error:
        if not job.get("smoke"):
            raise
        guess = preset_for_architecture(model.lower())
        return _config_from_dict(PRESETS[guess]), f"config of {model} not readable offline ({error.__class__.__name__}); smoke uses preset {guess}"
    if job.get("smoke"):
        values = config.to_dict()
        values.update(SMOKE_DIMENSIONS)
        values["vocab_size"] = min(values.get("vocab_size", SMOKE_VOCAB), SMOKE_VOCAB)
        return _config_from_dict(values), f"tiny {config.model_type} (smoke) from the config of {model}"
    return config, f"config of {model}"


def uses_random_weights(job: dict[str, Any]) -> bool:
    return job["model"] in PRESETS or job.get("smoke") or job.get("weights") == "random"


def load_tokenizer(job: dict[str, Any]):
    if job["model"] in PRESETS or job.get("smoke"):
        return ByteTokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(job["model"])


def save_config(config: Any, path: Path) -> None:
    """The frame resolves the config once; every trial builds from this file, never the hub again."""
    path.write_text(json.dumps(config.to_dict()))


def load_config(path: Path) -> Any:
    return _config_from_dict(json.loads(Path(path).read_text()))


def build_model(job: dict[str, Any], knobs: dict[str, Any], device: str, config: Any) -> torch.nn.Module:
    """Same initial weights in every trial of a run: seeded construction, seeded LoRA init."""
    from transformers import AutoModelForCausalLM

    config.use_cache = False  # training; a cache also switches off packed-row mask detection
    torch.manual_seed(job.get("seed", 0))
    if uses_random_weights(job):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=knobs["attn_implementation"],
                                                 dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(job["model"], config=config, dtype=torch.float32,
                                                     attn_implementation=knobs["attn_implementation"])
    model.config.use_cache = False
    if knobs["gradient_checkpointing"]:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if job.get("method") == "lora":
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(job.get("seed", 0) + 1)
        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **LORA))
    model.to(device)
    model.train()
    return model


def model_facts(model: torch.nn.Module, config: Any) -> dict[str, Any]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {
        "model_type": getattr(config, "model_type", "unknown"),
        "params": total, "trainable_params": trainable,
        "layers": getattr(config, "num_hidden_layers", None), "hidden": getattr(config, "hidden_size", None),
        "heads": getattr(config, "num_attention_heads", None),
        "kv_heads": getattr(config, "num_key_value_heads", None),
        "intermediate": getattr(config, "intermediate_size", None), "vocab": getattr(config, "vocab_size", None),
    }
