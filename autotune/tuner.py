"""The loop: frame -> baseline -> one change at a time -> outputs.

A change is kept only when it is faster than the incumbent beyond the noise floor on interleaved
measurements (two pairs, up to two more while undecided and more could decide it), its per-row losses
match the baseline's (parity), and, when it moved a memory knob, its worst-case batch fits the device.
"""

from __future__ import annotations

import math
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import AutotuneError
from .executors.base import Executor
from .job import Job
from .kb import kb_folder, read_peak_cache, remember_peaks
from .knobs import CATALOG, Knobs
from . import keep_rule
from .probes import parity, stats
from .probes.timing import median
from .learn import Memory
from .outcome import Incumbent, Outcome, kept_product, summarize
from .decide import next_hypotheses
from .reasoner import Hypothesis, key, rank
from .records import RunFolder
from .io import write_json_atomic


@dataclass(frozen=True)
class StepBudget:
    """Steps per measurement: smoke keeps a CPU dry run within minutes."""

    measure_steps: int
    warmup_max: int
    baseline_repeats: int = 3
    # Interleaved pairs added, at most, to a comparison that two pairs leave undecided.
    extra_pairs: int = 14
    # "sequential": run-level test on a pooled spread, looked at after each pair (probes.sequential);
    # "floor": the bootstrap interval must clear the baseline's A/A floor, at most 2 extra pairs (before
    # issue 19; kept so `python -m bench.extra_pairs` can compare the two).
    keep_rule: str = "sequential"

    @classmethod
    def for_job(cls, job: Job) -> "StepBudget":
        return cls(measure_steps=4, warmup_max=3) if job.smoke else cls(measure_steps=8, warmup_max=8)


FRAME_TIMEOUT_S = 1800
# Steps after the measured window that are timed phase by phase (where the time goes).
PROFILE_STEPS = 1
# A trial may take this many times the slowest complete trial so far before it is stopped.
TIMEOUT_FACTOR = 4
MIN_TIMEOUT_S = 120


def runner_for(job: Job) -> str:
    """Which runner module trains this job: the user's script, the framework-free MLP, or Hugging Face."""
    if job.script:
        return "script"
    return "mlp" if job.is_mlp else "hf"


def frame_limit(frame: dict[str, Any], name: str, value: Any) -> str | None:
    """Why the frame says `name=value` cannot apply to this model (an MLP has no attention; a VLM may not
    pack rows); None if it can. A limit without a value covers every value of the knob."""
    for limit in frame.get("limits", ()):
        if limit["knob"] == name and limit.get("value") in (None, value):
            return limit["reason"]
    return None


def silent_limit(frame: dict[str, Any], name: str) -> bool:
    """A knob that means nothing for this kind of model (a vision knob on a text model): its changes are
    dropped without a note, as they would only crowd the report's list of skipped changes."""
    return any(limit["knob"] == name and limit.get("silent") for limit in frame.get("limits", ()))


