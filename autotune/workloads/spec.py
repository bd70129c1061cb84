"""What a kind of job adds to a trial's spec (workloads/jobs.py `Kind.spec_fields`), and the inputs it is
made from. loop/trial_spec.py builds the fields every runner reads and adds the kind's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.job import Job
from ..config.knobs import Knobs
from ..config.messages import rows_needed
from ..config.types import JsonObject

# Steps after the measured window that the built-in runners time phase by phase (where the time goes).
PROFILE_STEPS = 1


@dataclass(frozen=True)
class SpecInputs:
    """What a kind's own spec fields are made from: the job, the run's knobs, the run folder's shared
    inputs (the rows and model config the frame wrote), the runs folder, the script's adapter and the
    folder it runs from (a script= job), and the folder a script's trial mirrors the user's tree in."""

    job: Job
    knobs: Knobs
    measure_steps: int
    rows_path: Path
    model_config_path: Path
    runs_path: Path
    script: Any = None
    cwd: Path | None = None
    workdir: Path | None = None


def frame_inputs(inputs: SpecInputs) -> JsonObject:
    """The built-in runners' (hf, mlp) own spec fields: the frame's shared inputs and the rows needed."""
    return {"rows_path": str(inputs.rows_path.resolve()), "model_config_path": str(inputs.model_config_path.resolve()),
            "rows_needed": rows_needed(inputs.job.effective_batch, inputs.measure_steps), "profile_steps": PROFILE_STEPS}
