"""A trial's record, built once its runs are decided, and the replay of a trial measured before.

`Trial` is what `Tuner.run_trial` (the ask/tell loop's measuring half) returns: the record and what
`Tuner.tell` needs to write it and to move the loop's state on (LoopState.conclude).
A speculation of the parallel driver builds Trials and tells none of them, so it writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from ..config.knobs import Knobs
from ..config.measurement import Ceiling, Decision, Measurement
from ..config.records import TrialRecord
from ..config.types import JsonObject
from .outcome import Incumbent, summarize
from ..reasoner import Hypothesis
from .state import RunCounts


@dataclass(frozen=True)
class Trial:
    """One decided trial, not yet written: `hypothesis` applied to `incumbent` gave `knobs`.

    `incumbent` is the trial's own copy, with the incumbent runs it measured beside the candidate;
    `counts` the run counters after its runs; `limit` a frame limit its crash taught (the device or
    the install cannot run the change). `Tuner.tell` takes all of them into the loop's state. `record`
    is the line experiments.jsonl will hold (the journal adds the hypothesis and the belief events)."""

    record: JsonObject
    hypothesis: Hypothesis
    incumbent: Incumbent
    knobs: Knobs
    measurements: Sequence[Measurement]
    counts: RunCounts
    limit: JsonObject | None = None


def record(run: str, trial: int, change: str | None, knobs: Knobs, state: str, decision: Decision,
           measurements: Sequence[Measurement], wall: float, placement: Mapping[str, str] | None,
           stderr: str | None = None, ceiling: Ceiling | None = None) -> JsonObject:
    """A record of experiments.jsonl with what every record says; `placement`: where its runs ran (an
    executor with several GPUs says; nothing for a local run); `ceiling`: the worst-case batch its first
    run measured, where the decision rests on it."""
    decided = decision.to_dict()
    return {
        "run": run, "trial": trial, "change": change, "knobs": knobs.to_dict(), "state": state,
        "decision": decision.decision, "reason": decision.reason, "measurements": [m.to_dict() for m in measurements],
        **summarize(measurements), "ratio": decision.ratio, "incumbent_samples_per_s": decision.incumbent_samples_per_s,
        "noise_floor": decision.noise_floor, "parity": decided["parity"],
        "ceiling": None if ceiling is None else ceiling.to_dict(),
        "stderr_tail": stderr, "wall_s": round(wall, 3), "hypothesis": None, "beliefs": [], "replayed_from": None,
        **({"placement": dict(placement)} if placement else {}),
        **{k: decided[k] for k in ("interval", "confidence") if k in decided},
    }


def replay(run: str, trial: int, hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
           past: TrialRecord, floor: float, counts: RunCounts) -> Trial:
    """The same change on the same incumbent was measured for this job on this device and software
    (`past`: the knowledge base's record of it, which its `experiment` names)."""
    measurements = list(past.measurements)
    decision = replace(past.decided, reason=f"replayed from {past['experiment']} ({past.state}): {past.reason}",
                       incumbent_samples_per_s=incumbent.speed, noise_floor=floor)
    entry = record(run, trial, hypothesis.change, knobs, "replayed", decision, measurements, wall=0.0,
                   placement=counts.take_placement(), ceiling=measurements[0].ceiling if measurements else None)
    entry.update(replayed_from=past["experiment"], replayed_state=past.state)
    return Trial(entry, hypothesis, incumbent, knobs, measurements, counts)
