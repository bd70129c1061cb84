"""Job: what is tuned, validated on construction; the `key=value` word split every kind of job shares.

Each kind of job builds its Job from the words in its folder under workloads/ (workloads/jobs.py
dispatches). Every bad input raises `JobError` with one line that names the key and the accepted form.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..util.errors import JobError
from .inputs import PATH_KEYS, check_path, check_word
from .knobs import CATALOG, Knobs
from .job_keys import JOB_KEYS, MLP_MODEL
from .presets import PRESETS
from .types import JsonObject

MODES = ("smoke", "resume", "review", "fresh")
# A smoke run checks a setup in minutes: without `time=`, this is its budget (a kind may set its own).
SMOKE_TIME_BUDGET_S = 180


@dataclass(frozen=True)
class SshSettings:
    """How an SSH host is reached (the `ssh_*` keys); the defaults are plain `ssh`'s."""

    key: str = ""
    trust_new: bool = False
    python: str = "python3"
    config: str = ""


@dataclass(frozen=True)
class ScriptJob:
    """The user's own training script (`script=`): the file, the configs it reads, its arguments, and the
    "name:knob" pairs that say which of its settings is which knob (workloads/script/names.py)."""

    path: str
    configs: tuple[str, ...] = ()
    args: str = ""
    knobs: tuple[str, ...] = ()
    # What the script's parser returned in a run, where its source falls short (workloads/script/parsed.py):
    # "@Parser.method", then name=<JSON value> for each field discovery reads.
    parsed: tuple[str, ...] = ()
    launcher: str = ""     # `accelerate launch ...` / `torchrun ...` (shell-quoted); empty: `python script.py`


@dataclass(frozen=True)
class MlpShape:
    """The framework-free MLP's size (`model=mlp`)."""

    width: int
    depth: int
    rows: int


@dataclass(frozen=True)
class LlmProposer:
    """The LLM asked for hypotheses (`llm=`), and how long one answer may take."""

    model: str
    timeout_s: int = 60


@dataclass(frozen=True)
class Tracking:
    """Where the run is mirrored (`mlflow=`): the URI typed (MLFLOW_TRACKING_URI is read when the tune
    starts) and the experiment's name."""

    mlflow: str = ""
    experiment: str = ""


# The groups' flat names in a Job's stored form (job.json, the child's spec, job files): that form is
# the one run folders have always held, so old ones still resume.
_FLAT = {"ssh": {"key": "ssh_key", "trust_new": "ssh_trust_new", "python": "ssh_python", "config": "ssh_config"},
         "script": {"path": "script", "configs": "script_configs", "args": "script_args", "knobs": "script_knobs",
                    "parsed": "script_parsed", "launcher": "script_launcher"},
         "mlp": {"width": "mlp_width", "depth": "mlp_depth", "rows": "mlp_rows"},
         "llm": {"model": "llm", "timeout_s": "llm_timeout_s"},
         "tracking": {"mlflow": "mlflow", "experiment": "mlflow_experiment"}}
_GROUPS = {"ssh": SshSettings, "script": ScriptJob, "mlp": MlpShape, "llm": LlmProposer, "tracking": Tracking}
# What an absent optional group is stored as, as before the groups.
_ABSENT = {"script": ScriptJob(""), "mlp": MlpShape(0, 0, 0), "llm": LlmProposer("")}


@dataclass(frozen=True)
class Job:
    """What is tuned. The keys every job has are fields; the rest are groups: `ssh` (always, with plain
    ssh's defaults), `tracking` (always), and `script`, `mlp`, `llm` where the job has one (else None)."""

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
    weights: str = ""                # "": the kind's default (random for a preset or the MLP, else pretrained)
    seed: int = 0
    mem_limit: int | None = None
    mem_margin: float = 0.1
    # The gain worth a trial's device time: a change that cannot be this much faster beyond the noise
    # stops being measured (the report says it).
    min_gain: float = 0.03
    only: tuple[str, ...] = ()
    allow_image_resize: bool = False
    allow_numerics_change: bool = False
    strict_parity: bool = False      # another weighting of the same rows (a micro-batch split) is refused too
    realize: bool = True
    smoke: bool = False
    start: Knobs = field(default_factory=Knobs)
    ssh: SshSettings = field(default_factory=SshSettings)
    tracking: Tracking = field(default_factory=Tracking)
    script: ScriptJob | None = None
    mlp: MlpShape | None = None
    llm: LlmProposer | None = None

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
        if self.weights not in ("", "pretrained", "random"):
            raise JobError(f"weights={self.weights!r}: expected {JOB_KEYS['weights']}")
        if not 0 <= self.mem_margin <= 0.9:
            raise JobError(f"mem_margin={self.mem_margin}: expected {JOB_KEYS['mem_margin']}")
        if not 0 <= self.min_gain <= 0.5:
            raise JobError(f"min_gain={self.min_gain}: expected {JOB_KEYS['min_gain']}")
        if self.mlp is not None and not self.is_mlp:
            raise JobError("mlp_width, mlp_depth and mlp_rows go with model=mlp; add model=mlp or drop them")
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

    def to_dict(self) -> JsonObject:
        """The stored form: flat, one key per job key (job.json)."""
        data: JsonObject = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name in _GROUPS:
                group = value if value is not None else _ABSENT[item.name]
                data.update({flat: _plain(getattr(group, name)) for name, flat in _FLAT[item.name].items()})
            elif item.name == "start":
                data["start"] = value.to_dict()
            else:
                data[item.name] = _plain(value)
        data["schema_version"] = 1
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Job":
        values = {k: v for k, v in data.items() if k != "schema_version"}
        for name, group in _GROUPS.items():
            found = {inner: values.pop(flat) for inner, flat in _FLAT[name].items() if flat in values}
            found = {k: tuple(v) if isinstance(v, list) else v for k, v in found.items()}
            if name in _ABSENT and not found.get(next(iter(_FLAT[name]))):
                continue  # absent: no script path, no MLP width, no LLM model
            values[name] = group(**found)
        values["start"] = Knobs.from_dict(values.get("start", {}))
        values["only"] = tuple(values.get("only", ()))
        return cls(**values)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


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
