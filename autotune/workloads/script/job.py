"""A script job's words: `script=` and its configs, flags and names, read into the Job (knobs, length and
batch come from the script's own files and flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...config.job import Job, ScriptJob
from ...config.job_common import common_fields
from ...config.job_keys import JOB_KEYS
from ...config.inputs import check_not_special
from ...config.job_values import whole
from ...config.knobs import CATALOG
from ...util.errors import JobError


LAUNCHED_SMOKE_TIME_BUDGET_S = 285


def script_job(run: str, pairs: dict[str, str], smoke: bool, place: Any = None) -> Job:
    """A job that runs the user's script: knobs, length and batch come from its configs and flags; the
    probe runs, where wanted, go in the run folder, under its lock (`place`, a workloads.jobs.RunPlace)."""
    import shlex

    from . import ScriptAdapter

    if "realize" in pairs:
        raise JobError("realize= does not apply with script=: your script is the trainer, and its best config is "
                       "the settings for your files and flags; drop realize=")
    script = Path(pairs["script"]).expanduser()
    check_not_special(script, f"script={pairs['script']}")
    if script.suffix != ".py" or not script.is_file():
        raise JobError(f"script={pairs['script']!r}: no such Python file; expected {JOB_KEYS['script']}")
    from .discover import parse_script

    parse_script(script)  # bytes that are not Python (latin-1 without a coding line) stop here, in one line
    labels = tuple(p.strip() for p in pairs.get("script_configs", "").split(",") if p.strip())
    for label in labels:
        check_not_special(Path(label).expanduser(), f"script_configs={label}")
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
    from . import launch, names, tree

    launcher = launch.parse(pairs.get("script_launcher", ""))
    own_names = names.parse(pairs["script_knobs"]) if "script_knobs" in pairs else ()
    max_len = whole("max_len", pairs["max_len"], 8) if "max_len" in pairs else None
    effective = whole("effective_batch", pairs["effective_batch"], 1) if "effective_batch" in pairs else None
    for key in pairs:
        if key in CATALOG or key == "gradient_accumulation_steps":
            raise JobError(f"{key}= with script=: the starting config is what your script's files say; "
                           "change it there")
    if smoke and launcher and "time" not in pairs:
        # Each run starts the launcher and a fresh interpreter under it: a smoke run gets five minutes.
        pairs = {**pairs, "time": f"{LAUNCHED_SMOKE_TIME_BUDGET_S}s"}
    fields = common_fields(run, pairs, smoke)
    script_keys = dict(path=str(script.resolve()), args=" ".join(shlex.quote(a) for a in args),
                       launcher=" ".join(shlex.quote(w) for w in launcher))
    # Every key checked (the Job validates its values on construction) before anything of the script runs.
    Job(**fields, model=f"script:{script.name}", dataset="(the script's)", max_len=max_len or 8,
        effective_batch=effective or 1, method="sft", weights="random",
        script=ScriptJob(configs=labels, knobs=own_names, **script_keys))
    runs = Path(place.runs) if place is not None else Path("runs")
    tree.plan(Path.cwd(), [runs])   # each trial copies this folder: one past the cap stops here
    parsed: tuple[str, ...] = ()
    if pairs.get("host", "local") == "local" and place is not None and place.locked is not None:
        parsed, probed = _probed(place, script, labels, args, own_names, smoke)
        own_names += probed
    adapter = ScriptAdapter.for_script(script, labels, args, None, max_len, effective, own_names, parsed, launcher)
    if adapter.max_len is None:
        raise JobError(adapter.not_understood("no sequence length found in the script or its configs", ("max_len",))
                       + " (or give max_len= to record it)")
    return Job(**fields, model=f"script:{script.name}", dataset="(the script's)",
               max_len=adapter.max_len, effective_batch=adapter.effective_batch, method="sft", weights="random",
               script=ScriptJob(configs=labels + tuple(adapter.discovery.arg_configs), knobs=own_names, parsed=parsed,
                                **script_keys),
               start=adapter.start)


def _probed(place: Any, script: Path, labels: tuple[str, ...], args: list[str], own: tuple[str, ...],
            smoke: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the script's parser returned in a run, where its source falls short (workloads/script/parsed.py),
    and the names probe runs confirmed (probe.py), where discovery lacks a role a name suggests: run only
    now that every key is checked, and with the run's lock held, as trials run."""
    from . import parsed as parse_run, probe
    from .discover import parse_script
    from .parsers import needs_parse

    parsing = needs_parse(parse_script(script))
    if not parsing and not probe.wanted(script, labels, args, Path.cwd(), own):
        return (), ()
    with place.locked() as folder:
        parsed: tuple[str, ...] = ()
        if parsing:
            configs = [(Path(label).expanduser(), label) for label in labels]
            parsed = parse_run.stored(parse_run.probe(script, configs, args, Path.cwd(), smoke, folder,
                                                      [Path(place.runs)]), own)
        values = parse_run.read(parsed)[1]
        if parsing and not probe.wanted(script, labels, args, Path.cwd(), own, values):
            return parsed, ()
        return parsed, probe.confirmed(script, labels, args, Path.cwd(), own, smoke, folder, [Path(place.runs)], values)
