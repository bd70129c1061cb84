"""Job features: what claims condition on, from the job, the frame and the incumbent config.

Three sources, one flat dict: the job and its model and data (`max_len`, `params_m`, `padding_share`,
`length_spread`, ...), the device (`device_kind`, `gpu_mem_gb`, `bf16_supported`), the profile of the
config being improved (`data_wait_share`, `optimizer_share`, `headroom`), and that config's knob values
under their own names (`micro_batch` for the micro-batch). A feature nobody measured is absent, and a
clause on it does not hold.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

from ..config.knobs import Knobs
from ..config.types import KnobValue

# One job's features, name to a number, a word or a flag (a knob's value under its own name): what
# claims' clauses compare and `distance` weighs. Flat by design, so a condition names one feature.
Features = dict[str, KnobValue]
FeatureView = Mapping[str, KnobValue]

# Memory of common cards (GB), so `suggest gpu=4090` knows what a 4090 holds; `gpu_mem=` overrides.
GPU_MEMORY_GB = {"4090": 24, "3090": 24, "a10": 24, "l4": 24, "a5000": 24, "t4": 16, "v100": 32,
                 "a6000": 48, "l40": 48, "l40s": 48, "a100": 80, "h100": 80, "h800": 80, "h200": 141,
                 "b200": 180, "mi300x": 192}
# Cards without bf16 tensor cores.
NO_BF16 = ("t4", "v100", "p100", "2080", "1080")
NUMERIC = ("params_m", "layers", "hidden", "vocab", "max_len", "effective_batch", "padding_share",
           "length_spread", "mean_len", "gpu_mem_gb", "data_wait_share", "optimizer_share", "headroom",
           "micro_batch", "dataloader_num_workers", "image_token_share", "images_per_row", "logits_gb",
           "dataloader_prefetch_factor")
# Features that identify a job for replay: what is trained and on which rows, not how.
_JOB_IDENTITY = ("model", "dataset", "max_len", "effective_batch", "method", "weights", "seed", "mem_limit",
                 "mem_margin")


def gpu_key(label: str) -> str | None:
    lowered = label.lower()
    return next((k for k in sorted(GPU_MEMORY_GB, key=len, reverse=True) if re.search(rf"(^|[^a-z0-9]){k}", lowered)),
                None)


def logits_gb(vocab: int, max_len: int) -> float:
    """One row's fp32 logits in GB: what the fused / chunked cross-entropy claims condition on."""
    return round(vocab * max_len * 4 / 1e9, 3)


def job_features(job: Any, frame: Mapping[str, Any] | None = None) -> Features:
    """Features of the job itself and of its device (no config, no profile)."""
    features: Features = {"max_len": job.max_len, "effective_batch": job.effective_batch,
                          "method": job.method}
    if not frame:
        return features
    model, data, device = frame.get("model", {}), frame.get("data", {}), frame.get("device", {})
    if model.get("params"):
        features["params_m"] = round(model["params"] / 1e6, 3)
    for name in ("layers", "hidden", "vocab"):
        if model.get(name) is not None:
            features[name] = model[name]
    if model.get("vocab"):
        features["logits_gb"] = logits_gb(model["vocab"], job.max_len)
    if model.get("model_type"):
        # Conditions are words split on spaces: a family name must be one word.
        features["model_family"] = re.sub(r"\s+", "_", str(model["model_type"]))
    if model.get("vision"):
        # An image-text model: vision knobs apply, and claims may speak of how image-heavy rows are.
        features["vlm"] = True
        for name in ("image_token_share", "images_per_row"):
            if data.get(name) is not None:
                features[name] = data[name]
    if data.get("padding_share") is not None:
        features["padding_share"] = data["padding_share"]
    if data.get("p50_len"):
        features["length_spread"] = round(data["p90_len"] / data["p50_len"], 3)
        if data.get("mean_len") is not None:
            features["mean_len"] = data["mean_len"]
    if device.get("kind"):
        features["device_kind"] = device["kind"]
        features["bf16_supported"] = bool(device.get("bf16"))
        memory = device.get("memory_bytes")
        if memory:
            features["gpu_mem_gb"] = round(memory / 1e9, 1)
    return features


def profile_features(measurement: Mapping[str, Any] | None) -> Features:
    """Where the incumbent's time and memory go, from its measurement."""
    if not measurement:
        return {}
    features: Features = {}
    breakdown = measurement.get("breakdown") or {}
    for name in ("data_wait_share", "optimizer_share"):
        if breakdown.get(name) is not None:
            features[name] = breakdown[name]
    ceiling = measurement.get("ceiling")
    if ceiling and ceiling.get("limit_bytes"):
        features["headroom"] = round(max(0.0, 1 - ceiling["bytes"] / ceiling["limit_bytes"]), 4)
    return features


def knob_features(knobs: Knobs) -> Features:
    values: Features = knobs.to_dict()
    values["micro_batch"] = values.pop("per_device_train_batch_size")
    return values


def context(job: Any, frame: Mapping[str, Any] | None, knobs: Knobs,
            measurement: Mapping[str, Any] | None = None) -> Features:
    """Everything a claim may condition on when `knobs` is the config being improved."""
    return {**job_features(job, frame), **profile_features(measurement), **knob_features(knobs)}


def fingerprint(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def job_fingerprint(job: Any) -> str:
    """Same model, data, lengths, batch, method, weights and seed: the same rows are trained. For a
    user's script, the bytes of the script and of its config files stand for the model and data."""
    from pathlib import Path

    identity = {name: getattr(job, name) for name in _JOB_IDENTITY}
    if getattr(job, "is_mlp", False):
        identity.update(mlp=[job.mlp.width, job.mlp.depth, job.mlp.rows])
    for name in ("model", "dataset"):
        # A local file or folder edited in place is another job: its size and time stand for its bytes.
        path = Path(str(getattr(job, name))).expanduser()
        if path.exists():
            stat = path.stat()
            identity[f"{name}_file"] = [stat.st_size, stat.st_mtime_ns]
    if getattr(job, "script", None) is not None:
        files = [Path(job.script.path), *(Path(label).expanduser() for label in job.script.configs)]
        identity["script"] = [hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else str(f) for f in files]
        identity["script_args"] = job.script.args
        if job.script.launcher:   # another launcher is another process setup: not the same job's trials
            identity["script_launcher"] = job.script.launcher
    return fingerprint(identity)


def software(frame: Mapping[str, Any]) -> dict[str, str]:
    device = frame.get("device", {})
    return {name: str(device.get(name, "")) for name in ("torch", "transformers", "python")}


def device_fingerprint(frame: Mapping[str, Any]) -> str:
    peaks = frame.get("device", {}).get("peaks", {})
    return peaks.get("fingerprint") or fingerprint({k: frame.get("device", {}).get(k) for k in ("kind", "name")})


def distance(a: FeatureView, b: FeatureView) -> float:
    """How unlike two jobs are: log-scale gaps on the numeric features both have, 1 per differing
    categorical one. Used to pick the past run that warm-starts a new one."""
    import math

    total = 0.0
    for name in set(a) & set(b):
        x, y = a[name], b[name]
        if name in NUMERIC and isinstance(x, (int, float)) and isinstance(y, (int, float)):
            total += abs(math.log1p(abs(x)) - math.log1p(abs(y)))
        elif x != y:
            total += 1.0
    return total
