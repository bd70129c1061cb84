"""The loop's state: everything a tune has found and counted so far, in one object with save and load.

`LoopState` holds what the Tuner used to carry as loose attributes: the records, the configs measured,
the changes that did not fit per incumbent (`blocked`), the run wall times, the budget flags, the
incumbent and the noise floor, the device's peaks, the frame's facts, where the latest run ran and how
many runs there were. The Tuner holds collaborators only (job, executor, folder, memory, display) and
reads and writes `tuner.state`.

`save` writes state.json (schema `loop_state.json`, version 2) atomically after every trial; the
records are not in it: experiments.jsonl is their one journal. `load` reads it back, or a version 1
file (before the state was explicit: the run id, the clock and how it ended), and `catch_up` takes in
the records the file does not cover (all of them for a version 1 file; the last one when the tuner was
killed between a trial's record and the state's write). A record changes the state in `conclude`
only, live or caught up: the OOM bookkeeping and the incumbent that follows a keep.

Not frozen: it is the loop's mutable state; `fork` gives the parallel driver's speculations their own.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..config.inputs import read_json
from ..config.knobs import Knobs
from ..config.measurement import Measurement
from ..config.records import TrialRecord
from ..config.types import JsonObject, KnobValue
from ..reasoner import key
from ..schemas import violation
from ..util.errors import DamagedRunError, RecordError
from ..util.io import write_json_atomic
from .outcome import Incumbent

SCHEMA_VERSION = 2
# A hand edit or a failing disk left state.json unreadable: what to do instead.
DAMAGED = "the run folder is damaged; start a new RUN (this one's records stay as they are)"


@dataclass
class RunCounts:
    """What the runs of one trial (or of the frame and baseline) count: a trial measures on its own copy
    (`LoopState.counts`) and `Tuner.tell` takes it back in (`LoopState.take`), so measuring moves no state."""

    started: float                 # time.monotonic() at the tune's start: the time budget counts from it
    runs: int = 0                  # measurements so far: a run's folder NNN-MMM counts them
    walls: list[float] = field(default_factory=list)  # wall time of each complete run
    slowest_s: float = 0.0         # the slowest complete run: a trial's timeout follows it
    budget_spent: bool = False     # a run was stopped at the end of the time budget
    placement: dict[str, str] | None = None  # where the latest run ran, until a record takes it

    def take_placement(self) -> dict[str, str] | None:
        """Where this record's runs ran (an executor with several GPUs says), taken by the record."""
        placement, self.placement = self.placement, None
        return placement


