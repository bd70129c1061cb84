"""A Hugging Face job's best config: the `trl sft` files the hand-over wrote (or, without them, the
settings alone in the installed SFTConfig's names), the command that runs them, and the VLM caveats."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.types import JsonObject
from ..vlm.caveats import caveats

if TYPE_CHECKING:
    from .handover_spec import PythonKwargs


class Handover(TypedDict):
    """What the hand-over wrote: the best file's keyword arguments, and the realized line."""

    kwargs: PythonKwargs
    summary: str


def best_config(job: Job, knobs: Knobs, vlm: str | None = None, handover: Handover | None = None,
                folder_path: Any = None, **_: Any) -> JsonObject:
    """`handover`: the best file's keyword arguments (`kwargs`) and the realized line (`summary`);
    `folder_path`: where the files are."""
    from .export import FILES, command, fallback_configs, python_kwargs

    folder_path = Path(folder_path) if folder_path is not None else Path("runs") / job.run
    if handover is None:  # the settings alone, no files (the installed SFTConfig's names: imports trl)
        handover = {"kwargs": python_kwargs(fallback_configs(job, knobs, job.smoke, folder_path.resolve())),
                    "summary": ""}
    kwargs = handover["kwargs"]
    return {"schema_version": 1, "knobs": knobs.to_dict(), "files": {k: str(folder_path / v) for k, v in FILES.items()},
            **kwargs, "realized": handover["summary"], "command": command(folder_path / FILES["best"]),
            "caveats": caveats(knobs, vlm)}
