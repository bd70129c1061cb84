"""Independent trials at once on several GPUs, recorded exactly as a serial run would record them.

With k GPU slots free, the top k hypotheses of the serial ranking are tried speculatively against the
current incumbent, each on its own slot: a fork of the tuner with its own LoopState runs the normal
`run_trial` (screen, then interleaved candidate/incumbent pairs) with an executor that keeps what every
run returned (the tape), and is never told the trial, so it writes nothing. The driver then commits
trials strictly in order: the next trial is the serial ranking's first hypothesis, decided by the normal
`run_trial` against a replay of its tape and written by the tuner's `tell`, as a serial run does.
When the committed state differs from the speculated one (a kept change moved the incumbent, or an
earlier commit changed what the screen sees), the replay finds a run it does not hold and measures it
then, on the tape's slot, so every run of one trial, and so every keep decision's interleaved pairs,
is on one GPU. The one-run screen, too, compares only with the incumbent's runs on the trial's card
(`Incumbent.runs_on`); on a card that has none yet, the incumbent's first paired run is measured before
the screen's verdict, so no decision ever rests on two cards of one model, which differ by several
percent. Tapes made for an incumbent
that is no longer the incumbent are thrown away. A slot lost before a trial's first run leaves nothing on its
tape, and the commit measures that whole trial on a live slot. Records, beliefs, the state file and
the report are written by the driver alone, at commit, in trial order.
"""

from __future__ import annotations

import copy
import json
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.types import JsonObject
from ..reasoner import Hypothesis, key


def _same(spec: JsonObject) -> str:
    return json.dumps(spec, sort_keys=True, default=str)


def _wall(result: JsonObject) -> float:
    """A run's wall time as its executor gave it (none for a run that never started)."""
    wall = result.get("wall_s")
    return float(wall) if isinstance(wall, (int, float)) else 0.0


