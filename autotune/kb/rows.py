"""The shapes of the knowledge base's records, as TypedDicts: a record stays the JSON dict the store
holds (tinydb queries its top-level fields, `kb export` writes it as it is), and its keys are checked.

The store checks each record against its table's schema (schemas/kb_<table>.json) when it is written
and again when it is read back; those schemas pin only the fields lookups need, so every other field
is optional here (`total=False`): an old knowledge base may lack what a newer version writes.
`experience.py` and `beliefs.py` are the writers, and the readers through these types.
"""

from __future__ import annotations

from typing import TypedDict

from ..config.types import JsonObject, KnobConfig
from .features import Features


class _Versioned(TypedDict):
    schema_version: int  # kb_record.json: always 1


class KbMeasurement(TypedDict, total=False):
    """The fields of one measurement a trial row keeps (experience._KEPT); the run folder keeps all."""

    samples_per_s: float
    tokens_per_s: float
    step_times_s: list[float]
    median_step_s: float
    mfu: float
    hfu: float
    peak_memory: JsonObject
    ceiling: JsonObject
    breakdown: JsonObject
    real_tokens_per_step: float
    model_flops: float
    hardware_flops: float
    device: JsonObject
    parity_losses: list[float]
    model: JsonObject
    data: JsonObject
    placement: JsonObject


class TrialRow(_Versioned, total=False):
    """One trial of a run (table trials), written by `Experience.record_trial`."""

    run_id: str
    run: str
    trial: int
    experiment: str  # "<run_id>#<trial>": what belief evidence names
    job_fingerprint: str
    device_fingerprint: str
    software: dict[str, str]
    features: Features
    incumbent_knobs: KnobConfig
    knobs: KnobConfig
    change: str | None
    state: str
    decision: str
    reason: str
    ratio: float | None
    interval: list[float] | None
    confidence: float | None
    samples_per_s: float | None
    incumbent_samples_per_s: float | None
    noise_floor: float | None
    parity: JsonObject | None
    measurements: list[KbMeasurement]
    hypothesis: JsonObject | None  # reasoner.Hypothesis.to_dict()
    wall_s: float | None
    replayed_from: str | None


class RunBaseline(TypedDict):
    knobs: KnobConfig
    samples_per_s: float


class RunBest(TypedDict):
    knobs: KnobConfig
    trial: int
    speedup: float


class RunTrial(TypedDict):
    trial: int
    change: str | None
    state: str
    decision: str
    ratio: float | None


class RunRow(_Versioned, total=False):
    """One finished tune (table runs), written by `Experience.record_run`; looked up by fingerprints."""

    run_id: str
    run: str
    job_fingerprint: str
    device_fingerprint: str
    software: dict[str, str]
    job: JsonObject  # the Job as job.json holds it
    features: Features
    frame: JsonObject  # the frame's facts (loop.limits.Frame): an open set, as the probes report them
    baseline: RunBaseline
    best: RunBest
    trials: list[RunTrial]
    trials_to_best: int
    stop_reason: str
    finished_at: str


# A claim's definition (table claims), written once by `Claim.definition`. Functional form: `from` is a keyword.
ClaimDefinition = TypedDict("ClaimDefinition", {
    "schema_version": int, "id": str, "knob": str, "value": "bool | int | float | str | None",
    "from": "bool | int | float | str | None", "direction": str, "ratio": float, "condition": str,
    "alpha": float, "beta": float, "source": str, "statement": str, "relations": list[dict[str, str]],
    "parent": "str | None", "origin": str})


class ClaimEvent(_Versioned):
    """One change to a claim (table claim_history), made by `Beliefs.apply`: confirm, weaken, split,
    delete or create."""

    op: str
    claim: str
    reason: str
    evidence: JsonObject | None  # claims.Evidence.to_dict()
    children: list[str]          # the claims a split or a create made
    run: str
    at: str


class BeliefsExport(_Versioned):
    """What `Beliefs.export` shares: the learned claims' definitions and every event."""

    claims: list[ClaimDefinition]
    claim_history: list[ClaimEvent]


class KbExport(_Versioned, total=False):
    """What `kb export` writes and `kb import` reads back: the learned claims, every event, the runs and
    trials. A file read for import has its shape checked first (cli/kb_import.py), and each record
    again as it would be written (its claim, its table's schema) before anything is."""

    exported_at: str
    claims: list[ClaimDefinition]
    claim_history: list[ClaimEvent]
    runs: list[RunRow]
    trials: list[TrialRow]
