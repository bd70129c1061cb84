"""Job: what is tuned, validated on construction; the `key=value` word split every kind of job shares.

Each kind of job builds its Job from the words in its folder under workloads/ (workloads/jobs.py
dispatches). Every bad input raises `JobError` with one line that names the key and the accepted form.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ..util.errors import JobError
from .inputs import PATH_KEYS, check_path, check_word
from .knobs import CATALOG, Knobs
from .job_keys import JOB_KEYS, MLP_MODEL
from .presets import DEMO_PRESET, PRESETS

MODES = ("smoke", "resume", "review", "fresh")
# model=mlp checks an install in a minute: everything but the model has a default. Its rows are
# `max_len` features each (the MLP's input size), from a seeded generator, so dataset= is synthetic.
MLP_DEFAULTS = {"dataset": "synthetic", "max_len": "512", "effective_batch": "64", "mlp_width": "1024",
                "mlp_depth": "4", "mlp_rows": "8192"}
# Its smoke run (the install check) ends within two minutes, frame and baseline included.
MLP_SMOKE_TIME_BUDGET_S = 90
MLP_KEYS = ("mlp_width", "mlp_depth", "mlp_rows")
# The knobs of any PyTorch loop: all that apply to the MLP (its rows have no length, no attention, no
# images, and it checkpoints no layers).
MLP_KNOBS = ("per_device_train_batch_size", "precision", "torch_compile", "dataloader_num_workers",
             "dataloader_pin_memory", "optim")
REQUIRED = ("model", "dataset", "max_len", "effective_batch")
# What `smoke` fills in when a key is missing: the embedded default job.
SMOKE_DEFAULTS = {"model": DEMO_PRESET, "dataset": "synthetic", "max_len": "512", "effective_batch": "16"}
# A smoke run checks a setup in minutes: without `time=`, this is its budget.
SMOKE_TIME_BUDGET_S = 180
# An image-text preset's steps carry images through a vision tower and the processor: its smoke run
# gets longer, still within five minutes.
VLM_SMOKE_TIME_BUDGET_S = 285


@dataclass(frozen=True)
class Job:
    run: str
    model: str
    dataset: str
    max_len: int
    effective_batch: int
    method: str = "sft"
    host: str = "local"
    gpu: str = ""
    max_trials: int | None = None
    time_budget_s: int | None = None
    kb: str = ""
    weights: str = "pretrained"
    seed: int = 0
    mem_limit: int | None = None
    mem_margin: float = 0.1
    ssh_key: str = ""
    ssh_trust_new: bool = False
    ssh_python: str = "python3"
    ssh_config: str = ""
    script: str = ""
    script_configs: tuple[str, ...] = ()
    script_args: str = ""
    script_knobs: tuple[str, ...] = ()   # "name:knob" pairs (workloads/script/names.py)
    only: tuple[str, ...] = ()
    llm: str = ""
    llm_timeout_s: int = 60
    mlp_width: int = 0
    mlp_depth: int = 0
    mlp_rows: int = 0
    allow_image_resize: bool = False
    allow_numerics_change: bool = False
    realize: bool = True
    mlflow: str = ""             # the tracking URI typed; MLFLOW_TRACKING_URI is read when the tune starts
    mlflow_experiment: str = ""
    smoke: bool = False
    start: Knobs = field(default_factory=Knobs)

    def __post_init__(self) -> None:
        # `.` and `..` would make runs/RUN/ the runs folder or its parent (and, over SSH, the remote home).
        if self.run in (".", "..") or not re.fullmatch(r"[A-Za-z0-9._-]+", self.run):
            raise JobError(f"run name {self.run!r}: use letters, digits, '.', '_' or '-', not '.' or '..' alone "
                           "(it names one folder, runs/RUN/)")
        if self.max_len < 8:
            raise JobError(f"max_len={self.max_len}: expected {JOB_KEYS['max_len']}")
        if self.effective_batch < 1:
            raise JobError(f"effective_batch={self.effective_batch}: expected {JOB_KEYS['effective_batch']}")
        if self.method not in ("sft", "lora"):
            raise JobError(f"method={self.method!r}: expected {JOB_KEYS['method']}")
        if self.weights not in ("pretrained", "random"):
            raise JobError(f"weights={self.weights!r}: expected {JOB_KEYS['weights']}")
        if not 0 <= self.mem_margin <= 0.9:
            raise JobError(f"mem_margin={self.mem_margin}: expected {JOB_KEYS['mem_margin']}")
        micro = self.start.per_device_train_batch_size
        if self.effective_batch % micro:
            raise JobError(
                f"per_device_train_batch_size={micro} does not divide effective_batch={self.effective_batch}: "
                "pick a divisor, accumulation makes up the rest")

    @property
    def is_preset(self) -> bool:
        return self.model in PRESETS

    @property
    def is_mlp(self) -> bool:
        return self.model == MLP_MODEL

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["start"] = self.start.to_dict()
        data["script_configs"] = list(self.script_configs)
        data["script_knobs"] = list(self.script_knobs)
        data["only"] = list(self.only)
        data["schema_version"] = 1
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Job":
        values = {k: v for k, v in data.items() if k != "schema_version"}
        values["start"] = Knobs.from_dict(values.get("start", {}))
        values["script_configs"] = tuple(values.get("script_configs", ()))
        values["script_knobs"] = tuple(values.get("script_knobs", ()))
        values["only"] = tuple(values.get("only", ()))
        return cls(**values)


def parse_words(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split `key=value` words from mode words; reject repeats and strays."""
    pairs: dict[str, str] = {}
    modes: list[str] = []
    for word in words:
        check_word(word)
        if "=" not in word:
            if word in MODES:
                if word in modes:
                    raise JobError(f"'{word}' is given twice; give it once")
                modes.append(word)
                continue
            raise JobError(f"{word!r}: expected key=value or one of {', '.join(MODES)}")
        key, value = word.split("=", 1)
        if key in pairs:
            raise JobError(f"key '{key}' is given twice ({key}={pairs[key]!r} and {key}={value!r}); give it once")
        if key not in JOB_KEYS and key not in CATALOG and key != "gradient_accumulation_steps":
            raise JobError(f"unknown key '{key}'; accepted keys: {', '.join(list(JOB_KEYS) + list(CATALOG))}")
        if value == "":
            raise JobError(f"{key}= is empty; expected {JOB_KEYS.get(key, 'a value')}")
        if key in PATH_KEYS:
            check_path(key, value)
        pairs[key] = value
    return pairs, modes


def parse_flag(key: str, text: str) -> bool:
    """A job key's true or false (`autotune suggest` reads allow_numerics_change with it too)."""
    if text.strip().lower() not in ("true", "false"):
        raise JobError(f"{key}={text!r}: expected {JOB_KEYS[key]}")
    return text.strip().lower() == "true"
