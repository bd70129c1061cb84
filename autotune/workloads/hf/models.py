"""Model and tokenizer for a trial: a preset, a hub id or a local folder; random or trained weights; LoRA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.messages import ModelFacts
from ...config.presets import PRESETS, SMOKE_DIMENSIONS, is_vision_preset, preset_for_architecture
from .trl_args import LORA_SETTINGS as LORA
from ...engine.data import ByteTokenizer

# Large vocabularies dominate a tiny smoke model's time and memory; smoke keeps the architecture,
# not the vocabulary.
SMOKE_VOCAB = 2048


def _config_from_dict(values: Mapping[str, object]) -> Any:
    """A transformers config from its own `to_dict()` form (the keys are the library's: open-ended)."""
    from transformers import AutoConfig

    values = dict(values)
    return AutoConfig.for_model(values.pop("model_type"), **values)


def resolve_config(job: Job) -> tuple[Any, str]:
    """The model config, and a note on where it came from (smoke shrinks it to a tiny model)."""
    from transformers import AutoConfig

    model = job.model
    if model in PRESETS:
        values = dict(PRESETS[model])
        if job.smoke and not is_vision_preset(model):
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
        if not job.smoke:
            raise
        guess = preset_for_architecture(model.lower())
        return _config_from_dict(PRESETS[guess]), f"config of {model} not readable offline ({error.__class__.__name__}); smoke uses preset {guess}"
    if job.smoke and getattr(config, "vision_config", None) is not None:
        # A VLM's tiny twin is its family's preset: smoke shrinks text dimensions only, and the
        # processor must be built without a download, at token ids the preset's config names.
        guess = preset_for_architecture(config.model_type)
        if is_vision_preset(guess):
            return (_config_from_dict(PRESETS[guess]),
                    f"smoke uses preset {guess} for the {config.model_type} model {model}")
        raise ValueError(f"smoke has no tiny preset of the {config.model_type} family; run without smoke")
    if job.smoke:
        values = config.to_dict()
        values.update(SMOKE_DIMENSIONS)
        values["vocab_size"] = min(values.get("vocab_size", SMOKE_VOCAB), SMOKE_VOCAB)
        return _config_from_dict(values), f"tiny {config.model_type} (smoke) from the config of {model}"
    return config, f"config of {model}"


def uses_random_weights(job: Job) -> bool:
    return job.model in PRESETS or job.smoke or job.weights == "random"


def load_tokenizer(job: Job) -> Any:
    if job.model in PRESETS or job.smoke:
        return ByteTokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(job.model)


def save_config(config: Any, path: Path) -> None:
    """The frame resolves the config once; every trial builds from this file, never the hub again."""
    path.write_text(json.dumps(config.to_dict()))


def load_config(path: Path) -> Any:
    return _config_from_dict(json.loads(Path(path).read_text()))


def build_model(job: Job, knobs: Knobs, device: str, config: Any,
                for_trainer: bool = False) -> torch.nn.Module:
    """Same initial weights in every trial of a run: seeded construction, seeded LoRA init.

    `for_trainer`: the bare model for `trl.SFTTrainer`, which turns on checkpointing and wraps LoRA itself
    from its config, as it does for a user."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from ..vlm.vision import is_vlm

    vlm = is_vlm(config)
    auto = AutoModelForImageTextToText if vlm else AutoModelForCausalLM
    config.use_cache = False  # training; a cache also switches off packed-row mask detection
    torch.manual_seed(job.seed)
    from .trl_args import model_init_kwargs

    # A LoRA job's frozen base may load in bf16 (`dtype`); everything else keeps fp32 master weights.
    dtype = getattr(torch, str(model_init_kwargs(knobs)["dtype"]))
    if knobs.load_in_4bit:
        model = _load_4bit(auto, job, config, knobs)
    elif uses_random_weights(job):
        model = auto.from_config(config, attn_implementation=knobs.attn_implementation, dtype=dtype)
    else:
        model = auto.from_pretrained(job.model, config=config, dtype=dtype,
                                     attn_implementation=knobs.attn_implementation)
    model.config.use_cache = False
    if knobs.float8_training:  # CUDA-only (not_applicable: compute capability >= 8.9)
        from torchao.float8 import convert_to_float8_training

        # The LM head stays: TRL's fused head and the chunked loss read its weight directly.
        convert_to_float8_training(model.to(device), module_filter_fn=lambda module, name: "lm_head" not in name)
    placed = bool(knobs.load_in_4bit)  # bitsandbytes placed it on the GPU as it loaded
    if for_trainer:
        return model if placed else model.to(device)
    if knobs.gradient_checkpointing:
        # transformers renamed gradient_checkpointing_enable in 5.2x; earlier 5.x releases have only the old name.
        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if job.method == "lora":
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(job.seed + 1)
        settings = dict(LORA, target_modules=language_linears(model)) if vlm else LORA
        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **settings))
    if vlm and knobs.freeze_vision_tower:
        _no_grad_vision(model)
    if not placed:
        model.to(device)
    model.train()
    return model


def _load_4bit(auto: Any, job: Job, config: Any, knobs: Knobs) -> torch.nn.Module:  # CUDA-only
    """An NF4 base with bf16 compute (QLoRA), as `trl sft` builds it from `load_in_4bit`; random weights
    are saved once and loaded back, since bitsandbytes quantises at load time."""
    import tempfile

    from transformers import BitsAndBytesConfig

    from .trl_args import QUANT_4BIT

    quant = BitsAndBytesConfig(**{**QUANT_4BIT, "bnb_4bit_compute_dtype": torch.bfloat16})
    load = {"config": config, "dtype": torch.bfloat16, "quantization_config": quant,
            "attn_implementation": knobs.attn_implementation, "device_map": {"": 0}}
    if not uses_random_weights(job):
        return auto.from_pretrained(job.model, **load)
    with tempfile.TemporaryDirectory(prefix="autotune-4bit-") as folder:
        auto.from_config(config, dtype=torch.bfloat16).save_pretrained(folder)
        return auto.from_pretrained(folder, **load)


def language_linears(model: torch.nn.Module) -> list[str]:
    """A VLM's LoRA targets: the language model's linear layers (lm_head aside), the usual VLM recipe;
    the vision tower and projector stay frozen, as peft's all-linear would not leave them."""
    # Qwen2-VL and LLaVA call it language_model, Idefics3 text_model.
    return [name for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and {"language_model", "text_model"} & set(name.split("."))]


def _no_grad_vision(model: torch.nn.Module) -> None:
    """Run the vision tower without recording autograd: exact only where it has nothing to train (the
    frame allows the knob only then), so a stray setting fails loudly rather than training less."""
    from ..vlm.vision import vision_module

    tower = vision_module(model)
    if any(p.requires_grad for p in tower.parameters()):
        raise ValueError("freeze_vision_tower=true would stop training the vision tower this method trains")
    tower.forward = torch.no_grad()(tower.forward)


def model_facts(model: torch.nn.Module, config: Any) -> ModelFacts:
    from ..vlm.vision import is_vlm, vision_module

    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # A VLM's shape facts are its language model's (what the text claims speak of); the tower is apart.
    text = config.get_text_config(decoder=True) if is_vlm(config) else config
    facts: ModelFacts = {
        "model_type": getattr(config, "model_type", "unknown"),
        "params": total, "trainable_params": trainable,
        "layers": getattr(text, "num_hidden_layers", None), "hidden": getattr(text, "hidden_size", None),
        "heads": getattr(text, "num_attention_heads", None),
        "kv_heads": getattr(text, "num_key_value_heads", None),
        "intermediate": getattr(text, "intermediate_size", None), "vocab": getattr(text, "vocab_size", None),
    }
    if is_vlm(config):
        tower = vision_module(model)
        facts["vision"] = {"params": sum(p.numel() for p in tower.parameters()),
                           "trainable_params": sum(p.numel() for p in tower.parameters() if p.requires_grad)}
    return facts
