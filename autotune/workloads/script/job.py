"""A script job's words: `script=` and its configs, flags and names, read into the Job (knobs, length and
batch come from the script's own files and flags)."""

from __future__ import annotations

from pathlib import Path

from ...config.job import Job, ScriptJob
from ...config.job_common import common_fields
from ...config.job_keys import JOB_KEYS
from ...config.job_values import whole
from ...config.knobs import CATALOG
from ...util.errors import JobError


def script_job(run: str, pairs: dict[str, str], smoke: bool) -> Job:
    """A job that runs the user's script: knobs, length and batch come from its configs and flags."""
    import shlex

    from . import ScriptAdapter

    if "realize" in pairs:
        raise JobError("realize= does not apply with script=: your script is the trainer, and its best config is "
                       "the settings for your files and flags; drop realize=")
    script = Path(pairs["script"]).expanduser()
    if script.suffix != ".py" or not script.is_file():
        raise JobError(f"script={pairs['script']!r}: no such Python file; expected {JOB_KEYS['script']}")
    from .discover import parse_script

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
    from . import launch, names

    launcher = launch.parse(pairs.get("script_launcher", ""))
    own_names = names.parse(pairs["script_knobs"]) if "script_knobs" in pairs else ()
    if pairs.get("host", "local") == "local":
        from . import probe

        # A role no name was found for: a setting whose name suggests it is confirmed by one short run here.
        own_names += probe.confirmed(script, labels, args, Path.cwd(), own_names, smoke)
    adapter = ScriptAdapter.for_script(script, labels, args, None,
                                  whole("max_len", pairs["max_len"], 8) if "max_len" in pairs else None,
                                  whole("effective_batch", pairs["effective_batch"], 1)
                                  if "effective_batch" in pairs else None, own_names, launcher)
    if adapter.max_len is None:
        raise JobError(adapter.not_understood("no sequence length found in the script or its configs", ("max_len",))
                       + " (or give max_len= to record it)")
    for key in pairs:
        if key in CATALOG or key == "gradient_accumulation_steps":
            raise JobError(f"{key}= with script=: the starting config is what your script's files say; "
                           "change it there")
    return Job(**common_fields(run, pairs, smoke), model=f"script:{script.name}", dataset="(the script's)",
               max_len=adapter.max_len, effective_batch=adapter.effective_batch, method="sft", weights="random",
               script=ScriptJob(path=str(script.resolve()), configs=labels + tuple(adapter.discovery.arg_configs),
                                args=" ".join(shlex.quote(a) for a in args), knobs=own_names,
                                launcher=" ".join(shlex.quote(w) for w in launcher)),
               start=adapter.start)
