"""Framework-free runner: a plain PyTorch MLP over seeded random rows (`model=mlp`).

`python -m autotune.workloads.mlp.runner SPEC RESULT`, with the HF runner's contract: `kind=frame` sizes up the
device, model and data; `kind=trial` trains parity + warm-up + measured steps with one config. No
transformers in the loop, so it checks an install on a GPU box in a minute, and tests of the loop use it
where a transformer is not needed. A row is `max_len` features and one class label; the knobs that apply
are those of any PyTorch loop (micro-batch split, precision, compile, optimizer, loader workers, pinning).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from ...config.job import Job, MlpShape
from ...config.knobs import CATALOG, Knobs
from ...config.messages import FrameReply, PeakReading, TrialReply, TrialSpec, thawed
from ...engine import common
from .job import MLP_KNOBS

CLASSES = 16
# Why the knobs of sequence and vision models mean nothing here: their changes are dropped without a note.
NOT_HERE = {"padding": "an MLP row is a fixed-size vector, there is nothing to pad or pack",
            "group_by_length": "every MLP row has the same size",
            "attn_implementation": "an MLP has no attention",
            "gradient_checkpointing": "the MLP runner keeps every activation (its layers are small)"}


def _shape(job: Job) -> MlpShape:
    if job.mlp is None:
        raise ValueError("the MLP runner trains model=mlp jobs, with their mlp_width, mlp_depth and mlp_rows")
    return job.mlp


def _rows(job: Job) -> tuple[Any, Any]:
    """Seeded features and labels from a fixed random teacher, so the loss has something to learn."""
    import torch

    rows = _shape(job).rows
    generator = torch.Generator().manual_seed(job.seed)
    features = torch.randn(rows, job.max_len, generator=generator)
    teacher = torch.randn(job.max_len, CLASSES, generator=generator) / math.sqrt(job.max_len)
    labels = (features @ teacher + 0.5 * torch.randn(rows, CLASSES, generator=generator)).argmax(-1)
    return features, labels


def _digest(features: Any, labels: Any) -> str:
    return hashlib.sha256(features.numpy().tobytes() + labels.numpy().tobytes()).hexdigest()


def build_model(job: Job, device: str) -> Any:
    """`mlp_depth` hidden layers of `mlp_width`, GELU between; seeded, so every trial starts alike."""
    import torch

    torch.manual_seed(job.seed)
    shape = _shape(job)
    layers: list[torch.nn.Module] = []
    width_in = job.max_len
    for _ in range(shape.depth):
        layers += [torch.nn.Linear(width_in, shape.width), torch.nn.GELU()]
        width_in = shape.width
    layers.append(torch.nn.Linear(width_in, CLASSES))
    return torch.nn.Sequential(*layers).to(device).train()


def frame(spec: TrialSpec) -> FrameReply:
    from ...probes.device import device_facts

    job, device = spec.whole_job, common.setup_device(spec)
    shape = _shape(job)
    features, labels = _rows(job)
    spec.rows_file.write_text(json.dumps({
        "schema_version": 1, "kind": "mlp", "rows": shape.rows, "features": job.max_len,
        "classes": CLASSES, "seed": job.seed, "sha256": _digest(features, labels)}))
    model = build_model(job, device)
    params = sum(p.numel() for p in model.parameters())
    width = job.max_len
    return {"frame": {
        "device": device_facts(device, thawed(spec.peak_cache)),
        "model": {"source": "built-in MLP (plain PyTorch, random weights)", "model_type": "mlp", "params": params,
                  "trainable_params": params, "layers": shape.depth, "hidden": shape.width, "vocab": None},
        "data": {"dataset": "synthetic", "rows_available": shape.rows, "p10_len": width, "p50_len": width,
                 "p90_len": width, "max_seen_len": width, "mean_len": width, "padding_share": 0.0,
                 "truncated_share": 0.0},
        "limits": [{"knob": name, "reason": NOT_HERE.get(name, "a plain MLP has no such setting"), "silent": True}
                   for name in CATALOG if name not in MLP_KNOBS],
    }}


class Batches:
    """Micro-batches by plan item, so `dataloader_num_workers` moves the gathering off the training process."""

    def __init__(self, features: Any, labels: Any) -> None:
        self.features, self.labels = features, labels

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, item: tuple) -> tuple:
        kind, index, row_ids, targets = item
        # A small dataset repeats, as the HF runner's does: row r is stored row r mod rows.
        stored = [r % len(self.features) for r in row_ids]
        return kind, index, row_ids, targets, (self.features[stored], self.labels[stored])


def _engine_class():
    import torch.nn.functional as F

    from ...engine.train import Engine

    class MLPEngine(Engine):
        """The HF engine's precision, optimizer, compile and loss scaling; a plain forward."""

        def micro_step(self, batch: tuple, step_targets: int, phases: Any = None) -> tuple:
            pin = self.knobs.dataloader_pin_memory and self.device == "cuda"
            features, labels = (t.to(self.device, non_blocking=pin) for t in batch)
            with self._autocast():
                logits = self.forward(features)
            row_losses = F.cross_entropy(logits.float(), labels, reduction="none")
            return self.backward(row_losses, step_targets, phases), row_losses.detach(), labels

        @staticmethod
        def row_losses(row_losses: Any, labels: Any, batch: tuple, row_ids: tuple) -> dict[int, float]:
            return dict(zip(row_ids, row_losses.tolist()))

        @staticmethod
        def batch_tokens(batch: tuple) -> tuple[int, int]:
            return len(batch[1]), 0  # one target per row, no padding

    return MLPEngine


