"""Job files: `config=job.yaml` (the job's own keys, as YAML) and `from=sft.yaml` (a TRL / transformers
config as `trl sft --config` reads it), turned into `key=value` words so one grammar (job.py) validates
every job however it was given. Layers, lowest first: from=, config=, the words typed.

Also the reverse: a Job as the mapping a run folder's `job.yaml` holds, which reruns it as it ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ..util.errors import JobError
from .inputs import check_home, check_not_special, check_word, parse_yaml, read_text
from .job_keys import JOB_KEYS, MLP_MODEL
from .job_values import is_ssh, redact_args, redact_uri
from .knobs import CATALOG, NAIVE_START, parse_knob_value
from .types import JsonObject

if TYPE_CHECKING:
    from .job import Job

# The files read here are the user's own (a job file, a `trl sft` config, keyword arguments given in
# Python): open mappings of YAML values, `Mapping[str, object]`, each value checked where it is read.

FILE_KEYS = ("config", "from")
# Modes a job file may switch on (`smoke: true`); resume and review name a run folder, not a job.
FILE_MODES = ("smoke", "fresh")
ACCUMULATION = "gradient_accumulation_steps"
# Giving either one of these replaces a lower layer's pair: they are one split of effective_batch.
BATCH_SPLIT = ("per_device_train_batch_size", ACCUMULATION)
# `trl sft`'s own values where a file leaves them out (TrainingArguments / SFTConfig field defaults):
# the effective batch and the length a file trains with.
TRL_MICRO_BATCH, TRL_ACCUMULATION, TRL_MAX_LENGTH = 8, 1, 1024
# The run folder's own rows (runs/RUN/data/train.jsonl): the hand-over writes them (export.py) and a
# best_config.yaml names them; from= reads such a file back as the dataset that made them.
DATA_DIR = "data"
DATA_FILE = "train.jsonl"


def _scalar(label: str, key: str, value: object) -> str:
    """One YAML value as the text of its word: true/false, a number, a string, a list comma-joined."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        text = str(value)
        if text.strip():
            return text
    elif isinstance(value, list) and value and all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                                   for v in value):
        return ",".join(str(v) for v in value)
    raise JobError(f"{label}: {key}: {str(value)[:60]!r} is not one value; expected {JOB_KEYS.get(key, 'a value')}")


def _mapping(value: str, label: str, what: str) -> dict[str, object]:
    """A YAML file holding one mapping, read through the bounded reader (aliases, depth, size)."""
    check_word(f"{label}={value}")
    check_home(label, value)
    path = Path(value).expanduser()
    check_not_special(path, f"{label}={value}")
    if not path.is_file():
        raise JobError(f"{label}={value!r}: no such file; expected {JOB_KEYS[label]}")
    data = parse_yaml(read_text(path, f"{label}={value}"), f"{label}={value}")
    if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
        raise JobError(f"{label}={value!r}: holds no mapping of {what}; write one `key: value` per line, "
                       "for example `max_len: 2048`")
    return data


def read_job_file(value: str) -> tuple[dict[str, str], list[str]]:
    """config=FILE: its keys as word texts, and the modes it switches on."""
    return mapping_pairs(_mapping(value, "config", "job keys"), f"config={value}", Path(value).expanduser().parent)


def mapping_pairs(data: Mapping[str, object], label: str, base: Path) -> tuple[dict[str, str], list[str]]:
    """A job file's mapping (or a dict given in Python) as word texts, and the modes it switches on;
    a relative from= is read from `base` (a job file's folder)."""
    pairs: dict[str, str] = {}
    modes: list[str] = []
    accepted = [k for k in JOB_KEYS if k != "config"] + list(CATALOG) + [ACCUMULATION] + list(FILE_MODES)
    for key, raw in data.items():
        if key not in accepted:
            # The knobs are many: named by `autotune tune --help`, so the line stays one readable line.
            keys = [k for k in accepted if k not in CATALOG]
            raise JobError(f"{label}: unknown key '{key}'; accepted keys: {', '.join(keys)}, and any knob "
                           "(autotune tune --help lists them)")
        text = _scalar(label, key, raw)
        if key in FILE_MODES:
            if text not in ("true", "false"):
                raise JobError(f"{label}: {key}: {text!r}; expected true or false")
            modes += [key] if text == "true" else []
        elif key == "from" and not Path(text).expanduser().is_absolute():
            pairs[key] = str(base / text)  # beside the job file, not the shell
        else:
            pairs[key] = text
    return pairs, modes


def words_of(keys: Mapping[str, object], label: str) -> list[str]:
    """Keyword arguments given in Python as the `key=value` words a command takes (values as a job file's)."""
    return [f"{key}={_scalar(label, key, value)}" for key, value in keys.items()]


