"""What the hand-over step (workloads/hf/realize.py) reads and returns: its own spec, not a TrialSpec
(output/realize.py writes it, schemas/realized.json holds what it measured), typed once as it is read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NotRequired, TypedDict

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.types import JsonObject, KnobConfig
from ...util.errors import JobError, RecordError


@dataclass(frozen=True)
class Candidate:
    """A config the hand-over may hand over: its trial, its knobs, the N steps of its timed runs."""

    trial: int
    knobs: Knobs
    steps: int


@dataclass(frozen=True)
class HandoverSpec:
    """What the hand-over step reads (output/realize.py writes it; not a TrialSpec): the job, the run's
    rows and model config, where the files go, the candidates from the loop's best back to the baseline
    (last), and how the timed runs go (or why they do not: `realize` false, `skip_reason`)."""

    job: Job
    rows_path: Path
    model_config_path: Path
    run_path: Path
    work_dir: Path
    candidates: tuple[Candidate, ...]
    rounds: int
    realize: bool
    skip_reason: str
    cpu: bool
    run_timeout_s: float
    offline: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "hand-over spec") -> "HandoverSpec":
        """The spec from its JSON form; RecordError naming what is missing or wrong."""
        try:
            return cls(job=Job.from_dict(dict(data["job"])), rows_path=Path(data["rows_path"]),
                       model_config_path=Path(data["model_config_path"]), run_path=Path(data["run_path"]),
                       work_dir=Path(data["work_dir"]),
                       candidates=tuple(Candidate(int(c["trial"]), Knobs.from_dict(c["knobs"]), int(c["steps"]))
                                        for c in data["candidates"]),
                       rounds=int(data["rounds"]), realize=bool(data["realize"]),
                       skip_reason=str(data.get("skip_reason") or ""), cpu=bool(data["cpu"]),
                       run_timeout_s=float(data["run_timeout_s"]), offline=bool(data.get("offline")))
        except KeyError as missing:
            raise RecordError(f"{where} has no {missing}") from None
        except (JobError, TypeError, ValueError, AttributeError) as error:
            raise RecordError(f"{where} is malformed: {error}") from None


class PythonKwargs(TypedDict, total=False):
    """A `trl sft` file as Python keyword arguments (best_config.json, realized.json's `kwargs`): each value
    the keyword arguments of one third-party call, by that library's names."""

    sft_config: JsonObject
    from_pretrained: JsonObject
    model: str
    dataset: JsonObject
    lora_config: JsonObject
    outside_trl: list[str]


class TimedRun(TypedDict):
    """One `trl sft` run of a file (realized.json's `runs`, with `config` and `trial` added there)."""

    steps: int
    exit_code: int | None
    wall_s: float
    train_runtime_s: float | None
    error: NotRequired[str]


class RunRecord(TimedRun):
    """A timed run as realized.json lists it: which config (baseline or best) of which trial."""

    config: str
    trial: int


class Refused(TypedDict):
    trial: int
    error: str


class Realized(TypedDict, total=False):
    """How the timed runs went (realized.json's fields the hand-over step measures)."""

    state: str
    reason: str
    runs: list[RunRecord]
    refused: list[Refused]
    best_trial: int
    rounds: int
    baseline_samples_per_s: float
    best_samples_per_s: float
    speedup: float


class HandoverReply(TypedDict):
    """The hand-over step's result: each candidate's file (by trial) and its keyword arguments, the
    adapter's layers, how the timed runs went."""

    files: dict[str, JsonObject]
    kwargs: dict[str, PythonKwargs]
    lora_target_modules: list[str] | None
    realized: Realized


class RealizedRecord(Realized, total=False):
    """realized.json as output/realize.py stores it: what the step measured, and the loop's side (its best
    trial and speed-up), the handed-over trial's knobs, the files' contents and keyword arguments."""

    schema_version: int
    loop_best_trial: int
    loop_speedup: float
    best_knobs: KnobConfig
    steps: dict[str, int]
    configs: dict[str, JsonObject]
    kwargs: dict[str, PythonKwargs]
