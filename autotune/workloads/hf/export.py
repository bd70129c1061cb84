"""The hand-over of a Hugging Face text job: `baseline_config.yaml` and `best_config.yaml`, each a file
`trl sft --config FILE` takes as it stands, and the same settings as Python keyword arguments.

Pure: the field names of the installed `SFTConfig` come in as `fields` (read in a child process, where
trl is imported), so the tuner's process never imports torch. The files name absolute paths: a preset's
model (random weights from a config, no hub has it) is saved in the run folder with a tokenizer that
loads offline, and synthetic rows as a dataset with an `input_ids` column (TRL then skips tokenising).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.types import JsonObject, KnobView
from ...util.io import write_text_atomic
from ...config.job_files import DATA_DIR, DATA_FILE  # noqa: F401 - the run folder's rows, which from= reads back
from .handover_spec import PythonKwargs, RealizedRecord
from .trl_args import DATA_KEYS, MODEL_KEYS, knob_fields, lora_fields, lora_kwargs, model_fields, outside_trl

# Folders of the run folder that hold what the files name when no hub or user file does.
MODEL_DIR = "model"
OUTPUT_DIR = "trl_output"
FILES = {"baseline": "baseline_config.yaml", "best": "best_config.yaml"}
SUFFIX_TO_BUILDER = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}


def model_is_saved(job: Job) -> bool:
    """The files name the run folder's saved model: a preset or a smoke run's tiny twin exists nowhere else."""
    from ...config.presets import PRESETS

    return job.model in PRESETS or job.smoke


def model_source(job: Job, run_path: Path) -> str:
    return str(run_path / MODEL_DIR) if model_is_saved(job) else job.model


def dataset_fields(job: Job, run_path: Path) -> JsonObject:
    """Where `trl sft` reads the rows: the run's own for synthetic data, else the user's dataset."""
    dataset = job.dataset
    if dataset == "synthetic":
        return {"dataset_name": str(run_path / DATA_DIR)}
    path = Path(dataset).expanduser()
    if path.suffix.lower() in SUFFIX_TO_BUILDER and path.is_file():
        # `load_dataset` takes a folder or a hub id, not one file: the mixture form names its builder.
        return {"datasets": [{"path": SUFFIX_TO_BUILDER[path.suffix.lower()], "data_files": str(path.resolve())}]}
    if path.exists():
        return {"dataset_name": str(path.resolve())}
    name, _, config = dataset.partition(":")
    return {"dataset_name": name, **({"dataset_config": config} if config else {})}


def trl_config(job: Job, knobs: Knobs, *, fields: frozenset[str], cpu: bool, run_path: Path,
               lora_targets: list[str] | None = None) -> JsonObject:
    """One `trl sft` config file's content: model, dataset, load arguments, adapter and every knob."""
    config: JsonObject = {"model_name_or_path": model_source(job, run_path), **dataset_fields(job, run_path),
                          **model_fields(knobs)}
    if job.method == "lora":
        if not lora_targets:
            raise ValueError("a LoRA config needs the module names the trials' adapter was put on")
        config.update(lora_fields(lora_targets))
    config.update(knob_fields(knobs, job.max_len, job.effective_batch, cpu=cpu, fields=fields))
    config.update(seed=job.seed, output_dir=str(run_path / OUTPUT_DIR))
    return config


def python_kwargs(config: JsonObject) -> PythonKwargs:
    """The same file as Python keyword arguments: `SFTConfig(**sft_config)`, `from_pretrained(model,
    **from_pretrained)` (also SFTConfig's `model_init_kwargs`), `peft.LoraConfig(**lora_config)`."""
    sft = {k: v for k, v in config.items() if k not in MODEL_KEYS and k not in DATA_KEYS}
    load = {k: config[k] for k in ("attn_implementation", "dtype")}
    kwargs: PythonKwargs = {"sft_config": sft, "from_pretrained": load, "model": str(config["model_name_or_path"]),
                            "dataset": {k: config[k] for k in DATA_KEYS if k in config}}
    if config.get("use_peft"):
        kwargs["lora_config"] = lora_kwargs(list(config["lora_target_modules"]))
    return kwargs


def yaml_text(config: JsonObject, header: str) -> str:
    import yaml

    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=False)


def command(path: Path) -> str:
    import shlex

    return shlex.join(["trl", "sft", "--config", str(path)])


def fallback_configs(job: Job, knobs: Knobs, cpu: bool, run_path: Path) -> JsonObject:
    """A file's content where no hand-over step ran (an image-text model, a run stopped before it):
    the installed SFTConfig's names, read here (imports trl), and peft's own "all-linear" shorthand."""
    from .trl_args import sft_fields

    return trl_config(job, knobs, fields=sft_fields(), cpu=cpu, run_path=run_path,
                      lora_targets=["all-linear"] if job.method == "lora" else None)


def header(job: Job, label: str, trial: int, record: RealizedRecord | None) -> str:
    ran = ("It ran in `trl sft` at the end of the tune (see report.md)." if record and record.get("state") == "complete"
           else "It was not run in `trl sft` by this tune" + (f": {record['reason']}" if record and record.get("reason")
                                                              else "."))
    return (f"autotune run {job.run}: the {label} config (trial {trial}) for `trl sft --config THIS_FILE`.\n{ran}\n"
            "Flags after --config override the file (e.g. --max_steps, --output_dir).")


def write_files(folder: Any, job: Job, best_config: KnobView, record: RealizedRecord | None,
                cpu: bool) -> PythonKwargs:
    """baseline_config.yaml and best_config.yaml in the run folder (the contents the hand-over step ran,
    where it ran); the best config's Python keyword arguments. What a file cannot hold (an allocator
    setting of the environment, fp8 matmuls) is a line of its header and `outside_trl` beside the kwargs.
    `record`: realized.json, where the hand-over step ran."""
    run_path = folder.path.resolve()
    best = Knobs.from_dict(best_config)
    if record and "configs" in record:
        configs, trials = record["configs"], {"baseline": 0, "best": record["best_trial"]}
    else:
        configs = {"baseline": fallback_configs(job, job.start, cpu, run_path),
                   "best": fallback_configs(job, best, cpu, run_path)}
        trials = {"baseline": 0, "best": record.get("loop_best_trial", -1) if record else -1}
    knobs = {"baseline": job.start, "best": best}
    for label, name in FILES.items():
        lines = outside_trl(knobs[label])
        text = header(job, label, trials[label], record) + "".join(f"\nAlso: {line}." for line in lines)
        write_text_atomic(folder.path / name, yaml_text(configs[label], text))
    kwargs = python_kwargs(configs["best"])
    if outside_trl(best):
        kwargs["outside_trl"] = outside_trl(best)
    return kwargs
