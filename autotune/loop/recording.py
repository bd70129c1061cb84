"""Recording and learning for the loop: a trial's record, what the memory learns from it, the append
to the run folder (and the display), the state file a resume starts from, and the incumbent that
follows a decision.

Plain functions on the tuner. The parallel loop's shadows replace `Tuner._conclude` to write nothing,
so the loop reaches `conclude` only through that method.
"""

from __future__ import annotations

import time
from typing import Any

from ..config.knobs import Knobs
from .outcome import Incumbent, summarize
from ..reasoner import Hypothesis, key


def record(tuner: Any, trial: int, change: str | None, knobs: Knobs, state: str, decision: str, reason: str,
           measurements: list[dict[str, Any]], wall: float, stderr: str | None = None) -> dict[str, Any]:
    return {
        "run": tuner.job.run, "trial": trial, "change": change, "knobs": knobs.to_dict(), "state": state,
        "decision": decision, "reason": reason, "measurements": measurements, **summarize(measurements),
        "ratio": None, "incumbent_samples_per_s": None, "noise_floor": None, "parity": None, "ceiling": None,
        "stderr_tail": stderr, "wall_s": round(wall, 3), "hypothesis": None, "beliefs": [], "replayed_from": None,
        **placed(tuner),
    }


def placed(tuner: Any) -> dict[str, Any]:
    """Where this record's runs ran (an executor with several GPUs says); nothing for a local run."""
    placement, tuner.placement = tuner.placement, None
    return {"placement": placement} if placement else {}


def append(tuner: Any, record: dict[str, Any]) -> None:
    tuner.folder.append_experiment(record)
    tuner.records.append(record)
    if tuner.display:
        tuner.display.finished(record)
    for tracker in tuner.trackers:  # after the run folder has it: the folder is the source of truth
        tracker.trial(tuner, record)


def save_state(tuner: Any, trial: int, incumbent: Incumbent, floor: float, **finished: Any) -> None:
    tuner.folder.write_state({"run": tuner.job.run, "run_id": tuner.memory.run_id, "trials_done": trial,
                              "incumbent_trial": incumbent.trial, "incumbent_knobs": incumbent.knobs.to_dict(),
                              "incumbent_samples": incumbent.samples, "noise_floor": floor,
                              "elapsed_s": round(time.monotonic() - tuner.started, 1), **finished})


def learn(tuner: Any, record: dict[str, Any], incumbent: Knobs, hypothesis: Hypothesis | None,
          profile: dict[str, Any]) -> None:
    features = tuner.memory.features(incumbent, profile)
    if hypothesis is not None:
        record["hypothesis"] = hypothesis.to_dict()
    record["beliefs"] = tuner.memory.learn(record, incumbent, features, hypothesis)


def conclude(tuner: Any, record: dict[str, Any], hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
             measurements: list[dict[str, Any]]) -> Incumbent:
    """Learn from the trial, append its record, and return the incumbent that follows it."""
    if (record.get("replayed_state") or record["state"]) == "oom":
        tuner.blocked.setdefault(key(incumbent.knobs), set()).add(hypothesis.change)
    learn(tuner, record, incumbent.knobs, hypothesis, incumbent.profile)
    append(tuner, record)
    if record["decision"] != "keep":
        return incumbent
    kept = Incumbent(knobs, [], record["trial"], profile=dict(incumbent.profile))
    for measurement in measurements:
        kept.add(measurement, record.get("placement"))
    return kept


def replay(tuner: Any, trial: int, hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
           past: dict[str, Any], floor: float) -> Incumbent:
    """The same change on the same incumbent was measured for this job on this device and software."""
    entry = record(tuner, trial, hypothesis.change, knobs, "replayed", past["decision"],
                   f"replayed from {past['experiment']} ({past['state']}): {past['reason']}",
                   past["measurements"], wall=0.0)
    entry.update(ratio=past["ratio"],
                 interval=past["interval"], confidence=past["confidence"], parity=past["parity"],
                 incumbent_samples_per_s=incumbent.speed, noise_floor=floor, replayed_from=past["experiment"],
                 replayed_state=past["state"])
    if past["measurements"]:
        entry["ceiling"] = past["measurements"][0].get("ceiling")
    return tuner._conclude(entry, hypothesis, incumbent, knobs, past["measurements"])
