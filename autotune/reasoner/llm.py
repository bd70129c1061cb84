"""Optional proposer: an LLM over any OpenAI-compatible endpoint (the only module that imports openai).

Off by default; `llm=MODEL` turns it on, with the endpoint and key from OPENAI_BASE_URL and
OPENAI_API_KEY, so a local server works as well as a hosted one. Before a trial it is shown the job's
features, the incumbent, the catalog, the history and the beliefs, and asked (structured output
against schemas/llm_proposal.json) for changes to try and claims to test.

Nothing it says is executed. Its answer is data, read item by item: the envelope and each item
against the schema, each change against the catalog and what applies on this device, each text for
instructions. Only what passes becomes a Hypothesis (tried before the ranking's) or a claim that
starts with low confidence. A timeout, a connection or HTTP error, or an unreadable answer falls back
to the ranking and is recorded; after MAX_FAILURES in a row it is not asked again in that run.
Everything here but `LLMProposer.propose` is pure.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from ..config.types import Device, JsonObject
from ..util.errors import JobError
from ..kb.claims import INT_KNOBS, Claim, ConditionError, parse_condition
from ..kb.features import NUMERIC, FeatureView, fingerprint
from ..config.records import Source, TrialRecord
from ..config.knobs import CATALOG, Knobs, not_applicable, parse_knob_value
from ..schemas import load
from .rank import Hypothesis, key, score

RETRIES = 1                 # one more attempt after a timeout, connection or 5xx error (the client's backoff)
MAX_FAILURES = 2            # failed calls in a row before the proposer is left alone for the run
HISTORY_SHOWN = 30          # trials and claims shown in the prompt: enough to reason, bounded in size
CLAIMS_SHOWN = 40
# A claim it makes starts here: Beta(0.8, 1.2), confidence 0.40 with two pseudo-counts, so one
# measured result outweighs it (a shipped prior has 3 to 10).
LLM_ALPHA, LLM_BETA = 0.8, 1.2
RATIO_RANGE = (0.1, 10.0)

# Text that tells someone to do something rather than says why a change should help.
_INSTRUCTIONS = (
    (re.compile(r"\b(ignore|disregard|forget|override)\b.{0,40}\b(instruction|previous|above|rule|prompt|schema)",
                re.I | re.S), "it tells the reader to ignore instructions"),
    (re.compile(r"\b(system prompt|you are now|new instructions?|jailbreak)\b", re.I), "it addresses the reader's instructions"),
    (re.compile(r"(\brm\s+-|\bsudo\b|\bcurl\s|\bwget\s|\bchmod\s|\bpip\s+install\b|\bos\.system\b|\bsubprocess\b|"
                r"\beval\s*\(|\bexec\s*\(|__import__|\|\s*(ba)?sh\b|;\s*(ba)?sh\b)", re.I), "it holds a command"),
    (re.compile(r"```|`[^`]*`"), "it holds code"),
    (re.compile(r"\bhttps?://|\bwww\.", re.I), "it holds a link"),
    (re.compile(r"\b(run|execute|type|paste)\b.{0,30}\b(command|shell|terminal|script|code)\b", re.I | re.S),
     "it asks for something to be run"),
)


def instructions_in(text: str) -> str | None:
    """Why `text` reads as instructions rather than a rationale; None when it does not."""
    for pattern, why in _INSTRUCTIONS:
        match = pattern.search(text)
        if match:
            return f"instructions inside the text ({why}: {match.group(0)[:40]!r})"
    return None


@dataclass(frozen=True)
class LLMSettings:
    model: str
    base_url: str | None = None
    api_key: str = "unused"
    timeout_s: float = 60.0
    retries: int = RETRIES

    @classmethod
    def from_env(cls, model: str, timeout_s: float = 60.0) -> "LLMSettings":
        base_url = os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get("OPENAI_API_KEY")
        if not api_key and not base_url:
            raise JobError(f"llm={model}: set OPENAI_API_KEY (and OPENAI_BASE_URL for a server other than "
                           "OpenAI's, such as a local one) in the environment, or leave llm= out")
        return cls(model, base_url, api_key or "unused", timeout_s)


@dataclass
class Proposal:
    """What one call gave: the changes and claims that passed, and every rejection with its reason."""

    state: str = "answered"                    # answered | failed
    hypotheses: list[Hypothesis] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    latency_s: float = 0.0

    def reject(self, item: str, reason: str) -> None:
        self.rejected.append({"item": item[:200], "reason": reason})

    def record(self, before_trial: int, model: str) -> JsonObject:
        return {"schema_version": 1, "before_trial": before_trial, "model": model, "state": self.state,
                "latency_s": round(self.latency_s, 3), "error": self.error, "rejected": self.rejected,
                "accepted": [{"change": h.change, "rationale": h.reason} for h in self.hypotheses],
                "claims": [c.id for c in self.claims]}


# -- the question --------------------------------------------------------------------------------
SYSTEM = (
    "You propose experiments to make one fine-tuning job faster on one GPU. A trial changes knobs on top of "
    "the incumbent config and is measured; it is kept only when faster beyond noise with the same losses. "
    "max_len and effective_batch belong to the user and never change. Use only the knobs and values in "
    "`catalog`; a value is text (true/false, a whole number, or a listed choice). Do not propose a change in "
    "`already_measured` or in `not_applicable`. A claim's condition is clauses `feature op value` joined by "
    "' and ' over the names in `features` (op one of >= <= > < == !=). Rationales and statements say why, "
    "in plain words. Answer with JSON only, matching the given schema.")


def prompt_context(features: FeatureView, incumbent: Knobs, effective_batch: int,
                   history: Iterable[TrialRecord], claims: Iterable[Claim], ranked: Iterable[Hypothesis],
                   skipped: Iterable[tuple[str, str]], measured: Iterable[str]) -> JsonObject:
    """What the model is shown: numbers and names only, never the user's data rows."""
    catalog = {name: {"kind": knob.kind, "choices": list(knob.choices), "help": knob.help}
               for name, knob in CATALOG.items()}
    for name, knob in CATALOG.items():
        if knob.climb == "divisors":   # the micro-batch: the divisors of the effective batch
            catalog[name]["choices"] = [d for d in range(1, effective_batch + 1) if effective_batch % d == 0]
    shown_claims = sorted(claims, key=lambda c: -len(c.evidence))[:CLAIMS_SHOWN]
    return {
        "features": features, "incumbent": incumbent.to_dict(), "effective_batch": effective_batch,
        "catalog": catalog,
        "history": [{"trial": r.trial, "change": r.change, "state": r.state, "decision": r.decision,
                     "ratio": r.ratio, "samples_per_s": r.samples_per_s, "reason": r.reason[:160]}
                    for r in list(history)[-HISTORY_SHOWN:]],
        "beliefs": [{"id": c.id, "claim": c.statement or c.change, "change": c.change, "direction": c.direction,
                     "ratio": round(c.expected_ratio, 3), "confidence": round(c.confidence, 3),
                     "evidence": len(c.evidence), "condition": " and ".join(str(x) for x in c.condition)}
                    for c in shown_claims],
        "ranking_next": [{"change": h.change, "p_helps": round(h.p_helps, 3), "expected_ratio": round(h.expected_ratio, 3)}
                         for h in list(ranked)[:5]],
        "not_applicable": [{"change": change, "why": why} for change, why in skipped],
        "already_measured": sorted(measured),
    }


