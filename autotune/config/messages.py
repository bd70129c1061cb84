"""The messages between the tuner and a trial's child process: `TrialSpec` (what to run), `RunResult`
(how the run ended) and the `Measurement` a complete trial carries.

Each is a frozen dataclass that round-trips through its JSON Schema (schemas/trial_spec.json,
run_result.json, measurement.json): a spec is validated when it is built, a result when it is read
(`read_result`; the loop reads its executor's results unchecked: `RunResult.from_dict(check=False)`).
`Measurement` lives in measurement.py, beside the decision the loop makes on it. The parent
builds specs in trial_spec.py; every executor writes them through `write_spec` and reads what the
child wrote through `read_result`, so a malformed message on either side ends that one run in the
state `invalid` with one line saying what is wrong, never in a traceback that ends the tune.

Also here, once, because spec and runners both depend on it: a trial's rows are two parity steps,
then the measured steps (warm-up repeats the last parity step and needs no rows of its own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Union

from ..util.errors import JobError, RecordError
from ..util.io import write_json_atomic
from ..schemas import validate, violation
from .job import Job
from .knobs import Knobs
from .measurement import Measurement
# What a runner child writes back, typed (replies.py); named here too, beside the messages that carry them.
from .replies import DataFacts, FrameFacts, FrameReply, MeasurementDoc, ModelFacts, PeakReading, TrialReply
from .types import JsonObject

__all__ = ["DataFacts", "FrameFacts", "FrameReply", "Measurement", "MeasurementDoc", "ModelFacts", "PeakReading", "ProbeJob", "ProbeKnobs", "RunResult", "TrialReply",
           "TrialSpec", "read_result", "rejected", "spec_problem", "write_spec"]

SCHEMA_VERSION = 1
# Optimizer steps whose per-row losses are compared with the baseline's (parity), before any other step.
PARITY_STEPS = 2
# The hand-over step (realize.py) runs through the local executor but is not a trial: its spec is the
# realize runner's own, checked there.
HANDOVER_KIND = "realize"


def parity_ids(effective_batch: int) -> list[int]:
    """The row ids the parity steps train, in order (the same in every trial of a run)."""
    return list(range(PARITY_STEPS * effective_batch))


def measured_ids(effective_batch: int, measure_steps: int) -> list[int]:
    """The row ids the measured steps train, right after the parity steps' rows."""
    return list(range(PARITY_STEPS * effective_batch, (PARITY_STEPS + measure_steps) * effective_batch))


def rows_needed(effective_batch: int, measure_steps: int) -> int:
    """Rows the frame must provide for a trial: the parity steps' and the measured steps'."""
    return (PARITY_STEPS + measure_steps) * effective_batch


