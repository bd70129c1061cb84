"""Experience: one record per run and one per trial, looked up by job and device; replay and warm start.

- A trial whose knobs were already measured on top of the same incumbent, for the same job (same
  model, data, lengths, batch, method, weights and seed) on the same device fingerprint and software
  versions, is replayed from its record instead of measured again, unless the user says `fresh`.
- A past run of a similar job (same model family on the same device kind, nearest by job features,
  within WARM_DISTANCE) warm-starts a new run: its best config, as one combined change, is the first
  thing tried.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, cast

from ..config.knobs import Knobs
from ..config.types import JsonObject
from .features import FeatureView, distance
from .rows import KbMeasurement, RunRow, TrialRow
from .store import Store

# How unlike a past job may be and still warm-start this one (kb.features.distance: 1 per differing
# categorical feature, log gaps on numeric ones): three features' worth. Further, its best config
# answered another kind of job (a padding change for padded rows where this job's rows are one
# length): tried first, it cost more device runs than the cold search it displaced
# (`python -m bench.search`, autotune warm on the short-uniform table).
WARM_DISTANCE = 3.0

# Fields of a measurement worth keeping in the knowledge base (the run folder keeps everything).
_KEPT = ("samples_per_s", "tokens_per_s", "step_times_s", "median_step_s", "mfu", "hfu", "peak_memory",
         "ceiling", "breakdown", "real_tokens_per_step", "model_flops", "hardware_flops", "device",
         "parity_losses", "model", "data", "placement")


@dataclass(frozen=True)
class Identity:
    """Which job a run's trials belong to, on which device and software: what a replay must match
    (features.job_fingerprint, features.device_fingerprint, features.software)."""

    job_fingerprint: str
    device_fingerprint: str
    software: Mapping[str, str]

    def to_dict(self) -> JsonObject:
        """As trial and run records hold it, beside their own fields."""
        return {"job_fingerprint": self.job_fingerprint, "device_fingerprint": self.device_fingerprint,
                "software": dict(self.software)}


def new_run_id(run: str) -> str:
    return f"{run}@{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _slim(measurement: Mapping[str, Any]) -> KbMeasurement:
    return cast(KbMeasurement, {k: measurement[k] for k in _KEPT if k in measurement})


class Experience:
    """Runs and trials of one knowledge-base folder."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- writing ----------------------------------------------------------------------------
    def record_trial(self, run_id: str, identity: Identity, features: FeatureView,
                     incumbent: Knobs, record: Mapping[str, Any], hypothesis: Mapping[str, Any] | None = None) -> int:
        """One trial (the baseline is trial 0); `identity` holds job and device fingerprints and software."""
        trial: TrialRow = {
            "schema_version": 1, "run_id": run_id, "run": record["run"], "trial": record["trial"],
            "experiment": f"{run_id}#{record['trial']}", "job_fingerprint": identity.job_fingerprint,
            "device_fingerprint": identity.device_fingerprint, "software": dict(identity.software), "features": dict(features),
            "incumbent_knobs": incumbent.to_dict(), "knobs": record["knobs"], "change": record["change"],
            "state": record["state"], "decision": record["decision"], "reason": record["reason"],
            "ratio": record.get("ratio"), "interval": record.get("interval"),
            "confidence": record.get("confidence"), "samples_per_s": record.get("samples_per_s"),
            "incumbent_samples_per_s": record.get("incumbent_samples_per_s"),
            "noise_floor": record.get("noise_floor"), "parity": record.get("parity"),
            "measurements": [_slim(m) for m in record.get("measurements", [])],
            "hypothesis": None if hypothesis is None else dict(hypothesis),
            "wall_s": record.get("wall_s"), "replayed_from": record.get("replayed_from"),
        }
        return self.store.append("trials", trial)

    def record_run(self, run_id: str, identity: Identity, job: Mapping[str, Any], features: FeatureView,
                   frame: Mapping[str, Any], outcome: Mapping[str, Any]) -> int:
        return self.store.append("runs", {"schema_version": 1, "run_id": run_id, "run": job["run"], **identity.to_dict(),
                                          "job": job, "features": features, "frame": frame, **outcome,
                                          "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})

    # -- reading ----------------------------------------------------------------------------
    # The store checked each record against its table's schema on the way in and out, and this module
    # wrote them all: the casts say which shape (rows.py), they convert nothing.
    def runs(self, job_fingerprint: str | None = None, device_fingerprint: str | None = None) -> list[RunRow]:
        equals = {k: v for k, v in (("job_fingerprint", job_fingerprint),
                                    ("device_fingerprint", device_fingerprint)) if v}
        return cast("list[RunRow]", self.store.search("runs", **equals) if equals else self.store.all("runs"))

    def trials(self, run_id: str | None = None) -> list[TrialRow]:
        return cast("list[TrialRow]", self.store.search("trials", run_id=run_id) if run_id else self.store.all("trials"))

    def replay(self, identity: Identity, incumbent: Knobs, knobs: Knobs) -> TrialRow | None:
        """The latest trial of the same spec on the same device and software, if one ended in a
        state that says something (a timeout from a spent budget does not)."""
        found = [t for t in cast("list[TrialRow]", self.store.search(
                     "trials", job_fingerprint=identity.job_fingerprint, device_fingerprint=identity.device_fingerprint))
                 if t.get("software") == identity.software and t["knobs"] == knobs.to_dict()
                 and t["incumbent_knobs"] == incumbent.to_dict() and t["state"] in ("complete", "oom", "crash", "invalid")
                 and (t["trial"] == 0 or t["decision"] != "baseline")]
        return found[-1] if found else None

    def similar_run(self, features: FeatureView, device_kind: str | None,
                    exclude_job: str | None = None) -> RunRow | None:
        """The nearest past run of the same model family on the same kind of device whose best
        config beat its baseline, within WARM_DISTANCE of this job's features."""
        candidates = [r for r in self.runs()
                      if r.get("features", {}).get("model_family") == features.get("model_family")
                      and r.get("features", {}).get("device_kind") == device_kind
                      and r.get("best", {}).get("trial", 0) > 0 and r.get("job_fingerprint") != exclude_job]
        if not candidates:
            return None
        # Nearest first; among equals, the latest run.
        ranked = sorted(enumerate(candidates), key=lambda item: (distance(features, item[1]["features"]), -item[0]))
        nearest = ranked[0][1]
        return nearest if distance(features, nearest["features"]) <= WARM_DISTANCE else None
