"""Job: what is tuned. Parsed from `key=value` words, validated on construction.

Every bad input raises `JobError` with one line that names the key and the accepted form.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import JobError
from .inputs import PATH_KEYS, check_digits, check_path, check_word, check_writable_folder
from .knobs import CATALOG, NAIVE_START, Knobs, parse_knob_value
from .job_keys import JOB_KEYS, MLP_MODEL
from .job_values import SSH_KEYS, check_dataset, check_model, mlflow_keys, is_ssh, parse_duration, parse_share, parse_size, whole
from .presets import DEMO_PRESET, PRESETS, is_vision_preset

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
# An SSH host: user@name[:port], or a name alone (an alias of the SSH config, or a host name), as `ssh` takes.
_HOST = re.compile(r"^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(:\d{1,5})?$")
_RAY_HOST = re.compile(r"^ray://[A-Za-z0-9._-]+:\d{1,5}$")


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
    script_knobs: tuple[str, ...] = ()   # "name:knob" pairs (script/names.py)
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


def job_from_words(run: str, words: list[str]) -> tuple[Job, list[str]]:
    """The job and the mode words (smoke, resume, review) of `autotune tune RUN key=value ...`; config= and
    from= files become words first (job_files.py), so a file is validated as the words are."""
    from .job_files import expand

    pairs, modes = parse_words(expand(words))
    smoke = "smoke" in modes
    if "script" in pairs:
        return _script_job(run, pairs, smoke), modes
    if any(key in pairs for key in ("script_configs", "script_args", "script_knobs")):
        raise JobError("script_configs, script_args and script_knobs go with script=PATH; add "
                       "script=your_training_script.py")
    if pairs.get("model") == MLP_MODEL:
        return _mlp_job(run, pairs, smoke), modes
    if any(key in pairs for key in MLP_KEYS):
        raise JobError(f"{', '.join(k for k in MLP_KEYS if k in pairs)} go with model=mlp; add model=mlp or drop them")
    if smoke:
        pairs = {**SMOKE_DEFAULTS, **pairs}
        if "time" not in pairs and is_vision_preset(pairs["model"]):
            pairs["time"] = f"{VLM_SMOKE_TIME_BUDGET_S}s"
    for key in REQUIRED:
        if key not in pairs:
            raise JobError(f"missing required key '{key}': expected {key}=<{JOB_KEYS[key]}> (or add 'smoke' for the built-in demo job)")
    check_model(pairs["model"])
    check_dataset(pairs["dataset"])
    effective_batch = whole("effective_batch", pairs["effective_batch"], 1)
    job = Job(**_common(run, pairs, smoke), model=pairs["model"], dataset=pairs["dataset"],
              max_len=whole("max_len", pairs["max_len"], 8), effective_batch=effective_batch,
              method=pairs.get("method", "sft"),
              weights=pairs.get("weights", "random" if pairs["model"] in PRESETS else "pretrained"),
              allow_image_resize=parse_flag("allow_image_resize", pairs.get("allow_image_resize", "false")),
              realize=parse_flag("realize", pairs.get("realize", "true")), start=_start_knobs(pairs, effective_batch))
    return job, modes


def job_from_dict(run: str, keys: dict[str, Any]) -> Job:
    """The job a job file holding `keys` makes, for a caller in Python: `{"model": "mlp", "smoke": True}`
    passes the checks `autotune tune RUN config=FILE` does, and a bad key is one JobError line."""
    from .job_files import mapping_pairs

    pairs, modes = mapping_pairs(keys, "job", Path.cwd())
    if "fresh" in modes:
        raise JobError("job: fresh is how a tune runs, not part of the job; give autotune.tune(job, fresh=True)")
    return job_from_words(run, [f"{key}={value}" for key, value in pairs.items()] + modes)[0]


def parse_flag(key: str, text: str) -> bool:
    """A job key's true or false (`autotune suggest` reads allow_numerics_change with it too)."""
    if text.strip().lower() not in ("true", "false"):
        raise JobError(f"{key}={text!r}: expected {JOB_KEYS[key]}")
    return text.strip().lower() == "true"


def _start_knobs(pairs: dict[str, str], effective_batch: int) -> Knobs:
    """The user's starting config: the naive start with the knobs they gave."""
    start = dict(NAIVE_START)
    for key, text in pairs.items():
        if key in CATALOG:
            start[key] = parse_knob_value(key, text)
    if "gradient_accumulation_steps" in pairs:
        accumulation = _whole_knob("gradient_accumulation_steps", pairs["gradient_accumulation_steps"])
        if effective_batch % accumulation:
            raise JobError(f"gradient_accumulation_steps={accumulation} does not divide effective_batch={effective_batch}")
        micro = effective_batch // accumulation
        if "per_device_train_batch_size" in pairs and start["per_device_train_batch_size"] != micro:
            raise JobError("per_device_train_batch_size x gradient_accumulation_steps must equal effective_batch; give one of them")
        start["per_device_train_batch_size"] = micro
    return Knobs(**start)