@dataclass
class Tape:
    """One speculative trial: `hypothesis` on `incumbent` as trial `trial`, run on one slot."""

    trial: int
    hypothesis: Hypothesis
    incumbent: tuple[Any, ...]
    slot: Any
    folder: Path
    runs: list[tuple[str, JsonObject, Path]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    stale: bool = False


class _Recording:
    """The shadow's executor: runs on the tape's slot and keeps each spec and result."""

    def __init__(self, tape: Tape) -> None:
        self.tape = tape

    def run(self, spec: JsonObject, trial_dir: Path, timeout_s: float) -> JsonObject:
        if self.tape.stale:
            # Made for an incumbent that is gone: the shadow is ended at once, its slot freed for real work.
            return {"state": "crash", "reason": "speculation abandoned", "wall_s": 0.0, "exit_code": None}
        if not self.tape.runs and not getattr(self.tape.slot, "alive", True):
            # The slot was lost before the trial began: nothing is kept, so the commit runs it on a live slot.
            return {"state": "crash", "reason": "slot lost before the trial began", "wall_s": 0.0, "exit_code": None}
        result: JsonObject = self.tape.slot.run(spec, trial_dir, timeout_s)
        self.tape.runs.append((_same(spec), result, trial_dir))
        return result


class _Replay:
    """The committing tuner's executor: the tape's results while the specs match, then live runs on the
    tape's slot. Counts the device time the trial took, which a serial run would have waited for."""

    def __init__(self, tape: Tape, executor: Any) -> None:
        self.tape, self.position, self.device_s, self.live, self.live_s = tape, 0, 0.0, 0, 0.0
        self.executor = executor

    def run(self, spec: JsonObject, trial_dir: Path, timeout_s: float) -> JsonObject:
        runs = self.tape.runs
        if self.live == 0 and self.position < len(runs) and runs[self.position][0] == _same(spec):
            _, result, source = runs[self.position]
            self.position += 1
            if source.is_dir():
                shutil.copytree(source, trial_dir, dirs_exist_ok=True)
        else:
            if self.position == self.live == 0 and not getattr(self.tape.slot, "alive", True):
                # No run of this trial was on the lost slot, so the whole trial can still be on one GPU.
                self.tape.slot = next(iter(self.executor.slots()), self.tape.slot)
            self.live += 1
            result = self.tape.slot.run(spec, trial_dir, timeout_s)
            self.live_s += _wall(result)
        self.device_s += _wall(result)
        return copy.deepcopy(result)


class ParallelTrials:
    """The loop's `attempt` when the executor has several slots (`executor.slots()`)."""

    def __init__(self, tuner: Any) -> None:
        self.tuner, self.executor = tuner, tuner.executor
        self.tapes: list[Tape] = []
        self.started = time.monotonic()
        self.waited_s = 0.0  # the driver blocked on trials
        self.device_s = 0.0  # the committed trials' runs one after another: what a serial run waits for
        self.runs = {"replayed": 0, "live": 0, "thrown_away": 0}
        self.max_slots = len(self.executor.slots())
        self.speculative = tuner.folder.path / "speculative"

    # -- speculation ---------------------------------------------------------------------------
    def _shadow(self, tape: Tape) -> Any:
        """A fork of the tuner that measures on the tape's slot, with its own state (LoopState.fork); it
        is never told its trial, so it writes no record, belief or state."""
        return self.tuner.fork(_Recording(tape), _Folder(self.tuner.folder, tape.folder), self.tuner.state.fork())

    def _speculate(self, trial: int, hypothesis: Hypothesis, incumbent: Any, slot: Any) -> None:
        folder = self.speculative / f"{trial:03d}-{len(self.tapes) + self.runs['thrown_away']:03d}-{slot.where['gpu']}"
        tape = Tape(trial, hypothesis, key(incumbent.knobs), slot, folder)
        shadow, own = self._shadow(tape), copy.deepcopy(incumbent)

        def work() -> None:
            try:
                shadow.run_trial(trial, hypothesis, own)
            except Exception:  # noqa: BLE001 - the commit runs the trial again in the open and raises there
                pass
            finally:
                tape.done.set()

        self.tapes.append(tape)
        threading.Thread(target=work, name=f"autotune-trial-{trial}", daemon=True).start()

    def _free(self) -> list[Any]:
        busy = {id(t.slot) for t in self.tapes if not t.done.is_set()}
        return [slot for slot in self.executor.slots() if id(slot) not in busy]

    def _find(self, hypothesis: Hypothesis, incumbent: Any) -> Tape | None:
        return next((t for t in self.tapes if not t.stale and t.hypothesis.change == hypothesis.change
                     and t.incumbent == key(incumbent.knobs)), None)

    def _drop(self, tape: Tape) -> None:
        tape.stale = True
        if tape.done.is_set():
            self.tapes.remove(tape)
            self.runs["thrown_away"] += len(tape.runs)
            shutil.rmtree(tape.folder, ignore_errors=True)

    def _fill(self, trial: int, hypotheses: list[Hypothesis], incumbent: Any) -> None:
        """The top hypotheses on free slots, each as the trial it would be in a serial run if the ones
        before it are discarded; none past `max_trials`, where a serial run stops."""
        last = self.tuner.job.max_trials or trial + len(hypotheses)
        for offset, hypothesis in enumerate(hypotheses[:len(self.executor.slots())]):
            free = self._free()
            if not free or trial + offset > last:
                return
            if self._find(hypothesis, incumbent) is None:
                self._speculate(trial + offset, hypothesis, incumbent, free[0])

    # -- commit --------------------------------------------------------------------------------
    def attempt(self, trial: int, hypotheses: list[Hypothesis]) -> Any:
        """Trial `trial` as a serial run would do it, from its tape, told to the tuner; returns the
        incumbent after it."""
        tuner = self.tuner
        incumbent = tuner.state.incumbent
        for old in list(self.tapes):
            if old.incumbent != key(incumbent.knobs) or key(old.hypothesis.apply(incumbent.knobs)) in tuner.state.measured:
                self._drop(old)
        self._collect()
        waited = time.monotonic()
        while (tape := self._find(hypotheses[0], incumbent)) is None:
            self._fill(trial, hypotheses, incumbent)
            if self._find(hypotheses[0], incumbent) is None:
                if not self.executor.slots():
                    # Every slot is lost: the trial runs through the executor, which says so as a crash.
                    return tuner.tell(tuner.run_trial(trial, hypotheses[0], incumbent))
                time.sleep(0.05)  # every slot is busy with later hypotheses; the first to finish takes this one
                self._collect()
        # Nothing new starts before this commit: if it keeps its change, work begun now would be for the
        # old incumbent, and would hold a slot the next trials need.
        tape.done.wait()
        self.waited_s += time.monotonic() - waited
        replay = _Replay(tape, self.executor)
        # The tuner itself (its state, folder and display) with the replay as its executor.
        incumbent = tuner.tell(tuner.fork(replay).run_trial(trial, hypotheses[0], incumbent))
        self.waited_s += replay.live_s
        self.device_s += replay.device_s
        self.runs["replayed"] += replay.position
        self.runs["live"] += replay.live
        self.runs["thrown_away"] += len(tape.runs) - replay.position
        self.tapes.remove(tape)
        shutil.rmtree(tape.folder, ignore_errors=True)
        return incumbent

    def _collect(self) -> None:
        for tape in [t for t in self.tapes if t.stale and t.done.is_set()]:
            self._drop(tape)

    def close(self) -> JsonObject:
        """How the loop used the slots, for the report: the time a serial run would have waited against
        what this one waited. Speculations still running are left to finish on their slots unread."""
        for tape in list(self.tapes):
            self._drop(tape)
        shutil.rmtree(self.speculative, ignore_errors=True)
        wall = time.monotonic() - self.started
        return {"slots": self.max_slots, "slots_left": len(self.executor.slots()),
                "loop_s": round(wall, 3), "waited_s": round(self.waited_s, 3), "device_s": round(self.device_s, 3),
                "saved_s": round(max(0.0, self.device_s - self.waited_s), 3), **self.runs}


class _Folder:
    """The run folder as a shadow sees it: the same inputs, its trial folders under `speculative/`."""

    def __init__(self, folder: Any, own: Path) -> None:
        self._folder, self._own = folder, own

    def __getattr__(self, name: str) -> Any:
        return getattr(self._folder, name)

    def trial_dir(self, name: str) -> Path:
        return self._own / name