def _frozen(value: Any) -> Any:
    """A read-only copy: mappings become mapping proxies, lists tuples (a message cannot be edited)."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


def thawed(value: Any) -> Any:
    """A plain JSON-shaped copy (dicts and lists) of a frozen value."""
    if isinstance(value, Mapping):
        return {key: thawed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thawed(item) for item in value]
    return value


def _freeze_fields(message: Any) -> None:
    for item in fields(message):
        object.__setattr__(message, item.name, _frozen(getattr(message, item.name)))


@dataclass(frozen=True)
class ProbeJob:
    """The part of a job a user's script's probe or parse run carries (kind probe/parse: script/probe.py,
    script/parsed.py): what its hooks read. Its `max_len` is None (it runs no worst-case steps), where a
    Job's is the user's."""

    seed: int = 0
    smoke: bool = False
    max_len: int | None = None

    def to_dict(self) -> JsonObject:
        return {"seed": self.seed, "smoke": self.smoke}


@dataclass(frozen=True)
class ProbeKnobs:
    """The knobs a probe or parse run carries: the precision its hooks take MFU against."""

    precision: str

    def to_dict(self) -> JsonObject:
        return {"precision": self.precision}


# The kinds of run whose spec holds a whole Job and Knobs (a probe's and a parse's hold a part).
WHOLE_KINDS = ("frame", "trial")
# A whole configuration, or a probe's part of one. (Knobs is built by make_dataclass: Any to mypy.)
SpecKnobs = Union[Knobs, ProbeKnobs]


@dataclass(frozen=True)
class TrialSpec:
    """All a runner reads: the job, the knobs, the shared inputs and the step budget of one run.

    The child reads it typed (`from_dict`): `job` a `Job` and `knobs` a `Knobs` for a frame or a trial,
    a `ProbeJob` and `ProbeKnobs` for a script's probe or parse run; `to_dict` gives back the JSON the
    parent wrote (loop/trial_spec.py builds it with `Job.to_dict` and `Knobs.to_dict`)."""

    kind: str
    runner: str
    job: Job | ProbeJob
    knobs: SpecKnobs
    measure_steps: int
    warmup_max: int
    ceiling: bool = False
    inject_fault: str | None = None
    profile_steps: int = 0
    peaks: Mapping[str, Any] | None = None
    rows_path: str | None = None
    model_config_path: str | None = None
    rows_needed: int | None = None
    peak_cache: Mapping[str, Any] | None = None
    script: Mapping[str, Any] | None = None
    flags: tuple[str, ...] | None = None
    workdir: str | None = None
    leak_packed_rows: bool | None = None  # a test hook: the known-wrong packing parity must catch

    # Written even when None: the runners read them as always there.
    _ALWAYS = ("kind", "runner", "job", "knobs", "measure_steps", "warmup_max", "ceiling", "inject_fault",
               "profile_steps")

    def __post_init__(self) -> None:
        _freeze_fields(self)
        validate("trial_spec", self.to_dict(), "trial spec")

    @property
    def whole_job(self) -> Job:
        """The job of a frame or a trial (the built-in runners' kinds); a probe's part of one is a bug here."""
        if not isinstance(self.job, Job):
            raise RecordError(f"a {self.kind} spec carries only a part of the job")
        return self.job

    @property
    def whole_knobs(self) -> Knobs:
        """The knobs of a frame or a trial (a probe carries only its precision)."""
        if isinstance(self.knobs, ProbeKnobs):
            raise RecordError(f"a {self.kind} spec carries only a part of the knobs")
        return self.knobs

    @property
    def rows_file(self) -> Path:
        """The run's rows file (the built-in runners' specs name it: trial_spec.json)."""
        return _named(self.rows_path, "rows_path", self.runner)

    @property
    def model_config_file(self) -> Path:
        """The model config the frame resolved (an HF runner's spec names it)."""
        return _named(self.model_config_path, "model_config_path", self.runner)

    @property
    def work_folder(self) -> Path:
        """The folder a script's trial mirrors the user's tree in (its spec names it)."""
        return _named(self.workdir, "workdir", self.runner)

    def peak_flops(self, precision: str) -> float | None:
        """The device's measured matmul peak at `precision` (the frame's), where it has one."""
        found = ((self.peaks or {}).get("matmul_flops") or {}).get(precision)
        return None if found is None else float(found)

    def to_dict(self) -> JsonObject:
        """The spec as the child reads it (plain dicts and lists); checked once, when it was built (frozen)."""
        data: JsonObject = {"schema_version": SCHEMA_VERSION}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in ("job", "knobs"):
                data[item.name] = value.to_dict()
            elif item.name in self._ALWAYS or value is not None:
                data[item.name] = thawed(value)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "trial spec") -> "TrialSpec":
        """The spec from its JSON form; RecordError naming the first field that is missing or wrong."""
        plain = thawed(data)
        validate("trial_spec", plain, where)
        values = {item.name: plain[item.name] for item in fields(cls) if item.name in plain}
        if plain["kind"] in WHOLE_KINDS:
            try:
                values.update(job=Job.from_dict(plain["job"]), knobs=Knobs.from_dict(plain["knobs"]))
            except (JobError, TypeError) as error:
                raise RecordError(f"{where} is not valid at job: {error}") from error
        else:
            values.update(job=ProbeJob(int(plain["job"]["seed"]), bool(plain["job"]["smoke"])),
                          knobs=ProbeKnobs(str(plain["knobs"]["precision"])))
        return cls(**values)


def _named(path: str | None, name: str, runner: str) -> Path:
    if path is None:
        raise RecordError(f"a {runner} runner's spec names its {name}")
    return Path(path)