def _run_dataset(name: str) -> str:
    """A run folder's own rows (RUN/data, what its best_config.yaml names for synthetic data: tokens, no
    text column) as the dataset= that made them; any other name as it is."""
    from .inputs import read_json

    folder = Path(name).expanduser()
    record = folder.parent / "job.json"
    if folder.name == DATA_DIR and (folder / DATA_FILE).is_file() and record.is_file():
        job = read_json(record, f"from=: {record}")
        if isinstance(job, dict) and job.get("dataset") == "synthetic":
            return "synthetic"
    return name


def _dataset(data: Mapping[str, object], label: str) -> str | None:
    """`trl sft`'s dataset as a dataset= value: a name (with its config), or the one mixture entry."""
    if data.get("dataset_name"):
        name = _run_dataset(str(data["dataset_name"]))
        return f"{name}:{data['dataset_config']}" if data.get("dataset_config") else name
    mixture = data.get("datasets")
    if not mixture:
        return None
    if not isinstance(mixture, list) or len(mixture) != 1 or not isinstance(mixture[0], dict):
        raise JobError(f"{label}: datasets: autotune tunes on one dataset; keep one entry or give dataset=")
    entry = mixture[0]
    files = entry.get("data_files")
    if isinstance(files, list) and len(files) == 1:
        files = files[0]
    if isinstance(files, str):
        return files
    if files or not entry.get("path"):
        raise JobError(f"{label}: datasets: expected one `path` or one `data_files` file; give dataset=")
    return f"{entry['path']}:{entry['name']}" if entry.get("name") else str(entry["path"])


