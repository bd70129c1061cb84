"""The loop: frame -> baseline -> one change at a time -> outputs.

A change is kept only when it is faster than the incumbent beyond noise on interleaved runs in fresh
processes (one screening run, then pairs, more while undecided and more could decide it, each look at
its share of the false-keep rate: autotune/loop/keep_rule.py over probes/sequential.py), its per-row losses
match the baseline's (parity), and, when it moved a memory knob, its worst-case batch fits the device.
Specs and timeouts: trial_spec.py; runs and extra pairs: measuring.py; one trial: trial.py; decisions
on runs: judge.py; what to try next: next_change.py; a trial's record: recording.py.

The Tuner holds collaborators only (job, executor, run folder, memory, display, trackers, LLM, script)
and keeps every piece of mutable loop state in `self.state`, a LoopState (state.py) saved to
state.json after each trial. The loop is ask / tell: `ask` ranks what to try next (or says why to
stop), `run_trial` measures one change and decides it without writing anything or moving the state
(its runs are counted on a copy, its incumbent runs join a copy), `tell` journals the trial (the run
folder, then the knowledge base, the display and the trackers) and is the one place a trial moves the
state on. The serial loop is `tell(run_trial(...))`; the parallel driver (parallel.py) runs `run_trial`
speculatively on forks (`fork`) and tells only the committed trial.
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

from ..util.errors import AutotuneError
from ..executors.base import Executor
from ..config.types import peaks_json
from ..config.job import Job
from ..workloads.jobs import completed
from ..kb import kb_folder, read_peak_cache, remember_peaks
from ..config.knobs import Knobs, numerics_limits
from ..config.measurement import Decision, Measurement
from ..config.messages import RunResult, thawed
from ..config.records import TrialRecord
from ..config.types import JsonObject
from ..kb.features import FeatureView
from . import judge, limits, recording, trial_spec
from .limits import Frame, device_of, frame_limit, limits_of, silent_limit
from ..probes import stats
from .learn import Memory
from .measuring import Meter
from .outcome import Asked, Incumbent, Outcome, Started, kept_product
from .next_change import next_hypotheses, warm_check
from ..reasoner import Hypothesis, key, rank
from ..output.records import RunFolder
from ..util.io import write_json_atomic
from .recording import Trial
from .state import LoopState
from .trial import run_trial
from .trial_spec import FRAME_TIMEOUT_S, Specs, StepBudget, runner_for

# runner_for, StepBudget: defined here before trial_spec.py; bench/ and tests import them from here.
__all__ = ["StepBudget", "Tuner", "frame_limit", "runner_for", "silent_limit"]


class Tuner:
    """One tune of `job` in `root/RUN/`: collaborators here, every piece of mutable loop state in
    `self.state` (LoopState), so a fork with another executor or state is the same loop (`fork`)."""

    def __init__(self, job: Job, executor: Executor, root: Path, display: Any = None,
                 inject: dict[int, str] | None = None, fresh: bool = False) -> None:
        # A Job built in Python gets the defaults its words would (workloads/jobs.py); autotune.tune has
        # checked it as the words are, and a resumed or replayed job was checked when it was made.
        job = completed(job, check=False)
        self.job, self.executor, self.display = job, executor, display
        self.folder = RunFolder(root, job.run)
        self.kb = kb_folder(job.kb)
        self.steps = StepBudget.for_job(job)
        self.inject = inject or {}
        self.memory = Memory(job, fresh)
        self.state = LoopState.new(job.run, self.memory.run_id, job.start)  # a resume loads it instead
        self.parallel: Any = None  # the driver of trials at once, for an executor with several GPUs
        from ..output.tracking import trackers_for

        self.trackers = trackers_for(job)  # observers of each appended record and of the end (tracking.py)
        self.llm = None
        if job.llm is not None:
            from ..reasoner.llm import LLMProposer, LLMSettings

            self.llm = LLMProposer(LLMSettings.from_env(job.llm.model, job.llm.timeout_s))
        self.script = None
        # A script's config paths are as the user gave them, relative to where autotune was started.
        self.cwd = Path.cwd() if job.script is not None else None
        if job.script is not None:
            from ..workloads.script import ScriptAdapter

            self.script = ScriptAdapter.for_script(Path(job.script.path), job.script.configs, shlex.split(job.script.args),
                                                   self.cwd, job.max_len, job.effective_batch, job.script.knobs,
                                                   job.script.parsed, tuple(shlex.split(job.script.launcher)))

    @property
    def records(self) -> list[TrialRecord]:
        """The trials so far, baseline first (the state's; trackers and bench/ read them here)."""
        return self.state.records

    def fork(self, executor: Executor, folder: Any = None, state: LoopState | None = None) -> "Tuner":
        """This tuner measuring through `executor` (and into `folder`), with `state` (default: this
        tuner's own, shared): the parallel driver's speculations (their own state, no display) and its
        commits (a replay of a speculation's runs)."""
        twin = copy.copy(self)
        twin.executor = executor
        twin.folder = self.folder if folder is None else folder
        twin.state = self.state if state is None else state
        if state is not None:
            twin.display = None  # a speculation shows nothing: the commit shows the trial
        return twin

    # -- running one measurement -------------------------------------------------------------
    @property
    def specs(self) -> Specs:
        """What this tune's specs are built from (read when asked: tests and bench/ set `steps`)."""
        return Specs(self.job, self.steps, self.folder, self.script, self.cwd, self.inject)

    def meter(self) -> Meter:
        """A Meter on a copy of the state's run counters (`tell`, or `measure`, takes them back)."""
        records = self.state.records
        work = records[0].measurements[0].window_tokens if records and records[0].measurements else None
        return Meter(self.executor, self.specs, self.state.peaks, self.state.counts(), self.display, work)

    def measure(self, knobs: Knobs, trial: int, label: str, ceiling: bool = False) -> RunResult:
        """One run of `knobs` in a fresh child process (with the worst-case batch when `ceiling`), counted
        in the state at once: the baseline's runs, and bench/record.py's, which are no trial."""
        meter = self.meter()
        result = meter.measure(knobs, trial, label, ceiling)
        self.state.take(meter.counts)
        return result

    def _room_for(self, runs: int) -> bool:
        """Whether `runs` more measurements fit in the time budget (trial_spec.room_for)."""
        return self.meter().room_for(runs)

    # -- phases -----------------------------------------------------------------------------
    def frame(self) -> Frame:
        if self.display:
            self.display.running(None, "frame: device, model and data")
        spec = self.specs.spec("frame", self.job.start, 0, self.state.peaks, peak_cache=read_peak_cache(self.kb))
        result = RunResult.from_dict(self.executor.run(spec, self.folder.trial_dir("frame"), FRAME_TIMEOUT_S),
                                     check=False)
        if result.state != "complete" or result.frame is None:
            raise AutotuneError(f"the frame step failed ({result.state}): {result.reason}")
        frame: Frame = thawed(result.frame)
        peaks = device_of(frame)["peaks"]
        remember_peaks(self.kb, peaks)
        self.state.peaks = peaks_json(peaks)
        self.memory.start(frame)
        write_json_atomic(self.folder.frame, {"schema_version": 1, **frame})
        return frame

    def baseline(self) -> tuple[Incumbent, Measurement, float]:
        past = self.memory.replay(self.job.start, self.job.start)
        if past is not None and past.state == "complete" and len(past.measurements) >= 2:
            return self._replayed_baseline(past, str(past["experiment"]))
        # Where the knowledge base holds this device's run-to-run spread, one repeat less: the spread is
        # not the baseline's alone (learn.spread_prior). The first repeat also runs the worst-case batch.
        prior = self.memory.spread_prior()
        repeats = max(2, self.steps.baseline_repeats - 1) if prior else self.steps.baseline_repeats
        results = [self.measure(self.job.start, 0, f"baseline 1/{repeats}", True)]
        if results[0].state != "oom":
            results += [self.measure(self.job.start, 0, f"baseline {i + 1}/{repeats}") for i in range(1, repeats)]
        complete = [r.measured() for r in results if r.state == "complete"]
        incumbent = Incumbent(self.job.start, [], 0)
        for measurement in complete:
            incumbent.add(measurement)
        floor = stats.noise_floor(incumbent.runs) if complete else 0.0
        state = "oom" if results[0].state == "oom" else ("complete" if complete else results[0].state)
        record = self._record(state, f"the user's config, measured {len(complete)} times in fresh processes; "
                              f"A/A noise floor {floor:.2%}", complete, wall=sum(r.wall_s for r in results))
        record["noise_floor"] = floor
        if prior is not None:
            # keep_rule.groups: a few df of this device's past runs
            record["spread_prior"] = {"sd": prior.sd, "df": prior.df, "runs": prior.runs}
        if results[0].state == "oom" or len(complete) < 2:
            failed = results[0] if results[0].state == "oom" else next(r for r in results if r.state != "complete")
            record["reason"] = f"baseline did not complete ({failed.state}): {failed.reason}"
            record["stderr_tail"] = failed.stderr_tail
            self._journal(record)
            hint = trial_spec.baseline_budget_hint(self.job, results)
            raise AutotuneError(f"the baseline config did not run: {failed.state}: {failed.reason}{hint}")
        return self._baseline_done(record, incumbent, complete[0], floor)

    def _record(self, state: str, reason: str, measurements: list[Measurement], wall: float) -> JsonObject:
        """A record of the baseline's runs, taking where they ran from the state's counters."""
        counts = self.state.counts()
        record = recording.record(self.job.run, 0, None, self.job.start, state, Decision("baseline", reason),
                                  measurements, wall, counts.take_placement())
        self.state.take(counts)
        return record

    def _replayed_baseline(self, past: TrialRecord, experiment: str) -> tuple[Incumbent, Measurement, float]:
        incumbent = Incumbent(self.job.start, [], 0)
        for measurement in past.measurements:
            incumbent.add(measurement, replayed=True)
        floor = stats.noise_floor(incumbent.runs)
        if past.wall_s:
            # A trial's timeout follows the slowest measurement so far; the record says how long they took.
            self.state.slowest_s = past.wall_s / max(1, len(past.measurements))
        record = self._record("replayed", f"replayed from {experiment} (same job, device and software; say `fresh` "
                              f"to measure again); A/A noise floor {floor:.2%}", list(past.measurements), wall=0.0)
        record.update(noise_floor=floor, replayed_from=experiment)
        return self._baseline_done(record, incumbent, past.measurements[0], floor)

    def _baseline_done(self, record: JsonObject, incumbent: Incumbent, first: Measurement,
                       floor: float) -> tuple[Incumbent, Measurement, float]:
        self._journal(record, self.job.start, None, incumbent.profile)
        self.state.measured.add(key(self.job.start))
        self.state.incumbent, self.state.noise_floor = incumbent, floor
        return incumbent, first, floor

    def _budget_left(self, trials_done: int) -> str | None:
        if self.job.max_trials is not None and trials_done >= self.job.max_trials:
            return f"max_trials={self.job.max_trials} reached"
        if self.state.budget_spent:
            return f"time budget of {self.job.time_budget_s}s spent"
        if not self._room_for(1):
            return f"time budget of {self.job.time_budget_s}s would be exceeded by another trial"
        return None

    def begin(self) -> Started:
        """Frame and baseline: the frame is complete once the baseline has shown its ceiling and where
        its time goes."""
        frame = self.frame()
        incumbent, base_measurement, floor = self.baseline()
        return Started(self.complete_frame(frame, base_measurement), incumbent, base_measurement, floor)
    def complete_frame(self, frame: Frame, base_measurement: Measurement) -> Frame:
        # The numerics opt-in holds for every runner: an MLP's or a script's frame does not know of it.
        limits = limits_of(frame)
        limits = limits + [lim for lim in numerics_limits(self.job.allow_numerics_change) if lim not in limits]
        ceiling = base_measurement.ceiling
        frame = {**frame, "ceiling": ceiling.to_dict() if ceiling else None, "breakdown": base_measurement.breakdown,
                 "limits": limits}
        if self.script is not None:
            # A script's model and data are seen only when it runs: the baseline's hooks read them.
            frame.update(model=base_measurement.model or {}, data=base_measurement.data or {})
        self.memory.start(frame)
        self.state.frame_facts = frame
        write_json_atomic(self.folder.frame, {"schema_version": 1, **frame})
        return frame

    def run(self, resume: bool = False) -> Outcome:
        """The whole loop; with `resume`, from where a stopped or killed run of this folder left off.

        Under the run folder's lock from before the first write to the last: a second tuner or a resume
        of the same RUN stops with JobError (exit 2) naming this process, and writes nothing."""
        with self.folder.locked():
            return self._run(resume)

    def _run(self, resume: bool) -> Outcome:
        if resume:
            from .resume import restore

            restore(self)  # self.state: the saved state, caught up with the run folder's records
        else:
            self.folder.create({**self.job.to_dict(), **({"fresh": True} if self.memory.fresh else {})})
            self.state.save(self.folder.state)  # the run id is on disk from the start
            self.begin()
            self.state.save(self.folder.state)
        state = self.state
        if hasattr(self.executor, "slots"):
            from .parallel import ParallelTrials  # an executor with several GPUs: independent trials at once

            self.parallel = ParallelTrials(self)
        baseline_speed = state.records[0].samples_per_s or 0.0
        stop_reason, skipped = "every applicable change was tried", list[tuple[str, str]]()
        while True:
            asked = self.ask()
            skipped = asked.skipped
            stop_reason = asked.spent or stop_reason
            if asked.stop or not asked.hypotheses:
                stop_reason = asked.stop or stop_reason
                break
            trial = state.trials_done + 1
            if self.parallel is not None:
                self.parallel.attempt(trial, asked.hypotheses)
            else:
                self.tell(self.run_trial(trial, asked.hypotheses[0], state.incumbent))
            state.trials_done = trial
            state.save(self.folder.state)
        state.stop_reason, state.skipped = stop_reason, skipped
        state.save(self.folder.state)
        incumbent, records = state.incumbent, state.records
        self.memory.finish(records, incumbent.knobs, incumbent.trial, kept_product(records), baseline_speed,
                           stop_reason)
        best_record = next(r for r in reversed(records) if r.trial == incumbent.trial)
        outcome = Outcome(frame=state.frame_facts, baseline={"samples_per_s": baseline_speed,
                                                             "measurement": state.base.to_dict()},
                          best=incumbent, records=records, skipped=skipped, noise_floor=state.noise_floor,
                          stop_reason=stop_reason, wall_s=state.elapsed_s, folder=self.folder.path,
                          best_measurement=best_record.measurements[-1],
                          parallel=self.parallel.close() if self.parallel is not None else None,
                          device_runs=state.runs, device_s=sum(state.walls))
        return outcome

    # -- ask / tell ---------------------------------------------------------------------------
    def ask(self) -> Asked:
        """What to try next on the incumbent, best first, the changes skipped and why, and why to stop."""
        state = self.state
        incumbent, trial, frame = state.incumbent, state.trials_done, state.frame_facts
        features = self.memory.features(incumbent.knobs, incumbent.profile)
        hypotheses, skipped = rank(incumbent.knobs, device_of(frame), self.job.effective_batch, state.measured,
                                   self.memory.claims, features, state.blocked.get(key(incumbent.knobs), ()))
        warm = self.memory.warm_start(incumbent.knobs, state.measured) if trial == 0 else None
        if warm is not None:
            hypotheses.insert(0, warm)
        hypotheses, skipped = self._allowed(hypotheses, skipped)
        # Beyond the ranked singles: undo parts of a kept combination, pool, then a model of all trials.
        least = judge.stop_floor(self.steps, state.records, state.noise_floor)
        hypotheses, spent = next_hypotheses(incumbent.knobs, hypotheses, state.records, device_of(frame),
                                            self.job.effective_batch, state.measured, self.memory.claims,
                                            features, least, self._allowed, skipped)
        check = warm_check(incumbent.knobs, self.job.start, state.records, state.measured,
                           lambda: self._first_on_start(frame, incumbent))
        if check is not None:  # as every proposal: only=, the frame's limits, the script's settings
            hypotheses = self._allowed([check], skipped)[0] + hypotheses
        stop = self._budget_left(trial)
        if not stop and warm is None and self.llm is not None and not self.llm.off:
            hypotheses = self._ask_llm(trial + 1, incumbent, frame, features, hypotheses, skipped)
        return Asked(hypotheses, skipped, spent, stop)

    def run_trial(self, trial: int, hypothesis: Hypothesis, incumbent: Incumbent) -> Trial:
        """One change on `incumbent`, measured and decided (trial.py), or replayed where this job measured
        it before on this device and software; written nowhere, the state left as it is (`tell`)."""
        knobs = hypothesis.apply(incumbent.knobs)
        past = self.memory.replay(incumbent.knobs, knobs)
        if past is not None:
            return recording.replay(self.job.run, trial, hypothesis, incumbent, knobs, past, self.state.noise_floor,
                                    self.state.counts())
        return run_trial(self.meter(), self.steps, self.state.records, trial, hypothesis, incumbent,
                         self.state.noise_floor)

    def tell(self, done: Trial) -> Incumbent:
        """Journal a decided trial and move the state on: its runs' counters, the config measured, a limit
        its crash taught, the incumbent that follows it and the OOM bookkeeping (LoopState.conclude)."""
        state = self.state
        state.take(done.counts)
        state.measured.add(key(done.knobs))
        if done.limit is not None:
            # In place: the knowledge base's run record holds the frame with the limits found since.
            state.frame_facts["limits"] = [*limits_of(state.frame_facts), done.limit]
        self._journal(done.record, done.incumbent.knobs, done.hypothesis, done.incumbent.profile)
        return state.conclude(state.records[-1], done.hypothesis.change, done.measurements, done.incumbent)

    def _journal(self, record: JsonObject, incumbent: Knobs | None = None, hypothesis: Hypothesis | None = None,
                 profile: JsonObject | None = None) -> None:
        """One journal: `record`, a trial of `hypothesis` on `incumbent` (whose latest ceiling and breakdown
        are `profile`), written once; with no `incumbent`, a record that teaches nothing (a baseline that
        did not run). The run folder's experiments.jsonl first (the source of truth `resume` reads), then
        the knowledge base's copy and the beliefs' evidence (`Memory.plan` / `commit`), then the display
        and the trackers. The belief events are planned before the append, so the folder's line is whole
        on its own; a kill before the knowledge base's writes is mended by resume (`Memory.sync`)."""
        lesson = None
        if incumbent is not None:
            if hypothesis is not None:
                record["hypothesis"] = hypothesis.to_dict()
            lesson = self.memory.plan(record, incumbent, self.memory.features(incumbent, profile), hypothesis)
            record["beliefs"] = lesson.events
        self.folder.append_experiment(record)
        self.state.records.append(TrialRecord.from_dict(record))
        if lesson is not None:
            self.memory.commit(lesson)
        if self.display:
            self.display.finished(record)
        for tracker in self.trackers:  # after the run folder has it: the folder is the source of truth
            tracker.trial(self, record)

    def _first_on_start(self, frame: Frame, incumbent: Incumbent) -> Hypothesis | None:
        """The change the ranking puts first on the user's config (next_change.warm_check)."""
        features = self.memory.features(self.job.start, incumbent.profile)
        ranked, _ = rank(self.job.start, device_of(frame), self.job.effective_batch, self.state.measured, self.memory.claims,
                         features, ())
        return next(iter(self._allowed(ranked, [])[0]), None)

    def _ask_llm(self, before_trial: int, incumbent: Incumbent, frame: Frame, features: FeatureView,
                 ranked: list[Hypothesis], skipped: list[tuple[str, str]]) -> list[Hypothesis]:
        """The LLM's checked proposals go first, the ranking after; its new claims join the beliefs."""
        from ..reasoner.llm import prompt_context

        assert self.llm is not None and self.job.llm is not None  # ask asks only with a proposer
        claims, records, model = self.memory.claims, self.state.records, self.job.llm.model
        context = prompt_context(features, incumbent.knobs, self.job.effective_batch, records, claims, ranked,
                                 skipped, [r.change for r in records if r.change])
        proposal = self.llm.propose(context, incumbent.knobs, device_of(frame), self.job.effective_batch,
                                    self.state.measured, claims, features)
        proposal.hypotheses, cannot = self._allowed(proposal.hypotheses, [], report_only=True)
        for change, why in cannot:
            proposal.reject(change, why)
        if proposal.claims:
            self.memory.adopt(proposal.claims, f"proposed by the LLM {model} before trial {before_trial}")
        record = proposal.record(before_trial, model)
        self.folder.append_llm_call(record)
        if self.display:
            self.display.llm(record)
        proposed = {h.change for h in proposal.hypotheses}
        return proposal.hypotheses + [h for h in ranked if h.change not in proposed]

    def _allowed(self, hypotheses: list[Hypothesis], skipped: list[tuple[str, str]],
                 report_only: bool = False) -> tuple[list[Hypothesis], list[tuple[str, str]]]:
        """The hypotheses the user and the frame allow (limits.allowed), the others added to `skipped`."""
        return limits.allowed(self.job, self.script, self.state.frame_facts, hypotheses, skipped, report_only)
