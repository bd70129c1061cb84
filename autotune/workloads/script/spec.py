"""What a trial of the user's script adds to the spec: copies of its configs edited to say the knobs, or
its own flags, its own calls' keywords, the environment and the launcher's flags, and where its
mirror of the user's tree goes; the profile steps after the measured ones (where the time goes), and
the worst-case steps where the loop asks for the ceiling (workloads/script/stages.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

from ...config.types import JsonObject
from ..spec import PROFILE_STEPS, SpecInputs
from . import frameworks


def spec_fields(inputs: SpecInputs) -> JsonObject:
    job, script, cwd = inputs.job, inputs.script, inputs.cwd
    assert job.script is not None and script is not None and cwd is not None, "a script's spec needs its job, adapter, cwd"
    edits, flags = script.edits(inputs.knobs)
    edits, source, environment, launcher_flags = frameworks.split(edits)
    fields: JsonObject = {
        "script": {"path": job.script.path, "cwd": str(cwd),
                   "configs": [{"label": label, "path": str((cwd / Path(label).expanduser()).resolve())}
                               for label in job.script.configs],
                   "edits": edits, "args": shlex.split(job.script.args),
                   "expect": script.expected(inputs.knobs),
                   "exclude": [str(inputs.runs_path.resolve())], "listing": script.listing(),
                   "source_edits": source, "env": environment,
                   "launcher": frameworks.with_flags(shlex.split(job.script.launcher), launcher_flags)},
        # The loop says when the worst-case steps run (a memory knob moved); the profile steps always do.
        "flags": flags, "profile_steps": PROFILE_STEPS,
    }
    if inputs.workdir is not None:
        fields["workdir"] = str(inputs.workdir.resolve())
    return fields