def _whole(label: str, key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobError(f"{label}: {key}: {value!r}; expected a whole number >= 1")
    return value


def read_trl_config(value: str) -> dict[str, str]:
    """from=FILE: the job's model, dataset, length, effective batch and the knobs the file names."""
    data = _mapping(value, "from", "`trl sft` settings")
    label, pairs = f"from={value}", {}
    if data.get("model_name_or_path"):
        pairs["model"] = str(data["model_name_or_path"])
    dataset = _dataset(data, label)
    if dataset:
        pairs["dataset"] = dataset
    if data.get("max_length", TRL_MAX_LENGTH) is not None:
        pairs["max_len"] = str(_whole(label, "max_length", data.get("max_length", TRL_MAX_LENGTH)))
    if "per_device_train_batch_size" in data or ACCUMULATION in data:
        micro = _whole(label, "per_device_train_batch_size", data.get("per_device_train_batch_size", TRL_MICRO_BATCH))
        accumulation = _whole(label, ACCUMULATION, data.get(ACCUMULATION, TRL_ACCUMULATION))
        pairs.update(effective_batch=str(micro * accumulation), per_device_train_batch_size=str(micro))
    if data.get("use_peft"):
        pairs["method"] = "lora"
    if isinstance(data.get("seed"), int):
        pairs["seed"] = str(data["seed"])
    for key, raw in _knobs(data).items():
        try:
            parse_knob_value(key, _scalar(label, key, raw))
        except JobError as error:
            raise JobError(f"{label}: {error}; fix the file or give {key}=") from None
        pairs[key] = _scalar(label, key, raw)
    return pairs


def _knobs(data: Mapping[str, object]) -> dict[str, object]:
    """The knobs a `trl sft` file names, under the catalog's names (trl_args.py maps the other way); the
    values as the file gives them, checked by the caller."""
    knobs: dict[str, object] = {}
    precisions = [name for name in ("bf16", "fp16", "tf32") if data.get(name) is True]
    if precisions:  # bf16 with tf32 matmuls trains in bf16: the autocast is what the knob names
        knobs["precision"] = precisions[0]
    elif any(data.get(name) is False for name in ("bf16", "fp16")):
        knobs["precision"] = "fp32"
    for name in ("activation_checkpointing", "gradient_checkpointing"):  # transformers 5.23's name first
        if name in data:
            knobs["gradient_checkpointing"] = data[name]
            break
    for name in ("torch_compile", "optim", "dataloader_num_workers", "dataloader_pin_memory", "use_liger_kernel",
                 "activation_offloading", "dataloader_persistent_workers", "load_in_4bit"):
        if name in data:
            knobs[name] = data[name]
    if data.get("torch_compile_mode"):
        knobs["torch_compile_mode"] = data["torch_compile_mode"]
    if data.get("torch_compile_mode") or data.get("torch_compile_backend"):
        # TrainingArguments turns compile on whenever a mode or backend is set, torch_compile: false or not.
        knobs["torch_compile"] = True
    if data.get("dataloader_prefetch_factor"):
        knobs["dataloader_prefetch_factor"] = data["dataloader_prefetch_factor"]
    given = data.get("model_init_kwargs")
    init: Mapping[str, object] = given if isinstance(given, dict) else {}
    dtype = init.get("dtype") or data.get("dtype")
    if dtype in ("float32", "bfloat16") and not data.get("load_in_4bit"):
        knobs["dtype"] = dtype
    attention = init.get("attn_implementation") or data.get("attn_implementation")
    if attention:
        knobs["attn_implementation"] = attention
    if "train_sampling_strategy" in data:
        knobs["group_by_length"] = data["train_sampling_strategy"] == "group_by_length"
    elif "group_by_length" in data:
        knobs["group_by_length"] = data["group_by_length"]
    if data.get("padding_free") is True:
        knobs["padding"] = "padding_free"
    elif "max_length" in data or "padding_free" in data or "pad_to_multiple_of" in data:
        # TRL's collator pads a batch to its longest row; to max_length only when that is the multiple.
        fixed = data.get("pad_to_multiple_of") is not None and data.get("pad_to_multiple_of") == data.get("max_length")
        knobs["padding"] = "max_length" if fixed else "longest"
    return knobs


def _layer(lower: dict[str, str], upper: Mapping[str, str]) -> dict[str, str]:
    """`upper` over `lower`; a batch split given above replaces the one below."""
    merged = dict(lower)
    if any(key in upper for key in BATCH_SPLIT):
        for key in BATCH_SPLIT:
            merged.pop(key, None)
    merged.update(upper)
    return merged


def expand(words: list[str]) -> list[str]:
    """The words with config= and from= replaced by what their files say; the typed words win."""
    files = {}
    rest = []
    for word in words:
        key, sep, value = word.partition("=")
        if sep and key in FILE_KEYS:
            if key in files:
                raise JobError(f"key '{key}' is given twice; give one {key}= file")
            if not value:
                raise JobError(f"{key}= is empty; expected {JOB_KEYS[key]}")
            files[key] = value
        else:
            rest.append(word)
    if not files:
        return words
    config, modes = read_job_file(files["config"]) if "config" in files else ({}, [])
    source = files.get("from") or config.pop("from", None)
    config.pop("from", None)
    merged = _layer(read_trl_config(source) if source else {}, config)
    typed = {word.split("=", 1)[0]: word for word in rest if "=" in word}
    merged = _layer(merged, {key: "" for key in typed})
    return ([f"{key}={value}" for key, value in merged.items() if key not in typed]
            + [mode for mode in modes if mode not in rest] + rest)


def job_mapping(job: "Job", shared: bool = False) -> JsonObject:
    """The keys of `job` as a job file: `autotune tune RUN2 config=THIS` builds the same job. A password in
    the mlflow= URI is *** (MLFLOW_TRACKING_PASSWORD holds it); `shared` (what the MLflow store gets) hides
    the values of credential flags in script_args too, which a rerun from the run folder still needs."""
    script = job.script is not None
    out: JsonObject = {}
    if job.script is not None:
        args = redact_args(job.script.args) if shared else job.script.args
        out.update(script=job.script.path, script_configs=list(job.script.configs), script_args=args,
                   script_knobs=list(job.script.knobs), script_launcher=job.script.launcher)
        out = {k: v for k, v in out.items() if v}
    else:
        out.update(model=job.model, dataset=job.dataset)
    out.update(max_len=job.max_len, effective_batch=job.effective_batch)
    if not script and job.model != MLP_MODEL:
        out.update(method=job.method, weights=job.weights, allow_image_resize=job.allow_image_resize,
                   realize=job.realize)
    if job.mlp is not None:
        out.update(mlp_width=job.mlp.width, mlp_depth=job.mlp.depth, mlp_rows=job.mlp.rows)
    out.update(host=job.host, seed=job.seed, mem_margin=job.mem_margin, min_gain=job.min_gain,
               allow_numerics_change=job.allow_numerics_change)
    if job.strict_parity:
        out["strict_parity"] = True
    optional = {"gpu": job.gpu, "kb": job.kb, "max_trials": job.max_trials, "only": list(job.only),
                "time": f"{job.time_budget_s}s" if job.time_budget_s else None,
                "mem_limit": f"{job.mem_limit}B" if job.mem_limit else None,
                "llm": job.llm.model if job.llm else None, "llm_timeout": f"{job.llm.timeout_s}s" if job.llm else None,
                "mlflow": redact_uri(job.tracking.mlflow), "mlflow_experiment": job.tracking.experiment}
    if is_ssh(job.host):
        optional.update(ssh_key=job.ssh.key, ssh_config=job.ssh.config, ssh_trust_new=job.ssh.trust_new,
                        ssh_python=job.ssh.python)
    out.update({k: v for k, v in optional.items() if v not in (None, "", [])})
    if not script:
        start = job.start.to_dict()
        out.update({k: v for k, v in start.items() if v != NAIVE_START[k] or k == "per_device_train_batch_size"})
    if job.smoke:
        out["smoke"] = True
    return out


def job_yaml(job: "Job", shared: bool = False) -> str:
    import yaml

    return str(f"# autotune run {job.run}: the job as it ran; rerun it with\n"
            f"#   autotune tune NEW_RUN config=runs/{job.run}/job.yaml [key=value ...]\n"
            + yaml.safe_dump(job_mapping(job, shared), sort_keys=False, default_flow_style=False))
