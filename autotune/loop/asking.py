"""The LLM's turn before a trial: its checked proposals go first, the ranking after.

A plain function on the tuner (its memory, records, run folder, display and LLM proposer).
"""

from __future__ import annotations

from typing import Any

from .outcome import Incumbent
from ..reasoner import Hypothesis


def ask_llm(tuner: Any, before_trial: int, incumbent: Incumbent, frame: dict[str, Any], features: dict[str, Any],
            ranked: list[Hypothesis], skipped: list[tuple[str, str]]) -> list[Hypothesis]:
    """The LLM's checked proposals go first, the ranking after; its new claims join the beliefs."""
    from ..reasoner.llm import prompt_context

    claims = tuner.memory.claims
    records = tuner.state.records
    context = prompt_context(features, incumbent.knobs, tuner.job.effective_batch, records, claims, ranked,
                             skipped, [r["change"] for r in records if r["change"]])
    proposal = tuner.llm.propose(context, incumbent.knobs, frame["device"], tuner.job.effective_batch,
                                 tuner.state.measured, claims, features)
    proposal.hypotheses, cannot = tuner._allowed(proposal.hypotheses, [], report_only=True)
    for change, why in cannot:
        proposal.reject(change, why)
    if proposal.claims:
        tuner.memory.adopt(proposal.claims, f"proposed by the LLM {tuner.job.llm.model} before trial {before_trial}")
    record = proposal.record(before_trial, tuner.job.llm.model)
    tuner.folder.append_llm_call(record)
    if tuner.display:
        tuner.display.llm(record)
    proposed = {h.change for h in proposal.hypotheses}
    asked: list[Hypothesis] = proposal.hypotheses + [h for h in ranked if h.change not in proposed]
    return asked
