"""The job's keys and what each accepts: the one table behind `autotune tune --help`, the error
messages and the reference page (docs/reference/job-keys.md)."""

from __future__ import annotations

from .presets import PRESETS

# The framework-free runner's model: a plain PyTorch MLP over seeded random rows.
MLP_MODEL = "mlp"
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt")
JOB_KEYS = {
    "model": "mlp (a plain PyTorch MLP), a built-in preset (" + ", ".join(PRESETS) + "), a hub id like Qwen/Qwen2.5-0.5B, or a local folder",
    "dataset": "synthetic, a hub id like tatsu-lab/alpaca[:config], or a local .jsonl/.json/.parquet/.csv/.txt file "
               "(for a VLM also a folder of images with a .jsonl naming them)",
    "max_len": "a whole number of tokens >= 8, for example max_len=2048 (model=mlp: features per row, default 512)",
    "effective_batch": "a whole number of rows per optimizer step >= 1, for example effective_batch=16",
    "method": "sft or lora",
    "host": "local, user@host[:port] or a Host alias of your SSH config (host=gpu-box) of a box reachable over SSH "
            "(trials run there; records stay here), or "
            "ray (the Ray cluster at RAY_ADDRESS) or ray://HEAD:PORT: trials in parallel, one GPU each",
    "ssh_key": "a private key file for host=, in place of the SSH config's IdentityFile lines (default: those "
               "lines, then the SSH agent unless IdentitiesOnly; without them the agent, then ~/.ssh/id_*)",
    "ssh_config": "the SSH config file that resolves host= (aliases, User, Port, IdentityFile, ProxyJump; "
                  "default ~/.ssh/config; /dev/null for none)",
    "ssh_trust_new": "true to record an unknown host's key on first use (default false: it is refused)",
    "ssh_python": "the Python on the remote box, with torch and transformers (default python3)",
    "gpu": "a label for the record, for example gpu=4090",
    "max_trials": "a whole number >= 1, for example max_trials=20",
    "time": "a duration like 90s, 30m, 2h or 1h30m",
    "kb": "a folder for the knowledge base, for example kb=~/.autotune/kb",
    "weights": "pretrained or random (throughput does not need trained weights)",
    "seed": "a whole number, for example seed=0",
    "mem_limit": "memory a config may use, like 20GB, 512MiB or 1.5GiB (default: the device's)",
    "mem_margin": "share of the memory limit held back for safety, 0 to 0.9 (default 0.1)",
    "min_gain": "the smallest gain worth a trial's device time, 0 to 0.5 (default 0.03): a change that cannot be "
                "that much faster beyond the noise stops being measured",
    "script": "your training script (a .py file), run as it is; its knobs are read from its configs and flags",
    "script_configs": "the config files your script reads, comma-separated, for example script_configs=train.yaml",
    "only": "the knobs autotune may change, comma-separated, for example only=padding,per_device_train_batch_size "
            "(default: every knob); the others stay as you set them",
    "llm": "a model at the OpenAI-compatible server of OPENAI_BASE_URL (OpenAI's by default, key in "
           "OPENAI_API_KEY) that proposes changes and claims before each trial; off unless given",
    "llm_timeout": "how long to wait for one LLM answer, like 20s or 2m (default 60s; one retry)",
    "mlp_width": "with model=mlp: units per hidden layer, a whole number >= 1 (default 1024)",
    "mlp_depth": "with model=mlp: hidden layers, a whole number >= 1 (default 4)",
    "mlp_rows": "with model=mlp: distinct seeded random rows, a whole number >= 1 (default 8192)",
    "script_args": "arguments your script always needs, in quotes, for example script_args='--config train.yaml'",
    "script_launcher": "how you launch your script, in quotes: script_launcher=\"accelerate launch\" (its flags too, "
                       "--mixed_precision no) or script_launcher=\"torchrun --nproc_per_node=1\"; one process per trial",
    "script_knobs": "your script's own names for knobs, NAME:KNOB comma-separated, for example "
                    "script_knobs=micro_bsz:per_device_train_batch_size,accum:gradient_accumulation_steps "
                    "(where autotune does not recognise them)",
    "allow_image_resize": "true to let autotune try image resolution limits on a VLM (max_image_pixels; they "
                          "change what is trained, so never by default); default false",
    "allow_numerics_change": "true to let autotune try settings that change the numbers beyond precision noise "
                             "(8-bit AdamW states, fp8 matmuls, a 4-bit LoRA base), each held to a looser "
                             "parity tolerance the report states; default false",
    "strict_parity": "true to refuse a change that trains the same rows and objective with another weighting "
                     "(a script's per-micro-batch mean under another micro-batch split), which is kept by default "
                     "with the measured difference in the report; default false",
    "realize": "true or false: the last step runs baseline_config.yaml and best_config.yaml through `trl sft`, "
               "interleaved on the run's rows, and reports that speed-up beside the loop's (Hugging Face text jobs; "
               "default true)",
    "mlflow": "an MLflow tracking URI, for example mlflow=sqlite:///mlflow.db or mlflow=http://host:5000 (default: "
              "MLFLOW_TRACKING_URI if set, else off): the tune is a parent run, each trial a nested run; needs "
              "pip install -e \".[mlflow]\"",
    "mlflow_experiment": "the MLflow experiment the runs go to (default: MLFLOW_EXPERIMENT_NAME if set, else autotune)",
    "config": "a YAML job file of these keys, for example config=job.yaml (`max_len: 2048`, `smoke: true`); "
              "words typed after it override it; a run folder's job.yaml reruns that job",
    "from": "a TRL / transformers YAML config as `trl sft --config` reads it, for example from=sft.yaml: its "
            "model_name_or_path, dataset, max_length, batch sizes (their product is effective_batch) and the "
            "knobs it sets; config= and the words override it",
}

# The range of each numeric key (minimum, maximum, unit), checked when the words are read, before any file
# or folder is made: beyond these a job would exhaust the machine (10**17 tokens a row, 10**17 loader
# workers) or never end, instead of being refused. Each bound is far beyond any real job. Shown on the
# reference page (docs/reference/job-keys.md) and in the refusal.
RANGES: dict[str, tuple[float, float, str]] = {
    "max_len": (8, 2**20, "tokens"), "effective_batch": (1, 2**16, "rows"), "max_trials": (1, 10_000, "trials"),
    "time": (1, 366 * 86400, "seconds"), "seed": (0, 2**32 - 1, ""), "mem_limit": (2**20, 2**50, "bytes"),
    "mem_margin": (0, 0.9, ""), "llm_timeout": (1, 3600, "seconds"), "mlp_width": (1, 2**16, "units"),
    "min_gain": (0, 0.5, ""), "mlp_depth": (1, 1024, "layers"), "mlp_rows": (1, 10**7, "rows"),
    "gradient_accumulation_steps": (1, 2**16, "steps"),
}


def range_text(key: str) -> str:
    """`8 to 1,048,576 tokens`: a key's range as the reference page and the refusals say it."""
    low, high, unit = RANGES[key]
    return f"{low:,} to {high:,}" + (f" {unit}" if unit else "")
