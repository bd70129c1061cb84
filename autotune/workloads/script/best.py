"""A script job's best config: the keys to set in the user's own files (the script's own calls among
them) and the command with its flags, launched as the user launches it."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.types import JsonObject
from . import frameworks, launch

if TYPE_CHECKING:
    from .adapter import ScriptAdapter


def best_config(job: Job, knobs: Knobs, script: "ScriptAdapter | None" = None, **_: object) -> JsonObject:
    """best_config.json for a script job: the edits to the user's files and the command to run."""
    assert job.script is not None and script is not None, "a script job's best config"
    edits, flags = script.edits(knobs)
    configs, source, environment, launcher_flags = frameworks.split(edits)
    if source:
        configs[job.script.path] = [([f"{where[0]}({where[1]})"], value)
                                    for where, value in source]
    launcher = frameworks.with_flags(shlex.split(job.script.launcher), launcher_flags)
    words = launch.shown(launcher, job.script.path, [*shlex.split(job.script.args), *flags])
    prefix = [f"{name}={shlex.quote(value)}" for name, value in environment.items()]
    return {"schema_version": 1, "knobs": knobs.to_dict(), "config_edits": {
        label: {".".join(path): value for path, value in changes} for label, changes in configs.items()},
        "command": " ".join(prefix + [shlex.quote(w) for w in words]), "caveats": []}
