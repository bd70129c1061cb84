"""What the loop may try: the frame's limits (an MLP has no attention; a VLM may not pack rows), the
knobs the user left to autotune (`only=`), a script's settings, and the limits a crash teaches.

Plain functions over the tuner's job, script and frame facts (LoopState.frame_facts).
"""

from __future__ import annotations

from typing import Any

from ..reasoner import Hypothesis


def frame_limit(frame: dict[str, Any], name: str, value: Any) -> str | None:
    """Why the frame says `name=value` cannot apply to this model (an MLP has no attention; a VLM may not
    pack rows); None if it can. A limit without a value covers every value of the knob."""
    for limit in frame.get("limits", ()):
        if limit["knob"] == name and limit.get("value") in (None, value):
            return str(limit["reason"])
    return None


def silent_limit(frame: dict[str, Any], name: str) -> bool:
    """A knob that means nothing for this kind of model (a vision knob on a text model): its changes are
    dropped without a note, as they would only crowd the report's list of skipped changes."""
    return any(limit["knob"] == name and limit.get("silent") for limit in frame.get("limits", ()))


def allowed(tuner: Any, hypotheses: list[Hypothesis], skipped: list[tuple[str, str]],
            report_only: bool = False) -> tuple[list[Hypothesis], list[tuple[str, str]]]:
    """Only changes to knobs the user left to autotune (`only=`), and for a script, only those it
    has a setting for. Knobs the user kept are dropped without a note, unless `report_only`."""
    job, script, frame = tuner.job, tuner.script, tuner.state.frame_facts
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
            kind = (frame.get("device") or {}).get("kind")
            why = next((w for k, v in hypothesis.changes if (w := script.why_not(k, v, kind))), None)
        if why:
            skipped.append((hypothesis.change, why))
        else:
            kept.append(hypothesis)
    return kept, skipped


def cannot_apply_here(frame: dict[str, Any], hypothesis: Hypothesis, result: dict[str, Any]) -> None:
    """A crash that no incumbent can fix (the device, the install) becomes a limit the ranking honours."""
    from ..reasoner.cannot_apply import blamed, fixed_reason

    why = fixed_reason(result.get("reason"), result.get("stderr_tail")) if result["state"] == "crash" else None
    culprit = blamed(why, hypothesis.changes) if why else None
    if culprit is not None:
        knob, value = culprit
        frame.setdefault("limits", []).append({"knob": knob, "value": value, "reason": f"cannot apply here: {why}"})
