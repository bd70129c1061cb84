"""A script job's best config: the keys to set in the user's own files and the command with its flags."""

from __future__ import annotations

import shlex
from typing import Any

from ...config.job import Job
from ...config.knobs import Knobs


def best_config(job: Job, knobs: Knobs, script: Any = None, **_: Any) -> dict[str, Any]:
    edits, flags = script.edits(knobs)
    words = ["python", job.script.path, *shlex.split(job.script.args), *flags]
    return {"schema_version": 1, "knobs": knobs.to_dict(), "config_edits": {
        label: {".".join(path): value for path, value in changes} for label, changes in edits.items()},
        "command": " ".join(shlex.quote(w) for w in words), "caveats": []}
