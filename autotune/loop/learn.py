"""The tuner's memory: what past runs say before a trial, and what each trial teaches after it.

Before: the beliefs rank hypotheses for this job's features; a trial already measured for this job on
this device and software is replayed; a similar past run's best config warm-starts the loop.
After (`plan`, then `commit` once the run folder has the record): the trial goes into experience, its
outcome becomes evidence (`reasoner.observe` proposes the updates, `Beliefs.apply` makes them), and at
the end the run record goes in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..config.job import Job
from ..kb import Store, kb_folder
from ..kb.beliefs import Beliefs
from ..kb.claims import Claim
from ..kb.experience import Experience, Identity, new_run_id
from ..kb.features import Features, FeatureView, context, device_fingerprint, job_features, job_fingerprint, software
from ..config.types import JsonObject
from .limits import Frame, device_of
from ..config.knobs import CATALOG, Knobs
from ..config.records import (UNSPLIT_SOURCES, RecordLike, Source, SpreadPrior, TrialRecord, change_text,
                              parse_change, typed)
from ..reasoner import Hypothesis, Observation, key, observe, outcome_of
from ..reasoner.combine import together

# A run has reached its best when its speedup is within this share of the final one.
BEST_SHARE = 0.95
# Degrees of freedom a spread learnt on this device before may add to a tune's own (loop/keep_rule.py).
PRIOR_DF = 4


def trials_to_best(stored: Sequence[RecordLike], share: float = BEST_SHARE) -> int:
    """The first trial after which the product of kept ratios is within `share` of the run's final
    product (0 when nothing was kept): how many trials the run needed to find its best. `stored`: the
    loop's records, or a run folder's as read back."""
    records = typed(stored)
    final, product, reached = 1.0, 1.0, []
    for record in records:
        if record.decision == "keep":
            final *= record.ratio or 0.0
    for record in records:
        if record.decision == "keep":
            product *= record.ratio or 0.0
        reached.append((record.trial, product))
    if final <= 1.0:
        return 0
    first: int = next(trial for trial, value in reached if value >= share * final)
    return first


def _slim(event: Mapping[str, Any]) -> JsonObject:
    """A belief event as a run-folder record lists it."""
    return {"op": event["op"], "claim": event["claim"], "children": event["children"], "reason": event["reason"]}


@dataclass
class Lesson:
    """One trial's entry in the knowledge base, planned: the trial row and the belief updates."""

    record: JsonObject
    incumbent: Knobs
    features: FeatureView
    hypothesis: JsonObject | None
    updates: list[Any] = field(default_factory=list)
    events: list[JsonObject] = field(default_factory=list)


# Who proposes combined changes for how their effects combine (not because one part lets another fit).
INTERACTION_SOURCES = (Source.POOLED, Source.MODEL)


def kept_only_together(trials: Sequence[RecordLike], knob: str, value: Any) -> bool:
    """Whether a past run (its trial records) kept `knob=value` only together with another change
    (`interaction_only`)."""
    return (knob, str(value)) in interaction_only(trials)


def interaction_only(trials: Sequence[RecordLike]) -> set[tuple[str, str]]:
    """The single changes a past run (its trial records) measured alone, complete, and discarded, and kept
    only inside combinations its model of all trials or its pooling proposed whose other parts it had
    also measured alone: their gain there hung on the other knobs of that job (cpu-long-tail's fused
    AdamW and sdpa, x0.95 and x0.83 alone, x1.15 together), so another job need not share it.
    A change kept with one that never ran alone (checkpointing with a micro-batch that did not fit, or
    one never tried) is not among them: without it the rest may not fit. Values as records write them."""
    records = [r for r in typed(trials) if r.outcome == "complete"]
    alone: dict[tuple[str, str], set[str]] = {}
    for r in records:
        if len(r.changes) == 1:
            alone.setdefault(r.changes[0], set()).add(r.decision)
    kept_with_others = [r for r in records if r.decision == "keep" and r.combined]
    found: set[tuple[str, str]] = set()
    for change, decisions in alone.items():
        keeps = [r for r in kept_with_others if change in r.changes]
        if "discard" in decisions and "keep" not in decisions and keeps and all(
                r.source in INTERACTION_SOURCES and set(r.changes) <= alone.keys() for r in keeps):
            found.add(change)
    return found


