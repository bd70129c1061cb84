"""A trial's record, built once its runs are decided, and the replay of a trial measured before.

`Trial` is what `Tuner.run_trial` (the ask/tell loop's measuring half) returns: the record and what
`Tuner.tell` needs to write it and to move the loop's state on (LoopState.conclude).
A speculation of the parallel driver builds Trials and tells none of them, so it writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.knobs import Knobs
from .outcome import Incumbent, summarize
from ..reasoner import Hypothesis
from .state import RunCounts


@dataclass(frozen=True)
class Trial:
    """One decided trial, not yet written: `hypothesis` applied to `incumbent` gave `knobs`.

    `incumbent` is the trial's own copy, with the incumbent runs it measured beside the candidate;
    `counts` the run counters after its runs; `limit` a frame limit its crash taught (the device or
    the install cannot run the change). `Tuner.tell` takes all of them into the loop's state."""

    record: dict[str, Any]
    hypothesis: Hypothesis
    incumbent: Incumbent
    knobs: Knobs
    measurements: list[dict[str, Any]]
    counts: RunCounts
    limit: dict[str, Any] | None = None


def record(run: str, trial: int, change: str | None, knobs: Knobs, state: str, decision: str, reason: str,
           measurements: list[dict[str, Any]], wall: float, placement: dict[str, Any] | None,
           stderr: str | None = None) -> dict[str, Any]:
    """A record of experiments.jsonl with what every record says; `placement`: where its runs ran (an
    executor with several GPUs says; nothing for a local run)."""
    return {
        "run": run, "trial": trial, "change": change, "knobs": knobs.to_dict(), "state": state,
        "decision": decision, "reason": reason, "measurements": measurements, **summarize(measurements),
        "ratio": None, "incumbent_samples_per_s": None, "noise_floor": None, "parity": None, "ceiling": None,
        "stderr_tail": stderr, "wall_s": round(wall, 3), "hypothesis": None, "beliefs": [], "replayed_from": None,
        **({"placement": placement} if placement else {}),
    }


def replay(run: str, trial: int, hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
           past: dict[str, Any], floor: float, counts: RunCounts) -> Trial:
    """The same change on the same incumbent was measured for this job on this device and software."""
    entry = record(run, trial, hypothesis.change, knobs, "replayed", past["decision"],
                   f"replayed from {past['experiment']} ({past['state']}): {past['reason']}",
                   past["measurements"], wall=0.0, placement=counts.take_placement())
    entry.update(ratio=past["ratio"],
                 interval=past["interval"], confidence=past["confidence"], parity=past["parity"],
                 incumbent_samples_per_s=incumbent.speed, noise_floor=floor, replayed_from=past["experiment"],
                 replayed_state=past["state"])
    if past["measurements"]:
        entry["ceiling"] = past["measurements"][0].get("ceiling")
    return Trial(entry, hypothesis, incumbent, knobs, past["measurements"], counts)
