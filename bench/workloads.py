"""The workloads the search benchmark is measured on, and the knob grid recorded for each.

A grid lists, per knob, the values recorded; every combination that can run on the device is one
config of the table (a value the start already has is in every list). Knobs left out of a grid keep
the start's value in every config, and the strategies are told the same grid, so none of them can
propose what the table does not hold.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from autotune.config.knobs import NAIVE_START, Knobs, not_applicable

CPU_GRID: dict[str, tuple] = {
    "padding": ("max_length", "longest", "padding_free"),
    "per_device_train_batch_size": (1, 2, 4, 8),
    "attn_implementation": ("eager", "sdpa"),
    "gradient_checkpointing": (False, True),
    "optim": ("adamw_torch", "adamw_torch_fused"),
    "group_by_length": (False, True),
}
# The framework-free MLP (no rows of a length, no attention): the knobs of any PyTorch loop, without
# torch.compile (a compile per config would take the CPU's table from minutes to an hour). A CPU without
# bf16 or with no core to spare for loader workers records what it can run: the optimizer and the split.
MLP_GRID: dict[str, tuple] = {
    "per_device_train_batch_size": (1, 2, 4, 8, 16, 32, 64),   # every divisor: autotune climbs one at a time
    "precision": ("fp32", "bf16"),
    "dataloader_num_workers": (0, 2),
    "optim": ("adamw_torch", "adamw_torch_fused"),
}
# bench/byo/plain_yaml.py (a hand-written loop whose settings are its own YAML file): every value its tune
# may try of the knobs the script's settings can say (the frame lists them: micro-batch, padding,
# attention). The micro-batch climbs to the divisors of the effective batch 16 next to the incumbent, 1
# included; padding_free and the flash kernels the script cannot say or a CPU cannot run. Its
# `sort_by_length` switch is left out: autotune's probe does not confirm it from this start (rows padded
# to max_len, so sorting saves no padding), so no tune of it tries group_by_length (bench.search counts a
# config asked for outside the grid: re-record with it if that changes).
BYO_GRID: dict[str, tuple] = {
    "per_device_train_batch_size": (1, 2, 4, 8, 16),
    "padding": ("max_length", "longest"),
    "attn_implementation": ("eager", "sdpa"),
}
# Fewer knobs on the GPU: the whole table must be recorded within about 4 minutes of a lent GPU (15
# device minutes a session, a config ~5 s). fp16 is left out: on a card with bf16 it runs at bf16's speed
# and needs loss scaling; tf32 stays (fp32's numerics class, tensor-core speed). The live tune beside it
# (scripts/gpu_session.sh, part grid) is held to the same knobs with `only=`.
GPU_GRID: dict[str, tuple] = {
    "padding": ("max_length", "longest", "padding_free"),
    "per_device_train_batch_size": (1, 2, 4, 8),
    "precision": ("fp32", "tf32", "bf16"),
}


@dataclass(frozen=True)
class Workload:
    name: str
    words: tuple[str, ...]           # `autotune tune` key=value words, without the run name
    grid: dict[str, tuple] = field(default_factory=lambda: dict(CPU_GRID))
    data: str = ""                   # a dataset the recorder writes first (see write_data)
    device: str = "cpu"
    # A bring-your-own script's words name files in a scratch copy of bench/byo (paths relative to the
    # copy's root, as bench.scripts runs them); `setup` names the bench.byo_setup function that makes in
    # it what is not committed.
    setup: str = ""

    @property
    def is_script(self) -> bool:
        return any(word.startswith("script=") for word in self.words)

    def job_words(self, data_dir: Path) -> list[str]:
        words = list(self.words)
        if self.data:
            words.append(f"dataset={write_data(self.data, data_dir)}")
        return words


def write_data(kind: str, folder: Path) -> Path:
    """Seeded local data the hub cannot give offline: rows of nearly one length (no padding to save)."""
    if kind != "short_uniform":
        raise ValueError(f"unknown data kind {kind!r}")
    rng = random.Random(0)
    path = folder / "short_uniform.jsonl"
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    with path.open("w") as handle:
        for _ in range(512):
            text = " ".join(rng.choice(words) for _ in range(200))[: rng.randint(56, 62)]
            handle.write(json.dumps({"text": text}) + "\n")
    return path


CPU_WORKLOADS = (
    # Short rows of nearly one length: padding is nearly free, the micro-batch split is what matters.
    Workload("cpu-short-uniform", ("model=tiny-qwen2", "max_len=64", "effective_batch=8"), data="short_uniform"),
    # Chat-like lengths with a long tail, padded to max_len: most of each batch is padding.
    Workload("cpu-long-tail", ("model=tiny-qwen2", "dataset=synthetic", "max_len=512", "effective_batch=8")),
    # LoRA on the same kind of data: far fewer trainable parameters, so the optimizer costs little.
    Workload("cpu-lora", ("model=tiny-qwen2", "dataset=synthetic", "max_len=256", "effective_batch=8",
                          "method=lora")),
    # Another workload than a transformer's, so no rule is tuned to three tables of one model.
    Workload("cpu-mlp", ("model=mlp", "max_len=256", "effective_batch=64", "mlp_width=512", "mlp_depth=4",
                         "mlp_rows=4096"), grid=dict(MLP_GRID)),
    # A user's own script, run as it is, its settings changed in its YAML: the runner, the parity and the
    # frame are the script route's, not autotune's own trainer.
    Workload("cpu-byo-plain-yaml", ("script=byo/plain_yaml.py", "script_args=byo/plain_yaml.yaml"),
             grid=dict(BYO_GRID)),
)
GPU_WORKLOADS = (
    Workload("gpu-long-tail", ("model=qwen2.5-0.5b-shape", "dataset=synthetic", "max_len=1024",
                               "effective_batch=8"), grid=dict(GPU_GRID), device="gpu"),
)
WORKLOADS = {w.name: w for w in CPU_WORKLOADS + GPU_WORKLOADS}


def configs(grid: dict[str, tuple], start: Knobs, device: dict[str, Any], effective_batch: int) -> Iterator[Knobs]:
    """Every combination of the grid that can run here, in grid order (the first value of each knob first)."""
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        knobs = Knobs.from_dict({**start.to_dict(), **dict(zip(names, values))})
        if applicable(knobs, device, effective_batch, start):
            yield knobs


def applicable(knobs: Knobs, device: dict[str, Any], effective_batch: int, start: Knobs | None = None) -> bool:
    """Can this whole config run here? Each setting that differs from the start (the naive one unless
    given: a script's own settings run as they are) is checked in the context of the rest of the config
    (group_by_length needs padding=longest, flash attention bf16)."""
    base = start.to_dict() if start is not None else NAIVE_START
    return all(not_applicable(name, value, knobs, device, effective_batch) is None
               for name, value in knobs.to_dict().items() if base.get(name) != value)
