"""`autotune suggest key=value ...`: advice from the beliefs alone, no device needed.

The job's features come from the words: the model's size and shape (a preset, a local config.json, a
size in a hub id like `Qwen/Qwen2.5-7B`, or `model=7B`), `max_len`, `effective_batch`, `method`, the
card (`gpu=4090` knows its memory; `gpu_mem=24GB` overrides) and, when the user knows them,
`padding_share`, `length_spread` and `data_wait_share`. Memory headroom is estimated (weights, gradients
and Adam state, activations per row at `max_len`, logits), and the report says it is an estimate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..util.errors import JobError
from ..config.inputs import PATH_KEYS, check_digits, check_path, check_word, read_json, shown
from ..config.types import Device, JsonObject
from ..kb.features import GPU_MEMORY_GB, NO_BF16, Features, FeatureView, gpu_key, knob_features, logits_gb
from ..config.job_keys import RANGES, range_text
from ..config.knobs import CATALOG, NAIVE_START, Knobs, job_limits, not_applicable, parse_knob_value
from ..config.presets import PRESETS

SUGGEST_KEYS = {
    "model": "a preset, a local folder with config.json, a hub id with its size (Qwen/Qwen2.5-7B) or a size (7B, 500M)",
    "max_len": "tokens per row, for example max_len=2048",
    "effective_batch": "rows per optimizer step (default 16)",
    "method": "sft or lora (default sft)",
    "gpu": "the card, for example gpu=4090 or gpu=H100",
    "gpu_mem": "the card's memory, for example gpu_mem=24GB (default: known for common cards)",
    "padding_share": "share of tokens that padding to max_len would add, 0..1, if known",
    "length_spread": "p90/p50 of row lengths, if known",
    "data_wait_share": "share of step time waiting for data, 0..1, if known",
    "kb": "the knowledge base folder (default $AUTOTUNE_KB or ~/.autotune/kb)",
    "allow_numerics_change": "true to include settings that change the numbers (8-bit AdamW, fp8, a 4-bit LoRA base), "
                             "as tune's key of that name does (default false)",
}
_SIZE = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)\s*([bBmM])(?![a-zA-Z])")
# Transformer shape from a parameter count: N ~ 12 L h^2 with h ~ 128 L (Llama and Qwen families).
_ASPECT = 128
_VOCAB = 128_000
# Compute capability of common cards (FlashAttention-3 needs 9.0, fp8 matmuls 8.9).
CAPABILITY = ((("h100", "h200", "h800"), "9.0"), (("4090", "l4", "l40", "l40s"), "8.9"),
              (("3090", "a10", "a5000", "a6000"), "8.6"), (("a100",), "8.0"), (("b200",), "10.0"))


def _number(key: str, text: str, low: float, high: float) -> float:
    check_digits(key, text)
    try:
        value = float(text)
    except ValueError:
        raise JobError(f"{key}={text!r}: expected {SUGGEST_KEYS[key]}") from None
    if not low <= value <= high:
        raise JobError(f"{key}={text!r}: expected {SUGGEST_KEYS[key]}")
    return value


def _whole(key: str, text: str) -> int:
    check_digits(key, text)
    if not re.fullmatch(r"\d+", text) or int(text) < 1:
        raise JobError(f"{key}={text!r}: expected {SUGGEST_KEYS[key]}")
    if key in RANGES and not RANGES[key][0] <= int(text) <= RANGES[key][1]:  # as `tune` takes it: bounded work
        raise JobError(f"{key}={text}: expected {range_text(key)}")
    return int(text)


@dataclass(frozen=True)
class ModelShape:
    """A model's size and shape, from its name or its config.json, as the memory estimate reads it."""

    params: float
    layers: int
    hidden: int
    vocab: int
    heads: int
    model_family: str | None
    vision: bool


def _first(config: Mapping[str, Any], *names: str) -> Any:
    return next((config[n] for n in names if config.get(n) is not None), None)


