"""`resume` and `review`: a stopped or killed run continues from its folder; a finished one is reported again.

Resume reads two files of `runs/RUN/`: state.json (the LoopState saved after each trial) and
experiments.jsonl (the journal of every trial, none repeated); records the state does not cover (a
kill between a trial's record and the state's write, or a state file from before the state was
explicit) are taken in by `LoopState.catch_up`, the one place a record moves the state on. The run
folder's record is written before the knowledge base's (`Tuner._journal`): a kill between the two is
mended from the folder, the trial not measured again; a trial that was running when the tuner died
has no record anywhere and is redone. A torn last line of experiments.jsonl (a kill in mid-write) is
removed first: it is that interrupted trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..util.errors import AutotuneError, DamagedRunError, JobError
from ..config.inputs import read_json
from ..config.job import Job
from ..config.knobs import Knobs
from ..output.records import RunFolder
from ..util.io import truncate_durably
from ..config.measurement import Measurement
from ..config.records import TrialRecord
from ..config.types import JsonObject
from .limits import Frame, device_of
from .state import LoopState


# A hand edit or a failing disk left a file of the run folder unreadable: what to do instead.
DAMAGED = "the run folder is damaged; start a new RUN (this one's records stay as they are)"


# Kept in job.json beside the job: how the tune ran, which a `resume` runs the same way.
MODE_KEYS = ("fresh",)


def load_job(root: Path, run: str) -> Job:
    return load_run(root, run)[0]


def load_run(root: Path, run: str) -> tuple[Job, list[str]]:
    """The job of runs/RUN/ and the modes it was started with (`fresh`), for `resume` and `review`.
    Only the folder named: a job.json naming another run (a copied folder) is refused, never followed
    to that run's folder; so is a folder holding a link or a special file (RunFolder.check_own)."""
    folder = RunFolder(root, run)
    folder.check_own()
    if not folder.job.exists():
        raise JobError(f"RUN {run!r}: no run in {folder.path}; start it with `autotune tune {run} key=value ...`")
    data = stored(folder.job, run)
    modes = [key for key in MODE_KEYS if data.pop(key, False) is True]
    if data.get("run") != run:
        raise DamagedRunError(f"RUN {run!r}: {folder.job} is the job of run {str(data.get('run'))[:80]!r} (a copied "
                              f"folder?); a run continues only in its own folder: start a new run from it with "
                              f"`autotune tune NEW config={folder.path / 'job.yaml'}`")
    try:
        return Job.from_dict(data), modes
    except (JobError, TypeError, ValueError, AttributeError, KeyError) as error:
        raise DamagedRunError(f"RUN {run!r}: {folder.job} is not a job autotune wrote ({error}); {DAMAGED}") from None


def stored(path: Path, run: str) -> JsonObject:
    """A JSON file of the run folder (job, state, frame), or one RecordError line naming it."""
    data = read_json(path, f"RUN {run!r}", DamagedRunError, hint=DAMAGED, follow=False)
    if not isinstance(data, dict):
        raise DamagedRunError(f"RUN {run!r}: {path} holds no JSON object; {DAMAGED}")
    return data


def _drop_torn_tail(path: Path) -> None:
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        truncate_durably(path, end)


# What records that do not agree with each other raise where they are read (a baseline missing its
# measurements, a trial the state does not know, a folder where a file belongs, nesting no record has).
INCONSISTENT = (KeyError, IndexError, TypeError, ValueError, StopIteration, RecursionError, IsADirectoryError,
                NotADirectoryError, AttributeError)


def restore(tuner: Any) -> None:
    """Make `tuner.state` the state of a run to continue: state.json (LoopState.load), caught up with
    the records of experiments.jsonl it does not cover, and the frame the loop ranks on. Records that
    do not agree are one DamagedRunError line (exit 2), never a traceback."""
    try:
        _restore(tuner)
    except AutotuneError:
        raise
    except INCONSISTENT as error:
        raise DamagedRunError(f"RUN {tuner.job.run!r}: its records do not agree ({type(error).__name__}"
                              f"{': ' + str(error)[:200] if str(error) else ''}); {DAMAGED}") from None