@dataclass
class LoopState:
    run: str
    run_id: str
    incumbent: Incumbent
    started: float = field(default_factory=time.monotonic)  # time.monotonic() at the start (saved as elapsed)
    records: list[TrialRecord] = field(default_factory=list)  # experiments.jsonl's, in order (not saved)
    covered: int = 0                          # how many records the loaded file had taken in
    measured: set[tuple[Any, ...]] = field(default_factory=set)      # key() of every config measured
    # Changes that did not fit in memory, per incumbent: what a checkpointing claim may enable.
    blocked: dict[tuple[Any, ...], set[str]] = field(default_factory=dict)
    walls: list[float] = field(default_factory=list)       # wall time of each complete run
    slowest_s: float = 0.0                    # the slowest complete run: a trial's timeout follows it
    budget_spent: bool = False                # a run was stopped at the end of the time budget
    runs: int = 0                             # measurements so far: a run's folder NNN-MMM counts them
    noise_floor: float = 0.0
    trials_done: int = 0
    peaks: JsonObject = field(default_factory=dict)        # the device's measured peaks (the frame's)
    frame_facts: JsonObject = field(default_factory=dict)  # the completed frame, limits found since (limits.Frame)
    placement: dict[str, str] | None = None   # the node and GPU of the latest run, where an executor says
    stop_reason: str | None = None            # set when the loop ended
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def new(cls, run: str, run_id: str, start: Knobs) -> "LoopState":
        return cls(run=run, run_id=run_id, incumbent=Incumbent(start, [], 0))

    @property
    def base(self) -> Measurement:
        """The baseline's first measurement: the reference of every parity check."""
        return self.records[0].measurements[0]

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def counts(self) -> RunCounts:
        """A copy of the run counters for one trial's runs to move (`take` brings them back)."""
        return RunCounts(self.started, self.runs, list(self.walls), self.slowest_s, self.budget_spent, self.placement)

    def take(self, counts: RunCounts) -> None:
        self.runs, self.walls, self.slowest_s = counts.runs, list(counts.walls), counts.slowest_s
        self.budget_spent, self.placement = counts.budget_spent, counts.placement

    # -- what a record changes: the one place, live and on resume ----------------------------------
    def conclude(self, record: TrialRecord, change: str | None, measurements: Sequence[Measurement],
                 incumbent: Incumbent) -> Incumbent:
        """Take in a trial of `change` on `incumbent`: an OOM blocks the change on that incumbent; a keep
        makes the trial's config the incumbent, built from its measurements. Returns the incumbent that
        follows (the state's from now on)."""
        self.incumbent = incumbent
        if record.outcome == "oom" and change is not None:
            self.blocked.setdefault(key(incumbent.knobs), set()).add(change)
        if record.decision == "keep":
            kept = Incumbent(Knobs.from_dict(dict(record.knobs)), [], record.trial, profile=dict(incumbent.profile))
            for measurement in measurements:
                kept.add(measurement, record.placement, record.replayed)
            self.incumbent = kept
        return self.incumbent

    def catch_up(self, stored: Sequence[Mapping[str, Any]], start: Knobs) -> list[TrialRecord]:
        """Take in the records this state does not cover (read back from experiments.jsonl); returns them.

        The measured configs, the incumbent, the OOM bookkeeping and the floor follow from each record;
        the wall times of runs not covered are estimated from their records (the mean of a trial's)."""
        records = self.records = [r if isinstance(r, TrialRecord) else TrialRecord.from_dict(r) for r in stored]
        new = records[self.covered:]
        for index, record in enumerate(new, self.covered):
            self.measured.add(key(Knobs.from_dict(dict(record.knobs))))
            if index == 0:  # the baseline: the user's config, measured in fresh processes
                self.incumbent = Incumbent(start, [], 0)
                for measurement in record.measurements:
                    self.incumbent.add(measurement, record.placement, record.replayed)
                self.noise_floor = float(record.noise_floor or 0.0)
                continue
            if record.state == "complete" and record.measurements:
                self.walls.append(record.wall_s / max(1, len(record.measurements)))
                self.slowest_s = max(self.slowest_s, self.walls[-1])
            self.conclude(record, record.change, record.measurements, self.incumbent)
        self.covered = max(self.covered, len(records))
        if new:
            self.trials_done = new[-1].trial
        return new

    def fork(self) -> "LoopState":
        """A speculation's own state: its own measured configs, wall times and OOM bookkeeping; the
        records, the frame and the peaks are the loop's (read, never appended to, by a speculation)."""
        return dataclasses.replace(self, measured=set(self.measured), walls=list(self.walls), blocked={},
                                   incumbent=copy.deepcopy(self.incumbent))

    # -- the file ---------------------------------------------------------------------------------
    def to_dict(self) -> JsonObject:
        incumbent = self.incumbent
        data: JsonObject = {
            "schema_version": SCHEMA_VERSION, "run": self.run, "run_id": self.run_id,
            # Saved after a trial is journaled and taken in: every record so far is in this state.
            "trials_done": self.trials_done, "records_covered": len(self.records),
            "elapsed_s": round(self.elapsed_s, 1),
            # Kept under their version 1 names: review and the MLflow tracker read them.
            "incumbent_trial": incumbent.trial, "incumbent_knobs": incumbent.knobs.to_dict(),
            "incumbent_samples": incumbent.samples, "noise_floor": self.noise_floor,
            "incumbent": {"runs": incumbent.runs, "profile": incumbent.profile, "cards": incumbent.cards},
            "measured": [dict(k) for k in sorted(self.measured, key=repr)],
            "blocked": [{"incumbent": dict(k), "changes": sorted(v)} for k, v in sorted(self.blocked.items(), key=repr)],
            "walls": self.walls, "slowest_s": self.slowest_s, "budget_spent": self.budget_spent, "runs": self.runs,
            "peaks": self.peaks, "frame_facts": self.frame_facts, "placement": self.placement,
        }
        if self.stop_reason is not None:
            data.update(stop_reason=self.stop_reason, skipped=[list(s) for s in self.skipped])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], start: Knobs) -> "LoopState":
        """A state file's contents (validated); a version 1 file covers no record, so every one is
        caught up, as resume did before the state was explicit."""
        started = time.monotonic() - float(data.get("elapsed_s", 0))
        stop_reason: str | None = data.get("stop_reason")
        skipped: list[tuple[str, str]] = [(s[0], s[1]) for s in data.get("skipped", [])]
        if data["schema_version"] == 1:
            return cls(run=data.get("run", ""), run_id=data.get("run_id") or "", incumbent=Incumbent(start, [], 0),
                       started=started, stop_reason=stop_reason, skipped=skipped)
        saved = data["incumbent"]
        incumbent = Incumbent(Knobs.from_dict(data["incumbent_knobs"]), list(data["incumbent_samples"]),
                              data["incumbent_trial"], runs=saved["runs"], profile=saved["profile"],
                              cards=saved["cards"])
        return cls(run=data["run"], run_id=data["run_id"], incumbent=incumbent, started=started,
                   covered=data["records_covered"], measured={_key(k) for k in data["measured"]},
                   blocked={_key(b["incumbent"]): set(b["changes"]) for b in data["blocked"]},
                   walls=list(data["walls"]), slowest_s=data["slowest_s"], budget_spent=data["budget_spent"],
                   runs=data["runs"], noise_floor=data["noise_floor"], trials_done=data["trials_done"],
                   peaks=data["peaks"], frame_facts=data["frame_facts"], placement=data["placement"], stop_reason=stop_reason,
                   skipped=skipped)

    def save(self, path: Path) -> None:
        """state.json, validated, whole or not at all (a full disk leaves the previous one)."""
        data = self.to_dict()
        wrong = violation("loop_state", data)
        if wrong:
            raise RecordError(f"{path}: the loop's state is {wrong}")  # a bug here, not the user's input
        write_json_atomic(path, data)

    @classmethod
    def load(cls, path: Path, start: Knobs) -> "LoopState":
        """state.json read back, or one RecordError line naming it (torn, not JSON, or not a state
        autotune wrote). `start`: the job's own config, the incumbent before the baseline."""
        run = Path(path).parent.name
        data = read_json(Path(path), f"RUN {run!r}", DamagedRunError, hint=DAMAGED, follow=False)
        wrong = violation("loop_state", data)
        if wrong:
            raise DamagedRunError(f"RUN {run!r}: {path} is not a state autotune wrote ({wrong}); {DAMAGED}")
        try:
            return cls.from_dict(data, start)
        except (TypeError, ValueError, KeyError) as error:  # knobs the schema lets through but Knobs refuses
            raise DamagedRunError(f"RUN {run!r}: {path} is not a state autotune wrote ({error}); {DAMAGED}") from None


def _key(knobs: Mapping[str, KnobValue]) -> tuple[tuple[str, KnobValue], ...]:
    """`reasoner.key` of a config stored as a dict (a key is its sorted items)."""
    return tuple(sorted(knobs.items()))
