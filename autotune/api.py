"""The library API: `tune(job, callbacks=...) -> Outcome` and `suggest(**keys) -> Advice`, what `autotune
tune` and `autotune suggest` do, for a caller in Python. The CLI parses its words into a Job, installs its
console display on the "autotune" logger and calls `tune` here.

Nothing here imports torch or transformers at import time: trials run in child processes, and the
loop's modules are imported when a tune starts.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from .executors.base import Executor
from .config.job import Job
from .loop.callbacks import Callback
from .loop.outcome import Outcome
from .loop.suggestion import Advice
from .util.errors import JobError

# AUTOTUNE_TEST_INJECT="3:oom,4:crash": a fault in a trial, for end-to-end tests of the states.
INJECT_ENV = "AUTOTUNE_TEST_INJECT"


def _inject_from_env() -> dict[int, str]:
    text = os.environ.get(INJECT_ENV, "")
    pairs = (item.split(":", 1) for item in text.split(",") if item)
    return {int(number): fault for number, fault in pairs}


def run_place(runs_dir: str | Path, run: str) -> Any:
    """Where RUN's folder goes and its lock, for a job whose reading runs something of the user's (a
    script's probe): the lock a tune holds, taken only once every key is checked; a folder that already
    holds a run, or one in use, is refused before anything runs."""

    from .config.inputs import check_writable_folder
    from .output.records import RunFolder
    from .workloads.jobs import RunPlace

    runs = Path(runs_dir)
    made: list[Path] = []
    stamps: dict[Path, Any] = {}

    @contextmanager
    def locked() -> Iterator[Path]:
        check_writable_folder(runs, f"--runs-dir {runs_dir}")
        folder = RunFolder(runs, run)
        if not made:   # the folders this makes, and the time of the one holding them, to take back
            made.extend(path for path in (runs, folder.path) if not path.exists())
            parent = made[0].parent if made else None
            stamps.update({parent: parent.stat()} if parent is not None and parent.is_dir() else {})
        with folder.locked():
            folder.check_new()
            yield folder.path.resolve()

    return RunPlace(runs, locked, made, stamps)


def _refused(place: Any, run: str) -> None:
    """A job refused after a probe took its lock leaves no folder that the probe made (only the lock in
    it), removed under the lock again so a tune that took it meanwhile keeps its own."""
    from .output.records import RunFolder

    if not place.made:
        return
    folder = RunFolder(place.runs, run)
    try:
        with folder.locked():
            if folder.path in place.made and [p.name for p in folder.path.iterdir()] == [".lock"]:
                (folder.path / ".lock").unlink()
                for path in reversed(place.made):
                    if path.is_dir() and not any(path.iterdir()):
                        path.rmdir()
                for path, stat in place.stamps.items():   # as it was: nothing of the user's changed
                    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    except (OSError, JobError):
        pass   # in use or gone: nothing of ours to remove


@contextmanager
def _placed(runs_dir: str | Path, run: str) -> Iterator[Any]:
    """RUN's place for reading a job; a refusal takes back the folder its probe made."""
    place = run_place(runs_dir, run)
    try:
        yield place
    except JobError:
        _refused(place, run)
        raise


def job_from_words(run: str, words: list[str], runs_dir: str | Path = "runs") -> tuple[Job, list[str]]:
    """The job and the mode words of `autotune tune RUN key=value ...` (`runs_dir`: where runs/RUN goes)."""
    from .workloads import jobs

    with _placed(runs_dir, run) as place:
        return jobs.job_from_words(run, words, place)


def job_from_dict(run: str, keys: dict[str, Any], runs_dir: str | Path = "runs") -> Job:
    """The job a job file holding `keys` makes, for a caller in Python: `{"model": "mlp", "smoke": True}`
    passes the checks `autotune tune RUN config=FILE` does, and a bad key is one JobError line."""
    from .workloads import jobs

    with _placed(runs_dir, run) as place:
        return jobs.job_from_dict(run, keys, place)


def tune(job: Job, executor: Executor | None = None, runs_dir: str | Path = "runs", fresh: bool = False,
         resume: bool = False, callbacks: Sequence[Callback] = ()) -> Outcome:
    """Run the whole loop on `job` into `runs_dir`/RUN/ and hand over the best config; its Outcome, with
    `best_config` holding what best_config.json holds. Progress is logged to the "autotune" logger (one
    INFO line per trial; configure `logging` to see it); the CLI draws it on the console.

    `executor`: where trials run (default: the job's host= one; one given here is the caller's to close).
    `fresh`: measure every trial, even those the knowledge base holds; `resume`: continue the run's folder.
    `callbacks`: `autotune.Callback`s told of each trial, the end, or an early stop.
    Bad input raises JobError, other failures AutotuneError; a failing trial is a state in the records."""
    from .executors import get_executor
    from .loop.callbacks import CallbackTracker
    from .workloads.jobs import completed
    from .loop.tuner import Tuner
    from .output.events import Events

    if not resume:
        job = completed(job)   # a Job built in Python is checked as its words would be (JobError)
    runs = Path(runs_dir)
    if not resume:
        from .config.inputs import check_writable_folder

        check_writable_folder(runs, f"--runs-dir {runs_dir}")  # before the run folder is made
    own = executor is None
    if executor is None:
        executor = get_executor(job.host, job.run, job.ssh.key, job.ssh.trust_new, job.ssh.python, job.ssh.config)
    display = Events()
    tuner = Tuner(job, executor, runs, display, _inject_from_env(), fresh=fresh)
    tuner.trackers.extend(CallbackTracker(callback) for callback in callbacks)
    # One lock from the first write to the report: a second `tune RUN` or `resume` stops (exit 2) until then.
    with tuner.folder.locked():
        return _tune(tuner, job, resume, executor, display, own)


def _tune(tuner: Any, job: Job, resume: bool, executor: Any, display: Any, own: bool) -> Outcome:
    from .output.realize import hand_over
    from .output.report import write_best_config, write_report, write_results_tsv

    if tuner.script is not None:
        display.note("your script, as autotune reads it (the script and its configs are never changed; trials run "
                     "on copies):")
        for line in tuner.script.listing():
            display.note(f"  {line}")
    try:
        outcome = tuner.run(resume=resume)
        if not job.is_mlp and tuner.script is None:
            display.running(None, "hand-over: the baseline's and the best's files in `trl sft`")
        hand_over(tuner.folder, job, executor, outcome)
        # Inside the guard: a failing write (a full disk) must end the MLflow parent FAILED, not RUNNING.
        write_results_tsv(tuner.folder, outcome.records)
        config = write_best_config(tuner.folder, job, outcome.best.knobs, tuner.script)
        write_report(tuner.folder, job, outcome, config)
    except BaseException as error:
        for tracker in tuner.trackers:
            tracker.stopped(tuner, error)
        raise
    finally:
        display.close()
        close = getattr(executor, "close", None)
        if own and close is not None:
            close()
    for tracker in tuner.trackers:  # the report, plots and configs exist now: the parent's artifacts
        tracker.finish(tuner, job, outcome, config)
    display.final_table(outcome, str(tuner.folder.path))
    for label, edits in config.get("config_edits", {}).items():
        settings = ", ".join(f"{key}: {value}" for key, value in edits.items())
        display.note(f"set in {label}: {settings}")
    if config.get("realized"):
        display.note(config["realized"].replace("**", ""))
    display.note(f"ready to run: {config['command']}")
    outcome.best_config = config
    return outcome


def suggest(**keys: Any) -> Advice:
    """What `autotune suggest key=value ...` advises, from the beliefs alone (no device), typed: its
    `changes` best first, `skipped`, `notes`; `to_dict()` is the object `--json` prints. Keys as the
    command takes them: `suggest(model="Qwen/Qwen2.5-7B", max_len=2048, effective_batch=16, gpu="4090")`."""
    from .config.job_files import words_of
    from .loop import advice
    from .loop.suggestion import Advice

    return Advice.from_dict(advice.advise(words_of(keys, "suggest")))