def _restore(tuner: Any) -> None:
    folder, job = tuner.folder, tuner.job
    state = (LoopState.load(folder.state, job.start) if folder.state.exists()
             else LoopState.new(job.run, tuner.memory.run_id, job.start))
    if state.stop_reason:
        raise JobError(f"RUN {job.run!r} finished ({state.stop_reason}); nothing to resume. "
                       f"`autotune tune {job.run} review` writes its report again")
    # The knowledge base knows this run by the id it started with, across resumes.
    tuner.memory.run_id = state.run_id = state.run_id or tuner.memory.run_id
    tuner.state = state
    _drop_torn_tail(folder.experiments)
    records = folder.read_experiments()
    if tuner.display:
        for record in records:  # the trials so far, and the best so far for the live line
            tuner.display.finished(record)
    if not records:  # killed before the baseline finished: start the measuring over
        state.records = []
        tuner.begin()
        return
    baseline = records[0]
    if baseline["decision"] != "baseline" or baseline["state"] not in ("complete", "replayed"):
        raise JobError(f"RUN {job.run!r}: its baseline did not run ({baseline['state']}); start a new RUN")
    _frame(tuner, state.frame_facts if state.covered else None, Measurement.from_dict(baseline["measurements"][0]))
    if state.covered >= len(records):
        state.catch_up(records, job.start)  # the state was saved after the last record was written whole
        return
    # Killed between the last record and the state's write (or a state file from before it held the
    # loop): the knowledge base may lack that record, or its evidence. Records before it were complete.
    state.catch_up(records[:-1], job.start)
    before = state.incumbent
    state.catch_up(records, job.start)
    if len(records) == 1:
        before = state.incumbent  # the baseline learns on its own config, as measured
    tuner.memory.sync(records[-1], before.knobs, before.profile)


def _frame(tuner: Any, saved: Frame | None, base: Measurement) -> None:
    """The completed frame: the state's (with the limits found since), else frame.json completed again
    with the baseline; measured again when the shared inputs the trials read are gone."""
    folder = tuner.folder
    inputs = tuner.script is not None or folder.rows.exists()
    if saved and inputs:
        tuner.state.frame_facts = saved
        tuner.memory.start(saved)
        return
    frame = stored(folder.frame, tuner.job.run) if folder.frame.exists() else None
    if frame is None or not inputs:
        frame = tuner.frame()
    tuner.state.peaks = device_of(frame)["peaks"]
    tuner.memory.start(frame)
    tuner.complete_frame({k: v for k, v in frame.items() if k != "schema_version"}, base)


def review(root: Path, run: str, script: Any = None) -> tuple[Any, JsonObject, Job]:
    """The outputs of a run written again from its folder, without a device: (outcome, best config, job)."""
    job = load_job(root, run)
    folder = RunFolder(root, run)
    with folder.locked():  # its outputs are the live tuner's to write while one runs
        try:
            return _review(folder, job, script)
        except AutotuneError:
            raise
        except INCONSISTENT as error:
            raise DamagedRunError(f"RUN {run!r}: its records do not agree ({type(error).__name__}"
                                  f"{': ' + str(error)[:200] if str(error) else ''}); {DAMAGED}") from None


def _review(folder: RunFolder, job: Job, script: Any) -> tuple[Any, JsonObject, Job]:
    from ..output.report import write_best_config, write_report, write_results_tsv
    from .outcome import Incumbent, Outcome

    run = folder.path.name
    records = [TrialRecord.from_dict(r) for r in folder.read_experiments()]
    if not records or not folder.frame.exists():
        raise JobError(f"RUN {run!r}: no measured trial yet; nothing to review (`resume` continues it)")
    state = LoopState.load(folder.state, job.start) if folder.state.exists() else None
    kept = [r for r in records if r.decision == "keep"]
    best_record = kept[-1] if kept else records[0]
    best = Incumbent(Knobs.from_dict(dict(best_record.knobs)), [m.samples_per_s for m in best_record.measurements],
                     best_record.trial)
    base = records[0]
    outcome = Outcome(frame=stored(folder.frame, run),
                      baseline={"samples_per_s": base.samples_per_s,
                                "measurement": base.measurements[0].to_dict() if base.measurements else {}},
                      best=best, records=records, skipped=list(state.skipped) if state else [],
                      noise_floor=base.noise_floor or 0.0,
                      stop_reason=(state and state.stop_reason) or "not finished (reviewed while stopped)",
                      wall_s=round(state.elapsed_s, 1) if state else 0.0, folder=folder.path,
                      best_measurement=best_record.measurements[-1] if best_record.measurements else None,
                      device_runs=state.runs if state else sum(len(r.measurements) for r in records),
                      device_s=sum(state.walls) if state else sum(r.wall_s for r in records))
    write_results_tsv(folder, records)
    config = write_best_config(folder, job, best.knobs, script)
    write_report(folder, job, outcome, config)
    return outcome, config, job