def _shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    vision = isinstance(config.get("text_config"), dict)
    if vision:  # image-text models: the language model's shape
        config = {**config["text_config"], "model_type": config.get("model_type")}
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    if layers is None or hidden is None:
        raise JobError("the model's config.json names neither its layer count nor its hidden size in a form "
                       "autotune reads; give model=SIZE instead (for example model=7B)")
    config = {**config, "num_attention_heads": _first(config, "num_attention_heads", "n_head"),
              "intermediate_size": _first(config, "intermediate_size", "n_inner")}
    config = {k: v for k, v in config.items() if v is not None}
    _check_sizes(config, layers, hidden)
    vocab, inter = config.get("vocab_size", _VOCAB), config.get("intermediate_size", 4 * hidden)
    heads = config.get("num_attention_heads", max(1, hidden // 128))
    kv = config.get("num_key_value_heads", heads)
    head_dim = hidden // heads
    per_layer = hidden * (heads + 2 * kv) * head_dim + hidden * hidden + 3 * hidden * inter
    params = layers * per_layer + vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return ModelShape(params, layers, hidden, vocab, heads, config.get("model_type"), vision)


def _check_sizes(config: Mapping[str, Any], layers: Any, hidden: Any) -> None:
    """The sizes the estimate multiplies are whole numbers in a sane range (a hand-edited config.json
    may hold text, floats or a 400-digit number, which the arithmetic below would choke on)."""
    named = {"layers": layers, "hidden size": hidden}
    named.update({k: config[k] for k in ("vocab_size", "intermediate_size", "num_attention_heads",
                                         "num_key_value_heads") if k in config})
    for name, value in named.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
            raise JobError(f"the model's config.json: {name} is {shown(str(value))}, not a whole number from 1 to "
                           "10**9; fix the file or give model=SIZE instead (for example model=7B)")


def model_shape(model: str) -> ModelShape:
    """Size and shape of a model from its name or config, without loading it."""
    if model in PRESETS:
        return _shape_from_config(PRESETS[model])
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        config = read_json(path / "config.json", f"model={model}")
        if not isinstance(config, dict):
            raise JobError(f"model={model}: its config.json holds no object of settings; fix it or give model=SIZE")
        return _shape_from_config(config)
    sizes = _SIZE.findall(model.rsplit("/", 1)[-1])
    if not sizes:
        raise JobError(f"model={model!r}: cannot tell its size from the name; give model=7B (or 500M), a preset "
                       "or a local folder with config.json")
    number, unit = sizes[-1]
    params = float(number) * (1e9 if unit.lower() == "b" else 1e6)
    layers = max(2, round((params / (12 * _ASPECT**2)) ** (1 / 3)))
    hidden = _ASPECT * layers
    family = next((f for f in ("qwen2", "llama", "mistral", "gemma", "phi") if f in model.lower().replace("qwen2.5", "qwen2")),
                  None)
    return ModelShape(params, layers, hidden, _VOCAB, max(1, hidden // 128), family, False)


def estimate_headroom(shape: ModelShape, max_len: int, gpu_mem_gb: float, method: str, knobs: Knobs) -> float:
    """Share of the card left free by a worst-case micro-batch (every row at max_len) of `knobs`.

    Full fine-tune: fp32 weights, gradients and Adam moments (16 bytes a parameter; 8-bit moments: 10).
    LoRA: the frozen base as loaded (4 bytes in fp32, 2 in bf16, half a byte in 4 bits) plus little.
    Activations: 34 bytes per token, layer and hidden unit in half precision (Korthikanti et al. 2022),
    twice that in fp32, plus the eager attention scores; checkpointing keeps one layer's, offloading
    about none. Logits and their gradient in fp32 only for an image-text model (autotune's own loop)
    without the chunked loss: a text job trains in TRL's SFTTrainer, whose fused LM head never holds them."""
    return round(1 - memory_bytes(shape, max_len, method, knobs) / (gpu_mem_gb * 1e9), 4)


def memory_bytes(shape: ModelShape, max_len: int, method: str, knobs: Knobs) -> float:
    """The estimate behind `estimate_headroom`, in bytes."""
    params, layers, hidden = shape.params, shape.layers, shape.hidden
    half = knobs.precision in ("bf16", "fp16")
    if method == "lora":
        base = 0.5 if knobs.load_in_4bit else (2 if knobs.dtype == "bfloat16" else 4)
        state = params * base + 0.01 * params * 16
    else:
        state = params * (10 if "8bit" in knobs.optim else 16)
    element = 34 if half else 68
    per_layer = max_len * hidden * element
    if knobs.attn_implementation == "eager":
        per_layer += 5 * shape.heads * max_len**2 * (2 if half else 4)
    kept_layers = 1 + math.sqrt(layers) if knobs.gradient_checkpointing else layers
    if knobs.activation_offloading:
        kept_layers = 1
    logits = max_len * shape.vocab * 8 if shape.vision and not knobs.chunked_cross_entropy else 0
    peak: float = state + knobs.per_device_train_batch_size * (kept_layers * per_layer + logits)
    return peak


@dataclass(frozen=True)
class Words:
    """What a suggest command line says: the job's features, the starting knobs, the device facts the card
    stands for, the model's shape, notes on what is unknown or estimated, and the knowledge-base folder."""

    features: Features
    knobs: Knobs
    device: Device
    shape: ModelShape
    notes: list[str]
    kb: str


def features_from_words(words: list[str]) -> Words:
    """The job a suggest command line describes (`Words`)."""
    pairs: dict[str, str] = {}
    for word in words:
        check_word(word)
        key, sep, value = word.partition("=")
        if not sep or not value:
            raise JobError(f"{word!r}: expected key=value; keys: {', '.join(SUGGEST_KEYS)}")
        if key not in SUGGEST_KEYS and key not in CATALOG:
            raise JobError(f"unknown key '{key}'; accepted keys: {', '.join(list(SUGGEST_KEYS) + list(CATALOG))}")
        if key in pairs:
            raise JobError(f"key '{key}' is given twice; give it once")
        if key in PATH_KEYS:
            check_path(key, value)
        pairs[key] = value
    for key in ("model", "max_len"):
        if key not in pairs:
            raise JobError(f"missing required key '{key}': expected {key}=<{SUGGEST_KEYS[key]}>")
    max_len = _whole("max_len", pairs["max_len"])
    batch = _whole("effective_batch", pairs.get("effective_batch", "16"))
    method = pairs.get("method", "sft")
    if method not in ("sft", "lora"):
        raise JobError(f"method={method!r}: expected {SUGGEST_KEYS['method']}")
    start = dict(NAIVE_START)
    for key, text in pairs.items():
        if key in CATALOG:
            start[key] = parse_knob_value(key, text)
    knobs = Knobs(**start)
    if batch % knobs.per_device_train_batch_size:
        raise JobError(f"per_device_train_batch_size={knobs.per_device_train_batch_size} does not divide "
                       f"effective_batch={batch}")
    shape = model_shape(pairs["model"])
    notes: list[str] = []
    features: Features = {"device_kind": "cuda", "max_len": max_len, "effective_batch": batch, "method": method,
                          "params_m": round(shape.params / 1e6, 1), "layers": shape.layers,
                          "hidden": shape.hidden, "vocab": shape.vocab}
    if shape.model_family:
        features["model_family"] = shape.model_family
    gpu_mem_gb: float | None = None
    label = pairs.get("gpu", "")
    known = gpu_key(label) if label else None
    if "gpu_mem" in pairs:
        check_digits("gpu_mem", pairs["gpu_mem"])
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(?:GB|G|GiB)?", pairs["gpu_mem"], re.IGNORECASE)
        if not match or float(match.group(1)) <= 0:
            raise JobError(f"gpu_mem={pairs['gpu_mem']!r}: expected {SUGGEST_KEYS['gpu_mem']}")
        gpu_mem_gb = features["gpu_mem_gb"] = float(match.group(1))
    elif known:
        gpu_mem_gb = features["gpu_mem_gb"] = float(GPU_MEMORY_GB[known])
    elif label:
        notes.append(f"gpu={label}: memory unknown; give gpu_mem= for advice that depends on memory")
    features["bf16_supported"] = not any(old in label.lower() for old in NO_BF16)
    for key, high in (("padding_share", 1.0), ("length_spread", 1000.0), ("data_wait_share", 1.0)):
        if key in pairs:
            features[key] = _number(key, pairs[key], 0.0, high)
        else:
            notes.append(f"{key} unknown: advice that depends on it is not given (add {key}=...)")
    features["logits_gb"] = logits_gb(shape.vocab, max_len)
    if gpu_mem_gb is not None:
        raw = estimate_headroom(shape, max_len, gpu_mem_gb, method, knobs)
        features["headroom"] = headroom = max(0.0, raw)
        notes.append(f"headroom {headroom:.2f} is an estimate from the model's size (no device measured)")
        if raw <= 0:
            notes.append(f"the start config does not fit: an estimated {1 - raw:.1f}x the card's memory")
    features.update(knob_features(knobs))
    capability = next((cc for cards, cc in CAPABILITY if known in cards), "") if known else ""
    # A card with the [gpu] extra installed; FlashAttention-3 and fp8 where its compute capability has them.
    bf16 = bool(features["bf16_supported"])
    device: Device = {"kind": "cuda", "bf16": bf16, "tf32": bf16,
              "flash_attn": True, "flash_attn_3": capability.startswith("9."), "compile": True, "fused_adamw": True,
              "cpu_count": 8, "memory_bytes": int((gpu_mem_gb or 0) * 1e9), "capability": capability,
              "liger": True, "bitsandbytes": True, "torchao": True}
    return Words(features, knobs, device, shape, notes, pairs.get("kb", ""))


def _job(features: FeatureView) -> tuple[int, str, int, float]:
    """(max_len, method, effective_batch, the card's memory in GB) from a suggest line's features."""
    max_len, method, batch, gpu = (features.get(k) for k in ("max_len", "method", "effective_batch", "gpu_mem_gb"))
    assert isinstance(max_len, int) and isinstance(method, str) and isinstance(batch, int)
    return max_len, method, batch, float(gpu) if isinstance(gpu, (int, float)) else 0.0


# Changes that lower the estimated memory, tried in this order to make a start config fit (the largest
# savings for a long-row job first; each only where it applies on what came before).
FIT_ORDER = (("precision", "bf16"), ("dtype", "bfloat16"), ("attn_implementation", "sdpa"),
             ("chunked_cross_entropy", True), ("gradient_checkpointing", True), ("activation_offloading", True))


def fitting_first(ready: list[Any], start: Knobs, device: Device, shape: ModelShape,
                  features: FeatureView, limits: list[JsonObject]) -> list[Any]:
    """Where the estimate says the start config does not fit, what makes it fit goes first: the single
    changes that fit alone (best scored first), else one combined change of the memory savers in
    FIT_ORDER that the job's `limits` allow (as tune's frame would), added until the estimate fits; then
    the rest by how much memory each saves, then by score."""
    from .limits import frame_limit

    from ..config.records import Source
    from ..reasoner.rank import Hypothesis

    max_len, method, batch, gpu = _job(features)
    if estimate_headroom(shape, max_len, gpu, method, start) > 0:
        return ready
    after = {id(h): estimate_headroom(shape, max_len, gpu, method, h.apply(start)) for h in ready}
    fitting = [h for h in ready if after[id(h)] > 0]
    if not fitting:
        changes, current = [], start
        for knob, value in FIT_ORDER:
            if (getattr(current, knob) == value or not_applicable(knob, value, current, device, batch)
                    or frame_limit({"limits": limits}, knob, value)):
                continue
            changes.append((knob, value))
            current = current.with_change(knob, value)
            if estimate_headroom(shape, max_len, gpu, method, current) > 0:
                break
        if changes and estimate_headroom(shape, max_len, gpu, method, current) > 0:
            (knob, value), *also = changes
            fitting = [Hypothesis(knob, value, "the start config does not fit (estimated); together these make it "
                                  f"fit with headroom {estimate_headroom(shape, max_len, gpu, method, current):.2f}",
                                  p_helps=1.0, expected_ratio=1.0, also=tuple(also), source=Source.FIT)]
    rest = sorted((h for h in ready if h not in fitting), key=lambda h: (-round(after[id(h)], 3), -h.score))
    return fitting + rest


def job_frame_limits(method: str, numerics: bool, vision: bool) -> list[JsonObject]:
    """The limits tune's frame would set from the job alone: a text job's SFTTrainer (the chunked loss is
    its already) and the job's own (a full fine-tune's fp32 weights, the numerics opt-in)."""
    from ..workloads.hf.runner import sft_limits

    if vision:
        return job_limits(method, numerics_allowed=numerics)
    return sft_limits({"method": method, "allow_numerics_change": numerics})


def advise(words: list[str]) -> JsonObject:
    from ..config.job import parse_flag
    from ..kb import Store, kb_folder
    from ..kb.beliefs import Beliefs
    from ..reasoner import rank
    from .limits import frame_limit

    opt_in = [w for w in words if w.startswith("allow_numerics_change=")]
    numerics = parse_flag("allow_numerics_change", opt_in[-1].partition("=")[2]) if opt_in else False
    said = features_from_words([w for w in words if w not in opt_in])
    features, knobs, device, shape, notes = said.features, said.knobs, said.device, said.shape, said.notes
    folder = kb_folder(said.kb)
    if folder.exists() and not folder.is_dir():
        raise JobError(f"kb={folder}: is a file, not a knowledge-base folder; give its folder")
    beliefs = Beliefs(Store(folder)) if folder.exists() else Beliefs()
    ready, skipped = rank(knobs, device, _job(features)[2], set(), beliefs.claims(), features)
    limits = job_frame_limits(_job(features)[1], numerics, shape.vision)
    for hypothesis in list(ready):
        why = next((w for name, value in hypothesis.changes if (w := frame_limit({"limits": limits}, name, value))),
                   None)
        if why:
            ready.remove(hypothesis)
            skipped.append((hypothesis.change, why))
    if "gpu_mem_gb" in features:
        ready = fitting_first(ready, knobs, device, shape, features, limits)
        _say_what_fits(notes, ready, knobs, shape, features)
    sources = {c.id: c.source for c in beliefs.claims()}
    return {"schema_version": 1, "features": features, "start": knobs.to_dict(), "notes": notes,
            "hypotheses": [{**h.to_dict(), "sources": sorted({sources[c] for c in h.claims if sources.get(c)})}
                           for h in ready],
            "skipped": [{"change": change, "why": why} for change, why in skipped]}


def _say_what_fits(notes: list[str], ready: list[Any], start: Knobs, shape: ModelShape,
                   features: FeatureView) -> None:
    """The does-not-fit note says whether the first change makes the start fit, or that none does."""
    at = next((i for i, note in enumerate(notes) if note.startswith("the start config does not fit")), None)
    if at is None:
        return
    max_len, method, _, gpu = _job(features)
    fits = bool(ready) and estimate_headroom(shape, max_len, gpu, method, ready[0].apply(start)) > 0
    notes[at] += ("; what makes it fit is ranked first" if fits else
                  "; no change autotune can make fits it on this card (estimated): a smaller model, shorter rows "
                  "or a larger card")
