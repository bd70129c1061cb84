"""Words -> Job, for every kind of job, registered in one place: the first kind whose test matches the
words builds the Job in its own folder (workloads/KIND/job.py); the HF model is the default.

A new kind of job adds its row to KINDS (its words, its Job, its best-config form) and keeps its runner
at workloads/KIND/runner.py, which engine.runner_module finds from the kind's name (the spec's `runner`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping

from ..config.job import Job, parse_words
from ..config.job_keys import MLP_MODEL
from ..config.types import JsonObject
from ..util.errors import JobError
from .hf.best import best_config as hf_best
from .hf.job import complete as hf_complete, hf_job
from .mlp.best import best_config as mlp_best
from .mlp.job import MLP_KEYS, complete as mlp_complete, mlp_job
from .script.best import best_config as script_best
from .script.job import script_job
from .script.spec import spec_fields as script_fields
from .spec import SpecInputs, frame_inputs

@dataclass(frozen=True)
class RunPlace:
    """Where the run's folder goes and how its lock is held, given by the layer that owns run folders
    (api.run_place): a job that runs something of the user's to be read (a script's probe) runs it only
    inside `locked()`, which yields the run folder to work in. Without one, nothing of the user's runs."""

    runs: Path
    locked: Callable[[], ContextManager[Path]] | None = None
    made: list[Path] = field(default_factory=list)   # folders `locked()` made, for the caller to take back
    stamps: dict[Path, Any] = field(default_factory=dict)   # the times of the folder holding them, as they were


Builder = Callable[[str, dict[str, str], bool, RunPlace], Job]
@dataclass(frozen=True)
class Kind:
    """One kind of job: how its words are recognised and built, how a built Job is recognised, its
    runner (its name is the spec's `runner`; engine.runner_module finds workloads/NAME/runner.py), the
    fields its runner reads in a spec beyond the ones every runner reads, and its best-config form."""

    name: str
    takes: Callable[[dict[str, str]], bool]  # do these words make this kind of job
    build: Builder
    own_keys: tuple[str, ...]  # keys that belong to it alone (refused on another kind)
    is_kind: Callable[[Job], bool]
    best: Callable[..., JsonObject]  # (job, knobs, script=, vlm=, handover=, folder_path=) -> best_config.json
    spec_fields: Callable[[SpecInputs], JsonObject]
    # A Job built in Python (`autotune.Job(...)`) checked and given the defaults its words would get;
    # a Job its words built passes through unchanged.
    complete: Callable[[Job, bool], Job] = lambda job, check=True: job


# First match wins; the HF model is the default.
KINDS: tuple[Kind, ...] = (
    Kind("script", lambda pairs: "script" in pairs, script_job, ("script_configs", "script_args", "script_knobs",
                                                                        "script_launcher"),
         lambda job: job.script is not None, script_best, script_fields),  # read from its files by the Tuner
    Kind("mlp", lambda pairs: pairs.get("model") == MLP_MODEL, mlp_job, MLP_KEYS, lambda job: job.is_mlp, mlp_best,
         frame_inputs, mlp_complete),
    Kind("hf", lambda pairs: True, hf_job, (), lambda job: True, hf_best, frame_inputs, hf_complete),
)
_WITH = {"script": "script=PATH; add script=your_training_script.py", "mlp": "model=mlp; add model=mlp or drop them"}


def completed(job: Job, check: bool = True) -> Job:
    """`job` as its kind completes it: checked as its words would be, with their defaults filled in
    (`check`: also the names that read a file or the hub, as `autotune.tune` does)."""
    return kind_of(job).complete(job, check)


def kind_of(job: Job) -> Kind:
    """The kind a built Job is (its runner, its best-config form)."""
    return next(kind for kind in KINDS if kind.is_kind(job))


def job_from_words(run: str, words: list[str], place: RunPlace | None = None) -> tuple[Job, list[str]]:
    """The job and the mode words (smoke, resume, review) of `autotune tune RUN key=value ...`; config= and
    from= files become words first (config/job_files.py), so a file is validated as the words are.
    `place`: where the run's folder goes and its lock (autotune.job_from_words gives it)."""
    from ..config.job_files import expand

    pairs, modes = parse_words(expand(words))
    smoke = "smoke" in modes
    for kind in KINDS:
        if kind.takes(pairs):
            return kind.build(run, pairs, smoke, place or RunPlace(Path("runs"))), modes
        stray = [key for key in kind.own_keys if key in pairs]
        if stray:
            raise JobError(f"{', '.join(stray)} go with {_WITH[kind.name]}")
    raise AssertionError("the last kind takes every job")


def job_from_dict(run: str, keys: Mapping[str, object], place: RunPlace | None = None) -> Job:
    """The job a job file holding `keys` makes, for a caller in Python: `{"model": "mlp", "smoke": True}`
    passes the checks `autotune tune RUN config=FILE` does, and a bad key is one JobError line. (`keys`:
    the caller's own, checked here as a job file's are.)"""
    from ..config.job_files import mapping_pairs

    pairs, modes = mapping_pairs(keys, "job", Path.cwd())
    if "fresh" in modes:
        raise JobError("job: fresh is how a tune runs, not part of the job; give autotune.tune(job, fresh=True)")
    return job_from_words(run, [f"{key}={value}" for key, value in pairs.items()] + modes, place)[0]
