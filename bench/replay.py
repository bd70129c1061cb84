"""A recorded table, and an executor that answers trials from it as the runner would have.

Every strategy of the search benchmark sees the same thing for a config: the table's measurement,
scaled by one run-to-run factor drawn from the A/A noise the recorder measured (seeded, so each seed
is one possible night on that machine). autotune's tuner runs unchanged on top of `ReplayExecutor`:
its screens, interleaved confirmations, parity checks and memory checks read the recorded step
times, per-row losses and worst-case peaks.
"""

from __future__ import annotations

import copy
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

from autotune.config.knobs import CATALOG, Knobs
from autotune.reasoner import key

# The recorded tables every benchmark reads (bench/record.py writes them).
TABLES = Path(__file__).parent / "tables"
# A pick this share of a table's best speed or more is "within 5% of the best": what is scored.
SHARE_OF_BEST = 0.95


class Table:
    def __init__(self, data: dict[str, Any], name: str = "") -> None:
        # A knob added to the catalog after the table was recorded has no measurement in it: the frame
        # limits it (silently), so a search replayed here never proposes it.
        recorded = set(data["baseline"]["knobs"])
        absent = [{"knob": name, "reason": "not in this recorded table", "silent": True}
                  for name in CATALOG if name not in recorded]
        if absent:
            data = {**data, "frame": {**data["frame"], "limits": list(data["frame"].get("limits") or []) + absent}}
        self.data = data
        self.name = name or data["workload"]
        self.start = Knobs.from_dict(data["baseline"]["knobs"])
        self.grid: dict[str, list] = data["grid"]
        self._configs = [Knobs.from_dict(e["knobs"]) for e in data["configs"]]
        self.entries = {key(k): e for k, e in zip(self._configs, data["configs"])}
        runs = [m["samples_per_s"] for m in data["baseline"]["measurements"]]
        self.baseline_speed = statistics.median(runs)
        # Run-to-run spread of back-to-back runs of one config (the recorder's A/A runs): what an
        # interleaved comparison sees. Without them, every config measured more than once, pooled;
        # that includes the slow drift between runs far apart, which interleaving cancels.
        aa = data.get("aa_samples_per_s") or []
        repeated = [aa] if len(aa) >= 3 else [runs] + [e["runs_samples_per_s"] for e in data["configs"]
                                                       if len(e.get("runs_samples_per_s") or ()) > 1]
        spreads = [statistics.stdev(r) / statistics.mean(r) for r in repeated if len(r) > 1]
        self.noise_cv = math.sqrt(statistics.mean(s * s for s in spreads)) if spreads else 0.02
        self.best_speed = max(e["measurement"]["samples_per_s"] for e in data["configs"] if e["state"] == "complete")

    @classmethod
    def load(cls, path: Path) -> "Table":
        return cls(json.loads(Path(path).read_text()), Path(path).stem)

    def with_noise(self, cv: float | None) -> "Table":
        """The same measurements replayed with another run-to-run spread (None: the recorded one).
        A quiet GPU shows about 0.5%; a quiet CPU, and a lent H200 (docs/development/gpu-checks.md), 2%:
        the search's decisions should hold at each."""
        table = copy.copy(self)
        if cv is not None:
            table.noise_cv = cv
        return table

    @property
    def configs(self) -> list[Knobs]:
        """Every config recorded, in grid order (a new list: callers may shuffle it)."""
        return list(self._configs)

    def entry(self, knobs: Knobs) -> dict[str, Any] | None:
        return self.entries.get(key(knobs))

    def speed(self, knobs: Knobs) -> float | None:
        """The recorded samples/s (None when the config did not complete or is not in the table)."""
        entry = self.entry(knobs)
        if entry is None or entry["state"] != "complete":
            return None
        return entry["measurement"]["samples_per_s"]

    def wall(self, knobs: Knobs) -> float:
        """A run's recorded wall time, start-up included (what a device run costs; 0 outside the table)."""
        entry = self.entry(knobs)
        if entry is None:
            return 0.0
        return float(entry.get("wall_s") or 0.0)

    def ratio(self, knobs: Knobs) -> float:
        return (self.speed(knobs) or 0.0) / self.baseline_speed

    def observe(self, knobs: Knobs, rng: random.Random) -> float | None:
        """One noisy run's samples/s, as a strategy that measured the config would see it."""
        speed = self.speed(knobs)
        return None if speed is None else speed / self.factor(rng)

    def factor(self, rng: random.Random) -> float:
        """A run's slowdown factor: the same kind of run-to-run noise the recorder measured."""
        return max(0.5, rng.gauss(1.0, self.noise_cv))


class ReplayExecutor:
    """The executor protocol (`run(spec, trial_dir, timeout_s)`), answered from a table."""

    def __init__(self, table: Table, seed: int, strict: bool = True) -> None:
        self.table = table
        self.rng = random.Random(seed)
        self.runs_by_trial: dict[int, int] = {}
        self.seconds_by_trial: dict[int, float] = {}  # recorded wall times of those runs
        # Configs asked for that a whole table does not hold: no rule allows them (the recorder measured
        # every config the rules allow). Strict raises; otherwise each is answered as a crash and counted.
        self.strict = strict
        self.outside: list[dict[str, Any]] = []

    def run(self, spec: dict[str, Any], trial_dir: Path, timeout_s: float) -> dict[str, Any]:
        if spec["kind"] == "frame":
            return {"state": "complete", "reason": "", "frame": self.table.data["frame"], "wall_s": 0.0}
        # The tuner names a run's folder NNN-MMM after its trial: device runs are counted per trial.
        trial = int(trial_dir.name[:3]) if trial_dir.name[:3].isdigit() else 0
        self.runs_by_trial[trial] = self.runs_by_trial.get(trial, 0) + 1
        knobs = Knobs.from_dict(spec["knobs"])
        entry = self.table.entry(knobs)
        result = self._answer(knobs, entry, spec)
        # As the peers count them: the recorded wall time, without this run's noise.
        self.seconds_by_trial[trial] = self.seconds_by_trial.get(trial, 0.0) + self.table.wall(knobs)
        return result

    def _answer(self, knobs: Knobs, entry: dict[str, Any] | None, spec: dict[str, Any]) -> dict[str, Any]:
        if entry is None:
            if self.table.data.get("complete", True):
                # The strategies are told the grid; outside a whole table is a config no rule allows.
                if self.strict:
                    raise KeyError(f"{self.table.name}: config not in the table: {knobs.to_dict()}")
                self.outside.append(knobs.to_dict())
                return {"state": "crash", "reason": "outside the table's grid: a config no rule allows",
                        "wall_s": 0.0}
            return {"state": "crash", "reason": "not recorded: the table is partial (its budget ran out)",
                    "wall_s": 0.0}
        if entry["state"] != "complete":
            return {"state": entry["state"], "reason": entry["reason"], "wall_s": entry["wall_s"]}
        factor = self.table.factor(self.rng)
        recorded = entry["measurement"]
        measurement = {**recorded, "step_times_s": [t * factor for t in recorded["step_times_s"]],
                       "samples_per_s": recorded["samples_per_s"] / factor,
                       "tokens_per_s": recorded["tokens_per_s"] / factor}
        if not spec.get("ceiling"):
            measurement.pop("ceiling", None)
        return {"state": "complete", "reason": "", "measurement": measurement, "wall_s": entry["wall_s"] * factor}