class Memory:
    def __init__(self, job: Job, fresh: bool = False) -> None:
        self.job, self.fresh = job, fresh
        self.store = Store(kb_folder(job.kb))
        self.beliefs = Beliefs(self.store)
        self.experience = Experience(self.store)
        self.run_id = new_run_id(job.run)
        self.frame: Frame = {}
        self.identity = Identity("", "", {})  # known once the frame says which device and software
        self.base_features: Features = {}

    def start(self, frame: Frame) -> None:
        self.frame = frame
        self.base_features = job_features(self.job, frame)
        self.identity = Identity(job_fingerprint(self.job), device_fingerprint(frame), software(frame))

    @property
    def claims(self) -> list[Claim]:
        return self.beliefs.claims()

    def features(self, knobs: Knobs, profile: JsonObject | None) -> Features:
        """What claims condition on with `knobs` as the config improved (`profile`: its latest ceiling and
        time breakdown)."""
        return context(self.job, self.frame, knobs, profile)

    # -- before a trial -------------------------------------------------------------------------
    def replay(self, incumbent: Knobs, knobs: Knobs) -> TrialRecord | None:
        """The knowledge base's trial of `knobs` on `incumbent` for this job, device and software (its
        `experiment` names it), unless the user said `fresh`."""
        if self.fresh:
            return None
        past = self.experience.replay(self.identity, incumbent, knobs)
        return None if past is None else TrialRecord.from_dict(past)

    def warm_start(self, incumbent: Knobs, measured: set[tuple[Any, ...]]) -> Hypothesis | None:
        """The best config of the nearest similar past run, as one combined change, if it differs."""
        # The same job on the same device is replayed trial by trial, not warm-started (unless `fresh`).
        same = None if self.fresh else self.identity.job_fingerprint
        kind = self.base_features.get("device_kind")
        past = self.experience.similar_run(self.base_features, kind if isinstance(kind, str) else None, exclude_job=same)
        if past is None:
            return None
        best = Knobs.from_dict(past["best"]["knobs"])
        device, batch = device_of(self.frame), self.job.effective_batch
        fitting = [(k, v) for k, (_, v) in incumbent.diff(best).items()
                   if not (CATALOG[k].climb == "divisors" and batch % v)]
        # One read of the past run's trials, and only where its best differs from this incumbent.
        skip = interaction_only(self.experience.trials(past["run_id"])) if fitting else set()
        pending = [(k, v) for k, v in fitting if (k, str(v)) not in skip]
        left_out = change_text(tuple((k, v) for k, v in fitting if (k, str(v)) in skip))
        # Flash attention needs bf16 first; group_by_length needs padding=longest in the config it lands in.
        changes = together(incumbent, pending, device, batch)
        current = incumbent
        for knob, value in changes:
            current = current.with_change(knob, value)
        if not changes or key(current) in measured:
            return None
        first, *rest = changes
        gain = past["best"].get("speedup", 1.0)
        why = f"; left out {left_out}: that run kept it only together with other changes" if left_out else ""
        return Hypothesis(first[0], first[1], f"warm start: the best config of run {past['run']} "
                          f"({past['run_id']}, x{gain:.2f} over its baseline), a similar job on this kind of device{why}",
                          p_helps=0.9, expected_ratio=gain, also=tuple(rest), claims=(), source=Source.WARM_START)

    def spread_prior(self) -> SpreadPrior | None:
        """The run-to-run spread of past runs on this device (every group of runs of one config the
        knowledge base holds from other tunes), as PRIOR_DF degrees of freedom at most: enough for a
        first run to decide a large gain, too few to outweigh this tune's own runs if they differ."""
        from ..probes.sequential import pooled

        device = self.identity.device_fingerprint
        if self.fresh or not device:
            return None
        groups = [[m["samples_per_s"] for m in t.get("measurements") or () if m.get("samples_per_s")]
                  for t in self.experience.trials() if t.get("device_fingerprint") == device
                  and t.get("run_id") != self.run_id and not t.get("replayed_from")]
        groups = [g for g in groups if len(g) > 1]
        if not groups:
            return None
        spread = pooled(groups)
        return SpreadPrior(spread.sd, min(spread.df, PRIOR_DF), sum(len(g) for g in groups))

    # -- after a trial --------------------------------------------------------------------------
    def plan(self, record: JsonObject, incumbent: Knobs, features: FeatureView,
             hypothesis: Hypothesis | None) -> "Lesson":
        """What the trial teaches, written nowhere yet: the journal puts its belief events in the run
        folder's record first, then `commit` writes the knowledge base's copy (`Tuner._journal`)."""
        lesson = Lesson(record, incumbent, features, hypothesis.to_dict() if hypothesis else None)
        outcome, typed = outcome_of(record), TrialRecord.from_dict(record)
        # A combined warm start or pooled change says nothing about which of its parts did what.
        combined = hypothesis is not None and hypothesis.source in UNSPLIT_SOURCES and bool(hypothesis.also)
        if hypothesis is None or outcome is None or typed.ratio is None or combined:
            return lesson  # (an outcome is read only from a ratio)
        experiment = str(typed.get("replayed_from") or f"{self.run_id}#{typed.trial}")
        # Read the beliefs again: another tuner sharing this folder may have changed them since.
        self.beliefs = Beliefs(self.store)
        observation = Observation(experiment=experiment,
                                  changes=tuple((k, getattr(incumbent, k), v) for k, v in hypothesis.changes),
                                  features=features, ratio=typed.ratio, outcome=outcome,
                                  claims=hypothesis.claims, run=self.run_id)
        lesson.updates = list(observe(self.beliefs.claims(active_only=False), observation))
        _, events = self.beliefs.plan(lesson.updates, run=self.run_id)
        lesson.events = [_slim(e) for e in events]
        return lesson

    def commit(self, lesson: "Lesson") -> None:
        """The trial into experience, then its evidence into the beliefs (what `plan` said they take)."""
        self.experience.record_trial(self.run_id, self.identity, lesson.features, lesson.incumbent, lesson.record,
                                     lesson.hypothesis)
        if lesson.updates:
            self.beliefs.apply(lesson.updates, run=self.run_id)

    def sync(self, record: Mapping[str, Any], incumbent: Knobs, profile: JsonObject) -> None:
        """The knowledge base's copy of a run-folder record, written now if a kill came between the two
        writes (the folder's is first), and its evidence applied if the beliefs never took it."""
        held = [t for t in self.experience.trials(self.run_id) if t["trial"] == record["trial"]]
        if not held:
            self.experience.record_trial(self.run_id, self.identity, self.features(incumbent, profile), incumbent,
                                         record, record.get("hypothesis"))
            held = [t for t in self.experience.trials(self.run_id) if t["trial"] == record["trial"]]
        self.relearn(held[-1])

    def relearn(self, trial: Mapping[str, Any]) -> list[JsonObject]:
        """Apply the evidence of a trial the knowledge base holds (`trials` record) if the beliefs never
        got it: the tuner was killed between writing the trial and applying what it says. Nothing when
        any history event already carries its evidence, so a second resume applies nothing again."""
        hypothesis, outcome = trial.get("hypothesis"), outcome_of(trial)
        if not hypothesis or outcome is None or (trial["state"] == "replayed" and not trial.get("replayed_from")):
            return []  # nothing to learn, or a replay recorded before replays named their source
        names = [knob for knob, _ in parse_change(hypothesis.get("change"))] or [""]
        if len(names) > 1 and hypothesis.get("source") in UNSPLIT_SOURCES:
            return []  # as in `learn`: a combined change says nothing about its parts
        experiment = trial.get("replayed_from") or trial["experiment"]
        self.beliefs = Beliefs(self.store)
        if any((event.get("evidence") or {}).get("experiment") == experiment for event in self.beliefs.history()):
            return []
        mine, incumbent = trial["knobs"], trial["incumbent_knobs"]
        if not all(name in mine and name in incumbent for name in names):
            return []  # a record this version cannot read as a change of knobs
        observation = Observation(experiment=experiment, changes=tuple((k, incumbent[k], mine[k]) for k in names),
                                  features=trial.get("features") or {}, ratio=trial["ratio"], outcome=outcome,
                                  claims=tuple(hypothesis.get("claims") or ()), run=self.run_id)
        return self._apply(observation)

    def _apply(self, observation: Observation) -> list[JsonObject]:
        events = self.beliefs.apply(observe(self.beliefs.claims(active_only=False), observation), run=self.run_id)
        return [_slim(e) for e in events]

    def adopt(self, claims: list[Claim], why: str) -> list[JsonObject]:
        """New claims someone proposed (the LLM): written with the confidence they were given."""
        from ..kb.claims import Update

        self.beliefs = Beliefs(self.store)
        events = self.beliefs.apply([Update("create", c.id, why, children=(c,), run=self.run_id) for c in claims],
                                    run=self.run_id)
        return [_slim(e) for e in events]

    def finish(self, records: Sequence[TrialRecord], best_knobs: Knobs, best_trial: int, speedup: float,
               baseline_speed: float, stop_reason: str) -> None:
        outcome = {
            "baseline": {"knobs": self.job.start.to_dict(), "samples_per_s": baseline_speed},
            "best": {"knobs": best_knobs.to_dict(), "trial": best_trial, "speedup": speedup},
            "trials": [{"trial": r.trial, "change": r.change, "state": r.state, "decision": r.decision,
                        "ratio": r.ratio} for r in records],
            "trials_to_best": trials_to_best(records), "stop_reason": stop_reason,
        }
        self.experience.record_run(self.run_id, self.identity, self.job.to_dict(), self.base_features,
                                   self.frame, outcome)