def request(model: str, context: JsonObject) -> JsonObject:
    """The chat-completions call, structured output constrained by the proposal schema."""
    schema = {k: v for k, v in load("llm_proposal").items() if not k.startswith("$")}
    return {"model": model, "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": json.dumps(context, default=str)}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "autotune_proposal", "strict": True, "schema": schema}}}


# -- reading the answer --------------------------------------------------------------------------
def _schema_errors(schema: Mapping[str, Any], item: Any) -> str | None:
    import jsonschema

    error = next(iter(jsonschema.Draft202012Validator(schema).iter_errors(item)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top)"
    return f"does not match the schema at {where}: {error.message[:200]}"


def _past_limit(schema: Mapping[str, Any], name: str, index: int) -> str | None:
    limit = schema["properties"][name]["maxItems"]
    return f"more items than the schema allows ({limit})" if index >= limit else None


def read_answer(text: str, model: str, incumbent: Knobs, device: Device, effective_batch: int,
                measured: set[tuple[Any, ...]], claims: list[Claim], features: FeatureView) -> Proposal:
    """Check an answer item by item; what passes becomes hypotheses and claims. Pure."""
    proposal = Proposal()
    try:
        answer = json.loads(text)
    except (json.JSONDecodeError, TypeError) as error:
        proposal.state, proposal.error = "failed", f"the answer is not JSON ({error})"
        proposal.reject(str(text)[:200], proposal.error)
        return proposal
    schema = load("llm_proposal")
    envelope = {**schema, "properties": {name: {"type": "array"} for name in schema["properties"]}}
    wrong = _schema_errors(envelope, answer)
    if wrong:
        proposal.state, proposal.error = "failed", f"the answer {wrong}"
        proposal.reject(json.dumps(answer)[:200], proposal.error)
        return proposal
    seen: set[tuple[Any, ...]] = set()
    for index, item in enumerate(answer["hypotheses"]):
        label = f"hypotheses[{index}]: {json.dumps(item)}"
        why = _schema_errors(schema["properties"]["hypotheses"]["items"], item) or _past_limit(schema, "hypotheses", index)
        hypothesis, why = (None, why) if why else _hypothesis(item, model, incumbent, device, effective_batch,
                                                               claims, features)
        if hypothesis is not None:
            after = key(hypothesis.apply(incumbent))
            if after in measured:
                why = "already measured in this run"
            elif after in seen:
                why = "the same change as an earlier proposal"
            seen.add(after)
        if why or hypothesis is None:
            proposal.reject(label, why or "no change made")
        else:
            proposal.hypotheses.append(hypothesis)
    known = {c.id for c in claims}
    for index, item in enumerate(answer["claims"]):
        label = f"claims[{index}]: {json.dumps(item)}"
        why = _schema_errors(schema["properties"]["claims"]["items"], item) or _past_limit(schema, "claims", index)
        claim, why = (None, why) if why else _claim(item, model, features)
        if claim is not None and claim.id in known:
            why = f"the knowledge base already holds it as {claim.id}"
        if why or claim is None:
            proposal.reject(label, why or "no claim made")
        else:
            known.add(claim.id)
            proposal.claims.append(claim)
    return proposal


def _hypothesis(item: Mapping[str, Any], model: str, incumbent: Knobs, device: Device, effective_batch: int,
                claims: list[Claim], features: FeatureView) -> tuple[Hypothesis | None, str | None]:
    said = instructions_in(item["rationale"])
    if said:
        return None, said
    changes, current = [], incumbent
    for change in item["changes"]:
        knob = change["knob"]
        try:
            value = parse_knob_value(knob, change["value"].strip())
        except JobError as error:
            return None, f"value out of range: {error}"
        if getattr(current, knob) == value:
            return None, f"{knob} is already {value} in the incumbent"
        why = not_applicable(knob, value, current, device, effective_batch)
        if why:
            return None, f"{knob}={value} does not apply here: {why}"
        changes.append((knob, value))
        current = current.with_change(knob, value)
    (knob, value), *rest = changes
    scored = score(knob, value, incumbent, claims, features)
    reason = f"proposed by the LLM ({model}): {item['rationale'].strip()}; the beliefs: {scored.reason}"
    return replace(scored, reason=reason, also=tuple(rest), source=Source.LLM), None


def _claim(item: Mapping[str, Any], model: str, features: FeatureView) -> tuple[Claim | None, str | None]:
    said = instructions_in(item["statement"])
    if said:
        return None, said
    knob, text = item["knob"], str(item["value"]).strip()
    if knob in INT_KNOBS:
        if text not in ("up", "down"):
            return None, f"value out of range: {knob} claims take up or down, not {text!r}"
        value: Any = text
    else:
        try:
            value = parse_knob_value(knob, text)
        except JobError as error:
            return None, f"value out of range: {error}"
    ratio, low, high = float(item["ratio"]), *RATIO_RANGE
    if not (1 < ratio <= high if item["direction"] == "helps" else low <= ratio < 1):
        bounds = f"above 1, at most {high}" if item["direction"] == "helps" else f"below 1, at least {low}"
        return None, f"ratio {ratio} out of range: a claim that {item['direction']} expects a ratio {bounds}"
    try:
        condition = parse_condition(item["condition"])
    except ConditionError as error:
        return None, f"condition does not parse: {error}"
    names = set(features) | set(NUMERIC) | {"model_family", "device_kind", "bf16_supported", "method"}
    unknown = sorted({c.feature for c in condition} - names)
    if unknown:
        return None, f"condition uses {', '.join(unknown)}, which autotune does not measure"
    identity = fingerprint({"knob": knob, "value": value, "direction": item["direction"],
                            "condition": " and ".join(str(c) for c in condition)})
    return Claim(id=f"M-{identity[:8]}", knob=knob, value=value, direction=item["direction"],
                 ratio=round(ratio, 4), condition=condition, alpha=LLM_ALPHA, beta=LLM_BETA,
                 source=f"proposed by the LLM {model}", statement=item["statement"].strip(), origin="llm"), None


# -- the call ------------------------------------------------------------------------------------
class LLMProposer:
    """Asks the model before each trial; never raises for what a server or a model can do wrong."""

    def __init__(self, settings: LLMSettings, client: Any = None) -> None:
        self.settings = settings
        self.failures = 0
        self._client = client
        if client is None:
            from ..util.extras import need

            need("openai", f"llm={settings.model}")  # before any trial, not at the first ask

    @property
    def off(self) -> bool:
        """Too many failures in a row: the run goes on with the ranking alone."""
        return self.failures >= MAX_FAILURES

    def client(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI(api_key=self.settings.api_key, base_url=self.settings.base_url,
                                  timeout=self.settings.timeout_s, max_retries=self.settings.retries)
        return self._client

    def propose(self, context: JsonObject, incumbent: Knobs, device: Device, effective_batch: int,
                measured: set[tuple[Any, ...]], claims: list[Claim], features: FeatureView) -> Proposal:
        started = time.monotonic()
        try:
            response = self.client().chat.completions.create(**request(self.settings.model, context))
            text = response.choices[0].message.content
        except Exception as error:  # noqa: BLE001 -- any failure of the call falls back to the ranking
            proposal = Proposal(state="failed", error=f"{type(error).__name__}: {str(error)[:300]}")
        else:
            proposal = read_answer(text or "", self.settings.model, incumbent, device, effective_batch, measured,
                                   claims, features)
        proposal.latency_s = time.monotonic() - started
        self.failures = self.failures + 1 if proposal.state == "failed" else 0
        if self.off:
            proposal.error = f"{proposal.error}; {MAX_FAILURES} failures in a row: not asked again in this run"
        return proposal