def _loaded(spec: TrialSpec) -> tuple[Any, Any]:
    """The frame's rows, regenerated from the seed and checked byte for byte against its digest."""
    from ...engine.train import TrialFault

    features, labels = _rows(spec.whole_job)
    recorded = json.loads(spec.rows_file.read_text())["sha256"]
    if _digest(features, labels) != recorded:
        raise TrialFault("invalid", "the regenerated rows differ from the frame's (another torch version or "
                         "machine): trials would not train the same rows")
    return features, labels


def _ceiling(job: Job, knobs: Knobs, device: str, features: Any, labels: Any) -> PeakReading:
    """Two full optimizer steps in a model of their own: every MLP row is the same size, so any batch is
    the worst case, and the second step holds the optimizer state beside the activations."""
    from ...probes import memory
    from ...probes.device import memory_total
    from ...engine.train import TrialFault, two_full_steps

    limit = memory.limit_bytes(memory_total(device), job.mem_limit, job.mem_margin)
    micro = knobs.per_device_train_batch_size
    engine = _engine_class()(build_model(job, device), knobs, device)
    accumulated = min(2, job.effective_batch // micro)
    batch = Batches(features, labels)[("ceiling", 0, tuple(range(micro)), 0)][4]
    two_full_steps(engine, batch, accumulated, accumulated * micro)
    reading = memory.read_peak(device)
    del engine
    if device == "cuda":  # CUDA-only: the check's model must not count toward the trial's own peak
        import torch

        torch.cuda.empty_cache()
    ceiling: PeakReading = {**reading, "limit_bytes": limit, "fits": memory.fits(reading["bytes"], limit)}
    if not ceiling["fits"]:
        raise TrialFault("oom", f"a micro-batch of {micro} rows peaks at {reading['bytes'] / 2**30:.2f} GiB, over the "
                         f"limit of {limit / 2**30:.2f} GiB", {"ceiling": ceiling})
    return ceiling


def _train(engine: Any, features: Any, labels: Any, knobs: Knobs, spec: TrialSpec, window: Any) -> Any:
    """The HF runner's step discipline on MLP rows: parity steps, detected warm-up, measured steps
    (inside `window`, the NVML sampler), then profiled steps timed phase by phase."""
    from ...config.messages import measured_ids, parity_ids, rows_needed
    from ...engine.batching import step_plan
    from ...engine.train import Plan, train_loop

    effective_batch, micro = spec.whole_job.effective_batch, knobs.per_device_train_batch_size
    measure = spec.measure_steps
    plan = Plan(step_plan(parity_ids(effective_batch), effective_batch, micro),
                step_plan(measured_ids(effective_batch, measure), effective_batch, micro),
                spec.warmup_max, spec.profile_steps)
    targets_per_row = [1] * rows_needed(effective_batch, measure)  # an MLP row has one label
    return train_loop(engine, Batches(features, labels), plan, targets_per_row, knobs, effective_batch,
                      spec.inject_fault, window)


def trial(spec: TrialSpec) -> TrialReply:
    from ...probes import flops, memory, nvml
    from ...engine.train import accepted, measurement_of

    job, knobs, device = spec.whole_job, spec.whole_knobs, common.setup_device(spec)
    common.inject_early_fault(spec.inject_fault)
    features, labels = _loaded(spec)
    ceiling = _ceiling(job, knobs, device, features, labels) if spec.ceiling else None
    model = build_model(job, device)
    engine = _engine_class()(model, knobs, device)
    memory.reset_peak(device)
    sampler = nvml.Sampler(device).start()
    try:
        log = _train(engine, features, labels, knobs, spec, sampler)
    finally:
        sampler.stop()
    # Each row is one input to every Linear: the token-count convention with one "token" per row.
    window_flops = flops.step_flops(flops.matmul_params(model), (0, 0, 0), [1] * log.measured_rows, False)
    measurement = measurement_of(device, log, window_flops, spec.peak_flops(knobs.precision), memory.read_peak(device),
                                 sampler.summary(), ceiling)
    return accepted(spec, log, measurement)


def entry(spec_path: Path, result_path: Path) -> int:
    return common.run_body(frame, trial, spec_path, result_path)


if __name__ == "__main__":
    import sys

    sys.exit(entry(Path(sys.argv[1]), Path(sys.argv[2])))
