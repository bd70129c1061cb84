"""`resume` and `review`: a stopped or killed run continues from its folder; a finished one is reported again.

Resume rebuilds the loop's state from `runs/RUN/`: the baseline and every recorded trial (none is
repeated), the incumbent they led to, the changes already measured and those that did not fit. A trial
the knowledge base holds but the run folder does not (the tuner was killed between the two writes) is
written back to the folder from the knowledge base, not measured again; a trial that was running when
the tuner died has no record anywhere and is redone. A torn last line of experiments.jsonl (a kill in
mid-write) is removed first: it is that interrupted trial.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..util.errors import JobError, RecordError
from ..config.inputs import read_json
from ..config.job import Job
from ..config.knobs import Knobs
from ..reasoner import key
from ..output.records import RunFolder


# A hand edit or a failing disk left a file of the run folder unreadable: what to do instead.
DAMAGED = "the run folder is damaged; start a new RUN (this one's records stay as they are)"


def load_job(root: Path, run: str) -> Job:
    folder = RunFolder(root, run)
    if not folder.job.exists():
        raise JobError(f"RUN {run!r}: no run in {folder.path}; start it with `autotune tune {run} key=value ...`")
    try:
        return Job.from_dict(stored(folder.job, run))
    except (JobError, TypeError, ValueError, AttributeError) as error:
        raise RecordError(f"RUN {run!r}: {folder.job} is not a job autotune wrote ({error}); {DAMAGED}") from None


def stored(path: Path, run: str) -> dict[str, Any]:
    """A JSON file of the run folder (job, state, frame), or one RecordError line naming it."""
    data = read_json(path, f"RUN {run!r}", RecordError, hint=DAMAGED)
    if not isinstance(data, dict):
        raise RecordError(f"RUN {run!r}: {path} holds no JSON object; {DAMAGED}")
    return data


def _drop_torn_tail(path: Path) -> None:
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(end)
            os.fsync(handle.fileno())


def record_from_kb(trial: dict[str, Any]) -> dict[str, Any]:
    """The run-folder record of a trial the knowledge base holds."""
    from .outcome import summarize

    measurements = trial.get("measurements") or []
    return {
        "run": trial["run"], "trial": trial["trial"], "change": trial["change"], "knobs": trial["knobs"],
        "state": trial["state"], "decision": trial["decision"], "reason": trial["reason"],
        "measurements": measurements, **summarize(measurements),
        "ratio": trial.get("ratio"), "interval": trial.get("interval"), "confidence": trial.get("confidence"),
        "incumbent_samples_per_s": trial.get("incumbent_samples_per_s"), "noise_floor": trial.get("noise_floor"),
        "parity": trial.get("parity"), "ceiling": measurements[0].get("ceiling") if measurements else None,
        "stderr_tail": None, "wall_s": trial.get("wall_s") or 0.0, "hypothesis": trial.get("hypothesis"),
        "beliefs": [], "replayed_from": trial.get("replayed_from"),
    }


def restore(tuner: Any) -> tuple[dict[str, Any], Any, dict[str, Any], float, int]:
    """(frame, incumbent, baseline measurement, noise floor, last trial) of a run to continue."""
    from .outcome import Incumbent

    folder = tuner.folder
    state = stored(folder.state, tuner.job.run) if folder.state.exists() else {}
    if state.get("stop_reason"):
        raise JobError(f"RUN {tuner.job.run!r} finished ({state['stop_reason']}); nothing to resume. "
                       f"`autotune tune {tuner.job.run} review` writes its report again")
    if state.get("run_id"):
        tuner.memory.run_id = state["run_id"]
    tuner.started = time.monotonic() - float(state.get("elapsed_s", 0))
    _drop_torn_tail(folder.experiments)
    records = folder.read_experiments()
    done = {r["trial"] for r in records}
    for orphan in sorted(tuner.memory.experience.trials(tuner.memory.run_id), key=lambda t: t["trial"]):
        if orphan["trial"] not in done:
            record = record_from_kb(orphan)
            # Killed after the trial's record, before the beliefs took its evidence: applied now, once.
            record["beliefs"] = tuner.memory.relearn(orphan)
            folder.append_experiment(record)
            records.append(record)
            done.add(orphan["trial"])
    tuner.records = records
    if tuner.display:
        for record in records:  # the trials so far, and the best so far for the live line
            tuner.display.finished(record)
    if not records:  # killed before the baseline finished: start the measuring over
        frame, incumbent, base, floor = tuner.begin()
        return frame, incumbent, base, floor, 0
    baseline = records[0]
    if baseline["decision"] != "baseline" or baseline["state"] not in ("complete", "replayed"):
        raise JobError(f"RUN {tuner.job.run!r}: its baseline did not run ({baseline['state']}); start a new RUN")
    frame_path = folder.frame
    frame = stored(frame_path, tuner.job.run) if frame_path.exists() else None
    if frame is None or (tuner.script is None and not folder.rows.exists()):
        frame = tuner.frame()
    tuner.peaks = frame["device"]["peaks"]
    tuner.memory.start(frame)
    base = baseline["measurements"][0]
    frame = tuner.complete_frame({k: v for k, v in frame.items() if k != "schema_version"}, base)
    incumbent = Incumbent(tuner.job.start, [], 0)
    for measurement in baseline["measurements"]:
        incumbent.add(measurement, baseline.get("placement"))
    tuner.measured.add(key(tuner.job.start))
    for record in records[1:]:
        knobs = Knobs.from_dict(record["knobs"])
        tuner.measured.add(key(knobs))
        if (record.get("replayed_state") or record["state"]) == "oom":
            tuner.blocked.setdefault(key(incumbent.knobs), set()).add(record["change"])
        if record["state"] == "complete" and record["measurements"]:
            tuner.walls.append(record["wall_s"] / max(1, len(record["measurements"])))
            tuner.slowest_s = max(tuner.slowest_s, tuner.walls[-1])
        if record["decision"] == "keep":
            kept = Incumbent(knobs, [], record["trial"], profile=dict(incumbent.profile))
            for measurement in record["measurements"]:
                kept.add(measurement, record.get("placement"))
            incumbent = kept
    return frame, incumbent, base, float(baseline["noise_floor"] or 0.0), records[-1]["trial"]


def review(root: Path, run: str, script: Any = None) -> tuple[Any, dict[str, Any], Job]:
    """The outputs of a run written again from its folder, without a device: (outcome, best config, job)."""
    job = load_job(root, run)
    folder = RunFolder(root, run)
    with folder.locked():  # its outputs are the live tuner's to write while one runs
        return _review(folder, job, script)


def _review(folder: RunFolder, job: Job, script: Any) -> tuple[Any, dict[str, Any], Job]:
    from ..output.report import write_best_config, write_report, write_results_tsv
    from .outcome import Incumbent, Outcome

    run = folder.path.name
    records = folder.read_experiments()
    if not records or not folder.frame.exists():
        raise JobError(f"RUN {run!r}: no measured trial yet; nothing to review (`resume` continues it)")
    state = stored(folder.state, run) if folder.state.exists() else {}
    kept = [r for r in records if r["decision"] == "keep"]
    best_record = kept[-1] if kept else records[0]
    best = Incumbent(Knobs.from_dict(best_record["knobs"]), [m["samples_per_s"] for m in best_record["measurements"]],
                     best_record["trial"])
    outcome = Outcome(frame=stored(folder.frame, run),
                      baseline={"samples_per_s": records[0]["samples_per_s"],
                                "measurement": records[0]["measurements"][0] if records[0]["measurements"] else {}},
                      best=best, records=records, skipped=[tuple(s) for s in state.get("skipped", [])],
                      noise_floor=records[0].get("noise_floor") or 0.0,
                      stop_reason=state.get("stop_reason", "not finished (reviewed while stopped)"),
                      wall_s=float(state.get("elapsed_s", 0)), folder=folder.path,
                      best_measurement=best_record["measurements"][-1] if best_record["measurements"] else None)
    write_results_tsv(folder, records)
    config = write_best_config(folder, job, best.knobs, script)
    write_report(folder, job, outcome, config)
    return outcome, config, job
