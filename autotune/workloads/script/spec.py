"""What a trial of the user's script adds to the spec: copies of its configs edited to say the knobs, or
its own flags, and where its mirror of the user's tree goes. No ceiling and no profile steps: the script
owns its training step."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..spec import SpecInputs


def spec_fields(inputs: SpecInputs) -> dict[str, Any]:
    job, script, cwd = inputs.job, inputs.script, inputs.cwd
    assert job.script is not None and script is not None and cwd is not None, "a script's spec needs its job, adapter, cwd"
    edits, flags = script.edits(inputs.knobs)
    fields: dict[str, Any] = {
        "script": {"path": job.script.path, "cwd": str(cwd),
                   "configs": [{"label": label, "path": str((cwd / Path(label).expanduser()).resolve())}
                               for label in job.script.configs],
                   "edits": edits, "args": shlex.split(job.script.args),
                   "expect": script.expected(inputs.knobs),
                   "exclude": [str(inputs.runs_path.resolve())], "listing": script.listing()},
        "flags": flags, "ceiling": False, "profile_steps": 0,
    }
    if inputs.workdir is not None:
        fields["workdir"] = str(inputs.workdir.resolve())
    return fields