@dataclass(frozen=True)
class RunResult:
    """How one run ended: its state and reason, the measurement of a complete trial or the facts of a
    complete frame, and what the child and the executor add (wall time, exit code, logs, placement)."""

    state: str
    reason: str
    measurement: Measurement | None = None
    frame: Mapping[str, Any] | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "frame", _frozen(self.frame))
        object.__setattr__(self, "details", _frozen(self.details))

    @property
    def complete(self) -> bool:
        return self.state == "complete" and self.measurement is not None

    def measured(self) -> Measurement:
        """The measurement of a complete run (asking another for one is a bug)."""
        if self.measurement is None:
            raise RecordError(f"a run that ended {self.state} has no measurement")
        return self.measurement

    @property
    def wall_s(self) -> float:
        """The run's wall time, start-up included (the executor adds it)."""
        return float(self.details.get("wall_s") or 0.0)

    @property
    def placement(self) -> dict[str, str] | None:
        """The node and GPU the run was on, where an executor has several."""
        placement = self.details.get("placement")
        return None if placement is None else dict(placement)

    @property
    def stderr_tail(self) -> str | None:
        tail = self.details.get("stderr_tail")
        return None if tail is None else str(tail)

    @property
    def remeasure(self) -> bool:
        """The GPU slowed itself during the measured window: the run is worth one more try."""
        return bool(self.details.get("remeasure"))

    def to_dict(self) -> JsonObject:
        data: JsonObject = {"state": self.state, "reason": self.reason}
        if self.measurement is not None:
            data["measurement"] = self.measurement.to_dict()
        if self.frame is not None:
            data["frame"] = thawed(self.frame)
        data.update(thawed(self.details))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "run result", check: bool = True) -> "RunResult":
        """A run's result; `check`: against run_result.json first (what a child wrote: read_result). The
        loop reads results its executor already checked, and a test's or a benchmark's table, unchecked."""
        plain = thawed(data)
        if check:
            validate("run_result", plain, where)
        measurement = plain.get("measurement")
        details = {key: value for key, value in plain.items() if key not in ("state", "reason", "measurement", "frame")}
        return cls(plain["state"], plain["reason"], Measurement.from_dict(measurement) if measurement else None,
                   plain.get("frame"), details)


def spec_problem(spec: Mapping[str, Any]) -> str | None:
    """Why `spec` cannot be handed to a runner, as one line, or None when it is a valid TrialSpec."""
    if spec.get("kind") == HANDOVER_KIND:
        return None
    found = violation("trial_spec", thawed(spec))
    return None if found is None else f"the trial spec is {found}"


def write_spec(path: Path, spec: Mapping[str, Any]) -> JsonObject | None:
    """Write `spec` where the child reads it, once it is valid; else the run's `invalid` result, unwritten."""
    problem = spec_problem(spec)
    if problem is not None:
        return {"state": "invalid", "reason": problem, "wall_s": 0.0, "exit_code": None}
    write_json_atomic(path, dict(spec))
    return None


def read_result(raw: str | bytes | Mapping[str, Any], where: str = "result.json") -> JsonObject:
    """What a child wrote (its text, or the dict a remote slot returned), checked against RunResult: a
    result that is torn, or says what no run can measure, is the state `invalid` with the reason."""
    try:
        data = json.loads(raw) if isinstance(raw, (str, bytes)) else thawed(raw)
    except ValueError as error:
        return {"state": "invalid", "reason": f"{where} is not JSON ({error}): the runner's result was torn"}
    if not isinstance(data, dict):
        return {"state": "invalid", "reason": f"{where} holds {type(data).__name__}, not a run's result"}
    try:
        return RunResult.from_dict(data, where).to_dict()
    except RecordError as error:
        return rejected(data, str(error))


def rejected(data: Mapping[str, Any], why: str) -> JsonObject:
    """The `invalid` result that stands for a malformed one (keeping its measurement to look at)."""
    out: JsonObject = {"state": "invalid", "reason": why[:600]}
    if isinstance(data.get("measurement"), dict):
        out["measurement_rejected"] = data["measurement"]
    return out
