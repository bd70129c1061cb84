"""Words -> Job, for every kind of job, registered in one place: the first kind whose test matches the
words builds the Job in its own folder (workloads/KIND/job.py); the HF model is the default.

A new kind of job adds its builder here, its runner to engine.RUNNER_MODULES, and its best-config form
to output/report.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..config.job import MLP_KEYS, Job, parse_words
from ..config.job_keys import MLP_MODEL
from ..util.errors import JobError
from .hf.job import hf_job
from .mlp.job import mlp_job
from .script.job import script_job

Builder = Callable[[str, dict[str, str], bool], Job]

# (kind, does it take these words, its builder, keys that belong to it alone): first match wins.
KINDS: tuple[tuple[str, Callable[[dict[str, str]], bool], Builder, tuple[str, ...]], ...] = (
    ("script", lambda pairs: "script" in pairs, script_job, ("script_configs", "script_args", "script_knobs")),
    ("mlp", lambda pairs: pairs.get("model") == MLP_MODEL, mlp_job, MLP_KEYS),
    ("hf", lambda pairs: True, hf_job, ()),
)
_WITH = {"script": "script=PATH; add script=your_training_script.py", "mlp": "model=mlp; add model=mlp or drop them"}


def job_from_words(run: str, words: list[str]) -> tuple[Job, list[str]]:
    """The job and the mode words (smoke, resume, review) of `autotune tune RUN key=value ...`; config= and
    from= files become words first (config/job_files.py), so a file is validated as the words are."""
    from ..config.job_files import expand

    pairs, modes = parse_words(expand(words))
    smoke = "smoke" in modes
    for kind, takes, build, own_keys in KINDS:
        if takes(pairs):
            return build(run, pairs, smoke), modes
        stray = [key for key in own_keys if key in pairs]
        if stray:
            raise JobError(f"{', '.join(stray)} go with {_WITH[kind]}")
    raise AssertionError("the last kind takes every job")


def job_from_dict(run: str, keys: dict[str, Any]) -> Job:
    """The job a job file holding `keys` makes, for a caller in Python: `{"model": "mlp", "smoke": True}`
    passes the checks `autotune tune RUN config=FILE` does, and a bad key is one JobError line."""
    from ..config.job_files import mapping_pairs

    pairs, modes = mapping_pairs(keys, "job", Path.cwd())
    if "fresh" in modes:
        raise JobError("job: fresh is how a tune runs, not part of the job; give autotune.tune(job, fresh=True)")
    return job_from_words(run, [f"{key}={value}" for key, value in pairs.items()] + modes)[0]
