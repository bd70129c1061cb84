"""What the loop may try: the frame's limits (an MLP has no attention; a VLM may not pack rows), the
knobs the user left to autotune (`only=`), a script's settings, and the limits a crash teaches.

Plain functions of the job, a script's adapter and the frame's facts (LoopState.frame_facts).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..config.types import device_facts_of
from ..config.job import Job
from ..config.messages import RunResult
from ..config.types import Device, JsonObject
from ..reasoner import Hypothesis

# The frame: the facts the frame step's child found (device, model, data, the limits on what applies),
# completed with the baseline's ceiling and breakdown; JSON as frame.json and state.json hold it.
Frame = JsonObject


def device_of(frame: Frame) -> Device:
    """The device facts of the frame (probes/device.py)."""
    return device_facts_of(frame.get("device"))


def limits_of(frame: Frame) -> list[Mapping[str, Any]]:
    """The frame's limits: {knob, value (absent: every value), reason, silent}."""
    limits = frame.get("limits")
    return [limit for limit in limits if isinstance(limit, Mapping)] if isinstance(limits, Sequence) else []


def frame_limit(frame: Frame, name: str, value: Any) -> str | None:
    """Why the frame says `name=value` cannot apply to this model (an MLP has no attention; a VLM may not
    pack rows); None if it can. A limit without a value covers every value of the knob."""
    for limit in limits_of(frame):
        if limit["knob"] == name and limit.get("value") in (None, value):
            return str(limit["reason"])
    return None


def silent_limit(frame: Frame, name: str) -> bool:
    """A knob that means nothing for this kind of model (a vision knob on a text model): its changes are
    dropped without a note, as they would only crowd the report's list of skipped changes."""
    return any(limit["knob"] == name and limit.get("silent") for limit in limits_of(frame))


def allowed(job: Job, script: Any, frame: Frame, hypotheses: list[Hypothesis], skipped: list[tuple[str, str]],
            report_only: bool = False) -> tuple[list[Hypothesis], list[tuple[str, str]]]:
    """Only changes to knobs the user left to autotune (`only=`), the frame allows, and for a script
    (its adapter), only those it has a setting for. Knobs the user kept are dropped without a note,
    unless `report_only`."""
    kept = []
    for hypothesis in hypotheses:
        held = next((k for k, _ in hypothesis.changes if job.only and k not in job.only), None)
        if any(silent_limit(frame, k) for k, _ in hypothesis.changes):
            continue
        if held:
            if report_only:
                skipped.append((hypothesis.change, f"only={','.join(job.only)} keeps {held} as it is"))
            continue
        why = next((w for k, v in hypothesis.changes if (w := frame_limit(frame, k, v))), None)
        if why is None and script is not None:
            kind = device_of(frame).get("kind")
            why = next((w for k, v in hypothesis.changes if (w := script.why_not(k, v, kind))), None)
        if why:
            skipped.append((hypothesis.change, why))
        else:
            kept.append(hypothesis)
    return kept, skipped


def cannot_apply_here(hypothesis: Hypothesis, result: RunResult) -> JsonObject | None:
    """The limit a crash that no incumbent can fix (the device, the install) teaches, for the frame's
    limits the ranking honours; None for a crash that says nothing of the kind."""
    from ..reasoner.cannot_apply import blamed, fixed_reason

    why = fixed_reason(result.reason, result.stderr_tail) if result.state == "crash" else None
    culprit = blamed(why, hypothesis.changes) if why else None
    if culprit is None:
        return None
    knob, value = culprit
    return {"knob": knob, "value": value, "reason": f"cannot apply here: {why}"}