def _mlp_job(run: str, pairs: dict[str, str], smoke: bool) -> Job:
    """The framework-free MLP: its own seeded rows and weights; the knobs of any PyTorch loop."""
    for key, why in (("method", "LoRA adapts a pretrained transformer; the MLP trains all its weights"),
                     ("weights", "the MLP starts from seeded random weights"),
                     ("realize", "its best config is a plain loop's settings, not a `trl sft` file")):
        if key in pairs:
            raise JobError(f"{key}= does not apply with model=mlp: {why}; drop {key}=")
    if pairs.get("dataset", "synthetic") != "synthetic":
        raise JobError(f"dataset={pairs['dataset']!r}: model=mlp trains on its own seeded random rows; "
                       "use dataset=synthetic or drop dataset=")
    fixed = [k for k in CATALOG if k in pairs and k not in MLP_KNOBS]
    if fixed:
        raise JobError(f"{', '.join(fixed)} does not apply with model=mlp (its rows are fixed-size vectors); drop it")
    if smoke and "time" not in pairs:
        pairs = {**pairs, "time": f"{MLP_SMOKE_TIME_BUDGET_S}s"}
    pairs = {**MLP_DEFAULTS, **pairs}
    effective_batch = whole("effective_batch", pairs["effective_batch"], 1)
    return Job(**_common(run, pairs, smoke), model=MLP_MODEL, dataset="synthetic",
               max_len=whole("max_len", pairs["max_len"], 8), effective_batch=effective_batch, weights="random",
               mlp_width=whole("mlp_width", pairs["mlp_width"], 1), mlp_depth=whole("mlp_depth", pairs["mlp_depth"], 1),
               mlp_rows=whole("mlp_rows", pairs["mlp_rows"], 1), start=_start_knobs(pairs, effective_batch))


def _common(run: str, pairs: dict[str, str], smoke: bool) -> dict[str, Any]:
    """The keys every job takes, whatever it trains."""
    host = pairs.get("host", "local")
    port = host.rpartition(":")[2] if ":" in host else "22"
    if host == "ray" or host.startswith("ray://"):
        port = host.rpartition(":")[2] if host.count(":") == 2 else ""
        if host != "ray" and not (_RAY_HOST.match(host) and 0 < int(port) < 65536):
            raise JobError(f"host={host!r}: expected {JOB_KEYS['host']}")
    elif host != "local" and (not _HOST.match(host) or not 0 < int(port) < 65536):
        raise JobError(f"host={host!r}: expected {JOB_KEYS['host']}")
    trust = pairs.get("ssh_trust_new", "false").lower()
    if trust not in ("true", "false"):
        raise JobError(f"ssh_trust_new={pairs['ssh_trust_new']!r}: expected true or false")
    if "ssh_key" in pairs and not Path(pairs["ssh_key"]).expanduser().is_file():
        raise JobError(f"ssh_key={pairs['ssh_key']!r}: no such file; expected {JOB_KEYS['ssh_key']}")
    if not is_ssh(host) and any(k in pairs for k in SSH_KEYS):
        raise JobError(f"{', '.join(SSH_KEYS)} go with an SSH host: host=user@host[:port] or host=ALIAS")
    # /dev/null too: no config at all, as `ssh -F /dev/null`.
    if "ssh_config" in pairs and not Path(pairs["ssh_config"]).expanduser().is_file() and pairs["ssh_config"] != "/dev/null":
        raise JobError(f"ssh_config={pairs['ssh_config']!r}: no such file; expected {JOB_KEYS['ssh_config']}")
    if "kb" in pairs:  # the tune writes there: a file or an unwritable folder is refused before the run folder
        check_writable_folder(Path(pairs["kb"]), f"kb={pairs['kb']}")
    return dict(
        run=run, host=host, gpu=pairs.get("gpu", ""),
        ssh_key=str(Path(pairs["ssh_key"]).expanduser()) if "ssh_key" in pairs else "",
        ssh_trust_new=trust == "true", ssh_python=pairs.get("ssh_python", "python3"),
        ssh_config=str(Path(pairs["ssh_config"]).expanduser()) if "ssh_config" in pairs else "",
        max_trials=whole("max_trials", pairs["max_trials"], 1) if "max_trials" in pairs else None,
        time_budget_s=parse_duration(pairs["time"]) if "time" in pairs else (SMOKE_TIME_BUDGET_S if smoke else None),
        kb=pairs.get("kb", ""), seed=whole("seed", pairs.get("seed", "0"), 0),
        mem_limit=parse_size(pairs["mem_limit"]) if "mem_limit" in pairs else None,
        mem_margin=parse_share(pairs.get("mem_margin", "0.1")), smoke=smoke, only=_only(pairs), **_llm(pairs),
        # Any loop can be offered an 8-bit optimizer: the opt-in is every job's (the tuner's frame applies it).
        allow_numerics_change=parse_flag("allow_numerics_change", pairs.get("allow_numerics_change", "false")),
        **mlflow_keys(pairs))