class Tuner:
    def __init__(self, job: Job, executor: Executor, root: Path, display: Any = None,
                 inject: dict[int, str] | None = None, fresh: bool = False) -> None:
        self.job, self.executor, self.display = job, executor, display
        self.folder = RunFolder(root, job.run)
        self.kb = kb_folder(job.kb)
        self.peaks: dict[str, Any] = {}
        self.steps = StepBudget.for_job(job)
        self.inject = inject or {}
        self.records: list[dict[str, Any]] = []
        self.measured: set[tuple] = set()
        self.slowest_s = 0.0
        self.walls: list[float] = []
        self.budget_spent = False
        self.started = time.monotonic()
        self.runs = 0
        self.memory = Memory(job, fresh)
        # Changes that did not fit in memory, per incumbent: what a checkpointing claim may enable.
        self.blocked: dict[tuple, set[str]] = {}
        self.frame_facts: dict[str, Any] = {}
        self.placement: dict[str, Any] | None = None  # the node and GPU of the latest run, where an executor says
        self.parallel: Any = None
        self.llm = None
        if job.llm:
            from .reasoner.llm import LLMProposer, LLMSettings

            self.llm = LLMProposer(LLMSettings.from_env(job.llm, job.llm_timeout_s))
        self.script = None
        if job.script:
            from .script import ScriptAdapter

            # Config paths are as the user gave them, relative to where autotune was started.
            self.cwd = Path.cwd()
            self.script = ScriptAdapter.for_script(Path(job.script), job.script_configs, shlex.split(job.script_args),
                                                   self.cwd, job.max_len, job.effective_batch, job.script_knobs)

    # -- running one measurement -------------------------------------------------------------
    def _spec(self, kind: str, knobs: Knobs, trial: int, ceiling: bool = False) -> dict[str, Any]:
        if self.script is not None:
            return self._script_spec(kind, knobs, trial)
        return {
            "schema_version": 1, "kind": kind, "runner": runner_for(self.job), "job": self.job.to_dict(),
            "knobs": knobs.to_dict(), "rows_path": str(self.folder.rows.resolve()),
            "model_config_path": str(self.folder.model_config.resolve()),
            "rows_needed": self.job.effective_batch * (2 + self.steps.measure_steps),
            "measure_steps": self.steps.measure_steps, "warmup_max": self.steps.warmup_max,
            "ceiling": ceiling, "inject_fault": self.inject.get(trial) if kind == "trial" else None,
            "peaks": self.peaks, "profile_steps": PROFILE_STEPS,
        }

    def _script_spec(self, kind: str, knobs: Knobs, trial: int) -> dict[str, Any]:
        """A trial of the user's script: copies of its configs edited to say `knobs`, or its own flags."""
        edits, flags = self.script.edits(knobs)
        return {
            "schema_version": 1, "kind": kind, "runner": "script", "job": self.job.to_dict(), "knobs": knobs.to_dict(),
            "script": {"path": self.job.script, "cwd": str(self.cwd),
                       "configs": [{"label": label, "path": str((self.cwd / Path(label).expanduser()).resolve())}
                                   for label in self.job.script_configs],
                       "edits": edits, "args": shlex.split(self.job.script_args),
                       "expect": self.script.expected(knobs),
                       "exclude": [str(self.folder.path.parent.resolve())], "listing": self.script.listing()},
            "flags": flags, "measure_steps": self.steps.measure_steps, "warmup_max": self.steps.warmup_max,
            "ceiling": False, "inject_fault": self.inject.get(trial) if kind == "trial" else None,
            "peaks": self.peaks, "profile_steps": 0,
        }

    def _timeout(self) -> tuple[float, bool]:
        """Seconds a measurement may take, and whether the time budget (not slowness) sets that limit."""
        timeout = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * self.slowest_s) if self.slowest_s else FRAME_TIMEOUT_S
        if self.job.time_budget_s is not None:
            # The budget is a promise: a trial that would overrun it is stopped, not waited for.
            left = self.job.time_budget_s - (time.monotonic() - self.started)
            if left < timeout:
                return max(1.0, left), True
        return timeout, False

    def measure(self, knobs: Knobs, trial: int, label: str, ceiling: bool = False) -> dict[str, Any]:
        """One run of `knobs` in a fresh child process (with the worst-case batch when `ceiling`)."""
        self.runs += 1
        if self.display:
            self.display.running(trial, label)
        timeout, by_budget = self._timeout()
        trial_dir = self.folder.trial_dir(f"{trial:03d}-{self.runs:03d}")
        spec = self._spec("trial", knobs, trial, ceiling)
        if self.script is not None:
            spec["workdir"] = str(trial_dir.resolve() / "work")
        result = self.executor.run(spec, trial_dir, timeout)
        if result["state"] == "invalid" and result.get("remeasure"):
            # The GPU slowed itself (thermal, power brake): that window measured the cooling. Once more.
            result = self.executor.run(self._spec("trial", knobs, trial, ceiling),
                                       self.folder.trial_dir(f"{trial:03d}-{self.runs:03d}-again"), timeout)
        self.placement = result.get("placement", self.placement)
        if result["state"] == "complete" and result.get("placement"):
            result["measurement"]["placement"] = result["placement"]  # which card: comparisons stay on one
        if result["state"] == "timeout" and by_budget:
            result["reason"] = f"stopped at the end of the time budget ({self.job.time_budget_s}s)"
            self.budget_spent = True
        if result["state"] == "complete":
            self.slowest_s = max(self.slowest_s, result["wall_s"])
            self.walls.append(result["wall_s"])
        return result

    # -- phases -----------------------------------------------------------------------------
    def frame(self) -> dict[str, Any]:
        if self.display:
            self.display.running(None, "frame: device, model and data")
        spec = {**self._spec("frame", self.job.start, 0), "peak_cache": read_peak_cache(self.kb)}
        result = self.executor.run(spec, self.folder.trial_dir("frame"), FRAME_TIMEOUT_S)
        if result["state"] != "complete":
            raise AutotuneError(f"the frame step failed ({result['state']}): {result['reason']}")
        remember_peaks(self.kb, result["frame"]["device"]["peaks"])
        self.peaks = result["frame"]["device"]["peaks"]
        self.memory.start(result["frame"])
        write_json_atomic(self.folder.frame, {"schema_version": 1, **result["frame"]})
        return result["frame"]

    def baseline(self) -> tuple[Incumbent, dict[str, Any], float]:
        past = self.memory.replay(self.job.start, self.job.start)
        if past is not None and past["state"] == "complete" and len(past["measurements"]) >= 2:
            return self._replayed_baseline(past)
        # The first repeat also runs the worst-case batch: the user's config must fit before anything else.
        results = [self.measure(self.job.start, 0, f"baseline 1/{self.steps.baseline_repeats}", True)]
        if results[0]["state"] != "oom":
            results += [self.measure(self.job.start, 0, f"baseline {i + 1}/{self.steps.baseline_repeats}")
                        for i in range(1, self.steps.baseline_repeats)]
        complete = [r for r in results if r["state"] == "complete"]
        incumbent = Incumbent(self.job.start, [], 0)
        for result in complete:
            incumbent.add(result["measurement"])
        floor = stats.noise_floor(incumbent.runs) if complete else 0.0
        state = "oom" if results[0]["state"] == "oom" else ("complete" if complete else results[0]["state"])
        record = self._record(0, None, self.job.start, state,
                              "baseline", f"the user's config, measured {len(complete)} times in fresh processes; "
                              f"A/A noise floor {floor:.2%}", [r["measurement"] for r in complete],
                              wall=sum(r["wall_s"] for r in results))
        record["noise_floor"] = floor
        if results[0]["state"] == "oom" or len(complete) < 2:
            failed = results[0] if results[0]["state"] == "oom" else next(r for r in results if r["state"] != "complete")
            record["reason"] = f"baseline did not complete ({failed['state']}): {failed['reason']}"
            record["stderr_tail"] = failed.get("stderr_tail")
            self._append(record)
            raise AutotuneError(f"the baseline config did not run: {failed['state']}: {failed['reason']}")
        self._learn(record, self.job.start, None, incumbent.profile)
        self._append(record)
        self.measured.add(key(self.job.start))
        return incumbent, complete[0]["measurement"], floor

    def _replayed_baseline(self, past: dict[str, Any]) -> tuple[Incumbent, dict[str, Any], float]:
        incumbent = Incumbent(self.job.start, [], 0)
        for measurement in past["measurements"]:
            incumbent.add(measurement)
        floor = stats.noise_floor(incumbent.runs)
        if past.get("wall_s"):
            # A trial's timeout follows the slowest measurement so far; the record says how long they took.
            self.slowest_s = past["wall_s"] / max(1, len(past["measurements"]))
        record = self._record(0, None, self.job.start, "replayed", "baseline",
                              f"replayed from {past['experiment']} (same job, device and software; say `fresh` to "
                              f"measure again); A/A noise floor {floor:.2%}", past["measurements"], wall=0.0)
        record.update(noise_floor=floor, replayed_from=past["experiment"])
        self._learn(record, self.job.start, None, incumbent.profile)
        self._append(record)
        self.measured.add(key(self.job.start))
        return incumbent, past["measurements"][0], floor

    def _budget_left(self, trials_done: int) -> str | None:
        if self.job.max_trials is not None and trials_done >= self.job.max_trials:
            return f"max_trials={self.job.max_trials} reached"
        if self.budget_spent:
            return f"time budget of {self.job.time_budget_s}s spent"
        if not self._room_for(1):
            return f"time budget of {self.job.time_budget_s}s would be exceeded by another trial"
        return None

    def begin(self) -> tuple[dict[str, Any], Incumbent, dict[str, Any], float]:
        """Frame and baseline: the frame is complete once the baseline has shown its ceiling and where
        its time goes."""
        frame = self.frame()
        incumbent, base_measurement, floor = self.baseline()
        return self.complete_frame(frame, base_measurement), incumbent, base_measurement, floor

    def complete_frame(self, frame: dict[str, Any], base_measurement: dict[str, Any]) -> dict[str, Any]:
        frame = {**frame, "ceiling": base_measurement.get("ceiling"), "breakdown": base_measurement.get("breakdown")}
        if self.script is not None:
            # A script's model and data are seen only when it runs: the baseline's hooks read them.
            frame.update(model=base_measurement.get("model") or {}, data=base_measurement.get("data") or {})
        self.memory.start(frame)
        self.frame_facts = frame
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

            frame, incumbent, base_measurement, floor, trial = restore(self)
        else:
            self.folder.create(self.job.to_dict())
            self._save_state(0, Incumbent(self.job.start, [], 0), 0.0)  # the run id is on disk from the start
            frame, incumbent, base_measurement, floor = self.begin()
            trial = 0
        if hasattr(self.executor, "slots"):
            from .parallel import ParallelTrials  # an executor with several GPUs: independent trials at once

            self.parallel = ParallelTrials(self)
        baseline_speed = self.records[0]["samples_per_s"]
        stop_reason, skipped = "every applicable change was tried", []
        while True:
            features = self.memory.features(incumbent.knobs, incumbent.profile)
            hypotheses, skipped = rank(incumbent.knobs, frame["device"], self.job.effective_batch, self.measured,
                                       self.memory.claims, features, self.blocked.get(key(incumbent.knobs), ()))
            warm = self.memory.warm_start(incumbent.knobs, self.measured) if trial == 0 else None
            if warm is not None:
                hypotheses.insert(0, warm)
            hypotheses, skipped = self._allowed(hypotheses, skipped)
            # Beyond the ranked singles: undo parts of a kept combination, pool, then a model of all trials.
            hypotheses, spent = next_hypotheses(incumbent.knobs, hypotheses, self.records, frame["device"],
                                                self.job.effective_batch, self.measured, self.memory.claims,
                                                features, self._stop_floor(floor), self._allowed, skipped)
            stop_reason = spent or stop_reason
            stop = self._budget_left(trial)
            if not stop and warm is None and self.llm is not None and not self.llm.off:
                hypotheses = self._ask_llm(trial + 1, incumbent, frame, features, hypotheses, skipped)
            if stop or not hypotheses:
                stop_reason = stop or stop_reason
                break
            trial += 1
            if self.parallel is not None:
                incumbent = self.parallel.attempt(trial, hypotheses, incumbent, base_measurement, floor)
            else:
                incumbent = self._try(trial, hypotheses[0], incumbent, base_measurement, floor)
            self._save_state(trial, incumbent, floor)
        self._save_state(trial, incumbent, floor, stop_reason=stop_reason, skipped=skipped)
        self.memory.finish(self.records, incumbent.knobs, incumbent.trial, self._speedup(), baseline_speed, stop_reason)
        best_record = next(r for r in reversed(self.records) if r["trial"] == incumbent.trial)
        outcome = Outcome(frame=frame, baseline={"samples_per_s": baseline_speed, "measurement": base_measurement},
                          best=incumbent, records=self.records, skipped=skipped, noise_floor=floor,
                          stop_reason=stop_reason, wall_s=time.monotonic() - self.started, folder=self.folder.path,
                          best_measurement=best_record["measurements"][-1],
                          parallel=self.parallel.close() if self.parallel is not None else None)
        return outcome

    def _ask_llm(self, before_trial: int, incumbent: Incumbent, frame: dict[str, Any], features: dict[str, Any],
                 ranked: list[Hypothesis], skipped: list[tuple[str, str]]) -> list[Hypothesis]:
        """The LLM's checked proposals go first, the ranking after; its new claims join the beliefs."""
        from .reasoner.llm import prompt_context

        claims = self.memory.claims
        context = prompt_context(features, incumbent.knobs, self.job.effective_batch, self.records, claims, ranked,
                                 skipped, [r["change"] for r in self.records if r["change"]])
        proposal = self.llm.propose(context, incumbent.knobs, frame["device"], self.job.effective_batch,
                                    self.measured, claims, features)
        proposal.hypotheses, cannot = self._allowed(proposal.hypotheses, [], report_only=True)
        for change, why in cannot:
            proposal.reject(change, why)
        if proposal.claims:
            self.memory.adopt(proposal.claims, f"proposed by the LLM {self.job.llm} before trial {before_trial}")
        record = proposal.record(before_trial, self.job.llm)
        self.folder.append_llm_call(record)
        if self.display:
            self.display.llm(record)
        proposed = {h.change for h in proposal.hypotheses}
        return proposal.hypotheses + [h for h in ranked if h.change not in proposed]

    def _allowed(self, hypotheses: list[Hypothesis], skipped: list[tuple[str, str]],
                 report_only: bool = False) -> tuple[list[Hypothesis], list[tuple[str, str]]]:
        """Only changes to knobs the user left to autotune (`only=`), and for a script, only those it
        has a setting for. Knobs the user kept are dropped without a note, unless `report_only`."""
        kept = []
        for hypothesis in hypotheses:
            held = next((k for k, _ in hypothesis.changes if self.job.only and k not in self.job.only), None)
            if any(silent_limit(self.frame_facts, k) for k, _ in hypothesis.changes):
                continue
            if held:
                if report_only:
                    skipped.append((hypothesis.change, f"only={','.join(self.job.only)} keeps {held} as it is"))
                continue
            why = next((w for k, v in hypothesis.changes if (w := frame_limit(self.frame_facts, k, v))), None)
            if why is None and self.script is not None:
                why = next((w for k, v in hypothesis.changes if (w := self.script.why_not(k, v))), None)
            if why:
                skipped.append((hypothesis.change, why))
            else:
                kept.append(hypothesis)
        return kept, skipped

    def _cannot_apply_here(self, hypothesis: Hypothesis, result: dict[str, Any]) -> None:
        """A crash that no incumbent can fix (the device, the install) becomes a limit the ranking honours."""
        from .reasoner.cannot_apply import fixed_reason

        why = fixed_reason(result.get("reason"), result.get("stderr_tail")) if result["state"] == "crash" else None
        if why and len(hypothesis.changes) == 1:
            knob, value = hypothesis.changes[0]
            self.frame_facts.setdefault("limits", []).append(
                {"knob": knob, "value": value, "reason": f"cannot apply here: {why}"})

    def _try(self, trial: int, hypothesis: Hypothesis, incumbent: Incumbent, base: dict[str, Any],
             floor: float) -> Incumbent:
        """One change: screen on one run, then interleave (incumbent, candidate) and keep it only when
        the interval on the ratio clears the noise floor, parity holds and the worst case fits."""
        knobs = hypothesis.apply(incumbent.knobs)
        self.measured.add(key(knobs))
        past = self.memory.replay(incumbent.knobs, knobs)
        if past is not None:
            return self._replay(trial, hypothesis, incumbent, knobs, past, floor)
        results = [self.measure(knobs, trial, f"{hypothesis.change} (1/2)", hypothesis.affects_memory)]
        first = results[0]
        verdict: stats.Comparison | None = None
        parity_result = None

        def finish(decision: str, reason: str, state: str = "complete") -> Incumbent:
            complete = [r for r in results if r["state"] == "complete"]
            record = self._record(trial, hypothesis.change, knobs, state, decision, reason,
                                  [r["measurement"] for r in complete],
                                  wall=sum(r["wall_s"] for r in results), stderr=first.get("stderr_tail"))
            record.update(incumbent_samples_per_s=incumbent.speed, noise_floor=floor, parity=parity_result,
                          ceiling=complete[0]["measurement"].get("ceiling") if complete else None)
            if verdict:
                record.update(ratio=verdict.ratio, interval=[verdict.low, verdict.high], confidence=verdict.confidence)
            return self._conclude(record, hypothesis, incumbent, knobs, [r["measurement"] for r in complete])

        if first["state"] != "complete":
            self._cannot_apply_here(hypothesis, first)
            return finish("discard", first["reason"], first["state"])
        measurement = first["measurement"]
        parity_result = self._parity(base, measurement, incumbent, knobs)
        if not parity_result["ok"]:
            return finish("discard", parity_result["reason"])
        # Interleaved in fresh processes, B A B A: drift of the machine hits both sides alike, and the
        # verdict uses only this trial's incumbent runs (older ones would turn drift into a gain). The
        # screen compares with the incumbent's runs on the candidate's card only; on a card with none yet
        # (trials in parallel), the incumbent's first paired run comes before the screen and is its reference.
        fresh = []
        reference = incumbent.runs_on(measurement.get("placement"))
        if not reference:
            fresh.append(self.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent (1/2)"))
            reference = [r["measurement"]["step_times_s"] for r in fresh if r["state"] == "complete"]
        if reference:
            verdict = self._screen(reference, measurement, floor)
            if self._screened_out(verdict):
                for result in fresh:
                    if result["state"] == "complete":
                        incumbent.add(result["measurement"])  # a reference on this card for the next trials
                return finish("discard", f"not faster after one run: {verdict.reason}")
        if not fresh:
            fresh.append(self.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent (1/2)"))
        results.append(self.measure(knobs, trial, f"{hypothesis.change} (2/2)"))
        fresh.append(self.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent (2/2)"))
        fresh = [r for r in fresh if r["state"] == "complete"]
        for result in fresh:
            incumbent.add(result["measurement"])
        second = results[1]
        if second["state"] != "complete":
            return finish("discard", f"the confirmation run ended {second['state']}: {second['reason']}",
                          second["state"])
        if not fresh:
            return finish("discard", "the incumbent could not be measured again beside the candidate")
        verdict = self._interleaved(fresh, results, floor)
        verdict = self._more_pairs(trial, hypothesis, incumbent, knobs, results, fresh, floor, verdict)
        failed = results[-1]
        if failed["state"] != "complete":
            return finish("discard", f"an extra run ended {failed['state']}: {failed['reason']}", failed["state"])
        if verdict.verdict != "faster":
            return finish("discard", verdict.reason)
        ceiling = measurement.get("ceiling")
        fits = (f"; worst-case batch fits ({ceiling['bytes'] / 2**30:.2f} of {ceiling['limit_bytes'] / 2**30:.2f} GiB)"
                if ceiling else "")
        return finish("keep", f"{verdict.reason}; {parity_result['reason']}{fits}")

    def _more_pairs(self, trial: int, hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
                    results: list[dict[str, Any]], fresh: list[dict[str, Any]], floor: float,
                    verdict: stats.Comparison) -> stats.Comparison:
        """More interleaved (candidate, incumbent) pairs while the pairs so far leave it open and more
        could close it (`_could_close`). A change that looks like noise costs no more runs, and at most
        `extra_pairs`; the sequential rule decides only at its looks, each at its share of the false-keep
        rate, so waiting for a lucky draw cannot turn noise into a gain (`python -m bench.extra_pairs`:
        whole simulated tunes, false keeps and false discards per noise level, both rules)."""
        added = 0
        # With a time budget, extra pairs take at most a quarter of the time left: room for four times
        # the extra runs so far and the next pair (one trial must not spend what the others need).
        while verdict.verdict == "no difference" and added < self.steps.extra_pairs \
                and self._room_for(8 * (added + 1)):
            if not self._could_close(verdict, fresh, results, self.steps.extra_pairs - added):
                break  # even the most pairs allowed would leave the interval inside the floor
            added += 1
            total = 2 + added
            candidate = self.measure(knobs, trial, f"{hypothesis.change} ({total}/{total}, undecided)")
            if candidate["state"] != "complete":
                results.append(candidate)  # the trial ends in its state: an undecided change is not kept
                break
            again = self.measure(incumbent.knobs, trial, f"{hypothesis.change}: incumbent ({total}/{total})")
            if again["state"] != "complete":
                break  # decided on the pairs it has, as when a confirmation's incumbent run fails
            results.append(candidate)
            fresh.append(again)
            incumbent.add(again["measurement"])
            verdict = self._interleaved(fresh, results, floor)
        return verdict

    def _interleaved(self, incumbent_runs: list[dict[str, Any]], candidate_runs: list[dict[str, Any]],
                     floor: float) -> stats.Comparison:
        """The verdict on one trial's interleaved runs (only this trial's incumbent runs: older ones
        would turn the machine's drift into a gain)."""
        if self.steps.keep_rule == "sequential":
            # The look after which the time budget allows no further pair spends the looks left.
            return keep_rule.verdict(self.records, [r["measurement"] for r in incumbent_runs],
                                     [r["measurement"] for r in candidate_runs], 2 + self.steps.extra_pairs,
                                     last=not self._room_for(8 * (len(candidate_runs) - 1)))
        return stats.compare([r["measurement"]["step_times_s"] for r in incumbent_runs],
                             [r["measurement"]["step_times_s"] for r in candidate_runs], self.job.effective_batch,
                             floor)

    def _stop_floor(self, floor: float) -> float:
        """The smallest gain the keep rule can show: a proposal expected to gain less is not tried."""
        if self.steps.keep_rule == "sequential":
            return keep_rule.detectable(self.records, 2 + self.steps.extra_pairs)
        return floor

    def _could_close(self, verdict: stats.Comparison, fresh: list[dict[str, Any]], results: list[dict[str, Any]],
                     left: int) -> bool:
        """Whether `left` more pairs could make the interval clear the floor, were the ratio to hold."""
        if self.steps.keep_rule == "sequential":
            return keep_rule.could_close(self.records, [r["measurement"] for r in fresh],
                                         [r["measurement"] for r in results], left, 2 + self.steps.extra_pairs)
        runs = min(len(results), len(fresh))
        narrowed = math.sqrt(runs / (runs + left))
        return verdict.ratio - (verdict.ratio - verdict.low) * narrowed > 1 + verdict.noise_floor

    def _screen(self, reference: list[list[float]], measurement: dict[str, Any], floor: float) -> stats.Comparison:
        """One candidate run against the incumbent's runs on its card."""
        if self.steps.keep_rule == "sequential":
            return keep_rule.screen(self.records, reference, measurement, self.job.effective_batch)
        return stats.compare(reference, [measurement["step_times_s"]], self.job.effective_batch, floor)

    def _screened_out(self, verdict: stats.Comparison) -> bool:
        """Whether one run already says the candidate is not worth confirming."""
        if self.steps.keep_rule == "sequential":
            return verdict.verdict == "slower"
        return verdict.ratio <= 1 or verdict.verdict == "slower"

    def _room_for(self, runs: int) -> bool:
        """Whether `runs` more measurements fit in the time budget. They build on the incumbent, so a
        typical measurement, not the slowest, is the estimate."""
        if self.budget_spent:
            return False
        if self.job.time_budget_s is None or not self.walls:
            return True
        return time.monotonic() - self.started + runs * median(self.walls[-3:]) <= self.job.time_budget_s

    def _parity(self, base: dict[str, Any], measurement: dict[str, Any], incumbent: Incumbent,
                knobs: Knobs) -> dict[str, Any]:
        """Per-row losses against the baseline's; a change the user allowed to alter what is trained (an
        image resolution cap) is exempt, and once one is kept, later changes are held to its losses."""
        if base.get("parity_losses") is None or measurement.get("parity_losses") is None:
            return {"ok": True, "checked": False, "worst": None, "tolerance": None,
                    "reason": measurement.get("parity_note") or base.get("parity_note")
                    or "parity not checked: the script's per-row losses are out of reach"}
        retrained = [name for name in knobs.diff(incumbent.knobs) if CATALOG[name].changes_training]
        if retrained:
            return {"ok": True, "checked": False, "worst": None, "tolerance": None,
                    "reason": f"parity not required: you allowed {', '.join(retrained)} to change what is "
                              "trained, so its losses differ by design"}
        reference, precision = base, self.job.start.precision
        if any(CATALOG[name].changes_training for name in incumbent.knobs.diff(self.job.start)):
            kept = next(r for r in reversed(self.records) if r["trial"] == incumbent.trial)
            reference, precision = kept["measurements"][-1], incumbent.knobs.precision
        return parity.compare(reference["parity_losses"], measurement["parity_losses"],
                              parity.tolerance(precision, knobs.precision))

    def _replay(self, trial: int, hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
                past: dict[str, Any], floor: float) -> Incumbent:
        """The same change on the same incumbent was measured for this job on this device and software."""
        record = self._record(trial, hypothesis.change, knobs, "replayed", past["decision"],
                              f"replayed from {past['experiment']} ({past['state']}): {past['reason']}",
                              past["measurements"], wall=0.0)
        record.update(ratio=past["ratio"],
                      interval=past["interval"], confidence=past["confidence"], parity=past["parity"],
                      incumbent_samples_per_s=incumbent.speed, noise_floor=floor, replayed_from=past["experiment"],
                      replayed_state=past["state"])
        if past["measurements"]:
            record["ceiling"] = past["measurements"][0].get("ceiling")
        return self._conclude(record, hypothesis, incumbent, knobs, past["measurements"])

    def _conclude(self, record: dict[str, Any], hypothesis: Hypothesis, incumbent: Incumbent, knobs: Knobs,
                  measurements: list[dict[str, Any]]) -> Incumbent:
        """Learn from the trial, append its record, and return the incumbent that follows it."""
        if (record.get("replayed_state") or record["state"]) == "oom":
            self.blocked.setdefault(key(incumbent.knobs), set()).add(hypothesis.change)
        self._learn(record, incumbent.knobs, hypothesis, incumbent.profile)
        self._append(record)
        if record["decision"] != "keep":
            return incumbent
        kept = Incumbent(knobs, [], record["trial"], profile=dict(incumbent.profile))
        for measurement in measurements:
            kept.add(measurement, record.get("placement"))
        return kept

    def _learn(self, record: dict[str, Any], incumbent: Knobs, hypothesis: Hypothesis | None,
               profile: dict[str, Any]) -> None:
        features = self.memory.features(incumbent, profile)
        if hypothesis is not None:
            record["hypothesis"] = hypothesis.to_dict()
        record["beliefs"] = self.memory.learn(record, incumbent, features, hypothesis)

    def _speedup(self) -> float:
        return kept_product(self.records)

    # -- records ----------------------------------------------------------------------------
    def _record(self, trial: int, change: str | None, knobs: Knobs, state: str, decision: str, reason: str,
                measurements: list[dict[str, Any]], wall: float, stderr: str | None = None) -> dict[str, Any]:
        return {
            "run": self.job.run, "trial": trial, "change": change, "knobs": knobs.to_dict(), "state": state,
            "decision": decision, "reason": reason, "measurements": measurements, **summarize(measurements),
            "ratio": None, "incumbent_samples_per_s": None, "noise_floor": None, "parity": None, "ceiling": None,
            "stderr_tail": stderr, "wall_s": round(wall, 3), "hypothesis": None, "beliefs": [], "replayed_from": None,
            **self._placed(),
        }

    def _placed(self) -> dict[str, Any]:
        """Where this record's runs ran (an executor with several GPUs says); nothing for a local run."""
        placement, self.placement = self.placement, None
        return {"placement": placement} if placement else {}

    def _append(self, record: dict[str, Any]) -> None:
        self.folder.append_experiment(record)
        self.records.append(record)
        if self.display:
            self.display.finished(record)

    def _save_state(self, trial: int, incumbent: Incumbent, floor: float, **finished: Any) -> None:
        self.folder.write_state({"run": self.job.run, "run_id": self.memory.run_id, "trials_done": trial,
                                 "incumbent_trial": incumbent.trial, "incumbent_knobs": incumbent.knobs.to_dict(),
                                 "incumbent_samples": incumbent.samples, "noise_floor": floor,
                                 "elapsed_s": round(time.monotonic() - self.started, 1), **finished})
