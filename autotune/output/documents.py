"""The JSON documents of a run folder and of `tune --json` that stay dicts, as TypedDicts: each is written
to a file or a pipe and checked against its schema (autotune/schemas/NAME.json, named beside each), so
the keys here are the schema's. Trial records have their typed view in config/records.py (TrialRecord).
"""

from __future__ import annotations

from typing import TypedDict

from ..config.types import JsonObject, KnobConfig


class Accepted(TypedDict):
    change: str
    rationale: str


class Rejected(TypedDict):
    item: str
    reason: str


class _LlmCallRequired(TypedDict):
    schema_version: int
    before_trial: int
    model: str
    state: str  # answered | failed
    latency_s: float
    accepted: list[Accepted]
    claims: list[str]  # ids of the claims it created
    rejected: list[Rejected]
    error: str | None


class LlmCall(_LlmCallRequired, total=False):
    """One call to the LLM proposer, a line of llm.jsonl (schema llm_call)."""

    recorded_at: str


class Refused(TypedDict):
    trial: int
    error: str


class RealizedRun(TypedDict):
    config: str  # baseline | best
    trial: int
    steps: int
    exit_code: int | None
    wall_s: float
    train_runtime_s: float | None


class _RealizedRequired(TypedDict):
    schema_version: int
    state: str  # complete | skipped | failed
    reason: str
    loop_best_trial: int
    loop_speedup: float


class Realized(_RealizedRequired, total=False):
    """The hand-over step's outcome, realized.json (schema realized); timings only where it ran."""

    best_trial: int
    best_knobs: KnobConfig
    baseline_samples_per_s: float
    best_samples_per_s: float
    speedup: float
    rounds: int
    steps: dict[str, int]  # N per trial number: each file ran N and 2N optimizer steps
    runs: list[RealizedRun]
    refused: list[Refused]
    configs: dict[str, JsonObject]  # baseline / best: the YAML files' content
    kwargs: dict[str, JsonObject]   # baseline / best: the same as keyword arguments


class RealizedVerdict(TypedDict):
    state: str
    reason: str
    speedup: float | None


class _TuneResultRequired(TypedDict):
    schema_version: int
    run: str
    stop_reason: str
    trials: int
    kept: list[str]
    best_trial: int
    best_knobs: KnobConfig
    changes: KnobConfig  # the knobs the best config sets differently from the start
    baseline_samples_per_s: float | None
    best_samples_per_s: float | None
    speedup: float
    speedup_interval: list[float] | None
    realized: RealizedVerdict | None
    files: dict[str, str]
    command: str


class TuneResult(_TuneResultRequired, total=False):
    """The one object `autotune tune --json` prints (schema tune_result)."""

    device_runs: int
    device_s: float