def _only(pairs: dict[str, str]) -> tuple[str, ...]:
    if "only" not in pairs:
        return ()
    names = tuple(n.strip() for n in pairs["only"].split(",") if n.strip())
    unknown = [n for n in names if n not in CATALOG]
    if not names or unknown:
        raise JobError(f"only={pairs['only']!r}: {', '.join(unknown) or 'no knob'} is not a knob; "
                       f"expected some of {', '.join(CATALOG)}")
    return names


def _llm(pairs: dict[str, str]) -> dict[str, Any]:
    model = pairs.get("llm", "").strip()
    if "llm_timeout" in pairs and not model:
        raise JobError("llm_timeout goes with llm=MODEL")
    if model and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/@-]*", model):
        raise JobError(f"llm={model!r}: expected {JOB_KEYS['llm']}")
    try:
        timeout = parse_duration(pairs["llm_timeout"]) if "llm_timeout" in pairs else 60
    except JobError:
        raise JobError(f"llm_timeout={pairs['llm_timeout']!r}: expected {JOB_KEYS['llm_timeout']}") from None
    return {"llm": model, "llm_timeout_s": timeout}


def _script_job(run: str, pairs: dict[str, str], smoke: bool) -> Job:
    """A job that runs the user's script: knobs, length and batch come from its configs and flags."""
    import shlex

    from .script import ScriptAdapter

    if "realize" in pairs:
        raise JobError("realize= does not apply with script=: your script is the trainer, and its best config is "
                       "the settings for your files and flags; drop realize=")
    script = Path(pairs["script"]).expanduser()
    if script.suffix != ".py" or not script.is_file():
        raise JobError(f"script={pairs['script']!r}: no such Python file; expected {JOB_KEYS['script']}")
    from .script.discover import parse_script

    parse_script(script)  # bytes that are not Python (latin-1 without a coding line) stop here, in one line
    labels = tuple(p.strip() for p in pairs.get("script_configs", "").split(",") if p.strip())
    for label in labels:
        if not Path(label).expanduser().is_file():
            raise JobError(f"script_configs: no such file {label!r}; expected {JOB_KEYS['script_configs']}")
        if Path(label).suffix.lower() not in (".yaml", ".yml", ".json", ".py"):
            raise JobError(f"script_configs: {label!r} is not a .yaml, .yml, .json or Python (.py) config file; "
                           "name the files your script reads its settings from")
    for key in ("model", "dataset", "method", "weights"):
        if key in pairs:
            raise JobError(f"{key}= does not apply with script=: your script chooses its {key}; drop {key}=")
    try:
        args = shlex.split(pairs.get("script_args", ""))
    except ValueError as error:
        raise JobError(f"script_args: {error}; quote the arguments as one shell word") from None
    from .script import names

    own_names = names.parse(pairs["script_knobs"]) if "script_knobs" in pairs else ()
    if pairs.get("host", "local") == "local":
        from .script import probe

        # A role no name was found for: a setting whose name suggests it is confirmed by one short run here.
        own_names += probe.confirmed(script, labels, args, Path.cwd(), own_names, smoke)
    adapter = ScriptAdapter.for_script(script, labels, args, None,
                                  whole("max_len", pairs["max_len"], 8) if "max_len" in pairs else None,
                                  whole("effective_batch", pairs["effective_batch"], 1)
                                  if "effective_batch" in pairs else None, own_names)
    if adapter.max_len is None:
        raise JobError(adapter.not_understood("no sequence length found in the script or its configs", ("max_len",))
                       + " (or give max_len= to record it)")
    for key in pairs:
        if key in CATALOG or key == "gradient_accumulation_steps":
            raise JobError(f"{key}= with script=: the starting config is what your script's files say; "
                           "change it there")
    return Job(**_common(run, pairs, smoke), model=f"script:{script.name}", dataset="(the script's)",
               max_len=adapter.max_len, effective_batch=adapter.effective_batch, method="sft", weights="random",
               script=str(script.resolve()), script_configs=labels + tuple(adapter.discovery.arg_configs),
               script_args=" ".join(shlex.quote(a) for a in args), script_knobs=own_names,
               start=adapter.start)


def _whole_knob(key: str, text: str) -> int:
    check_digits(key, text)
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise JobError(f"{key}={text!r}: expected a whole number >= 1")
    return int(text)
