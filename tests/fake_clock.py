"""A fake clock over the real executor: every config runs for real once, its times come from a table.

Whole tunes in the tests must not hang on how fast the machine is today. `FakeClock` wraps the
executor a tune would use (the real runner in a child process): the first run of each config runs for
real (and again where a run with the worst-case batch is asked after one without), so its edits are verified, its per-row losses and memory are
the real ones and its failures are real states. The step times the loop judges are replaced by a
seeded function of the knobs: the baseline's speed times each changed knob's factor, with 1% noise. A
later run of a config already run answers the first run's result with fresh times (the same rows give
the same losses), so the interleaved pairs a comparison asks for cost nothing. The frame and the
hand-over (`trl sft` on both files) run for real, every time.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import zlib
from pathlib import Path
from typing import Any

# A step's share of the run's time, the same for every run (the same rows in the same order).
WORKLOAD = (0.9, 1.1, 1.0, 0.95, 1.05, 1.0)
SCALED = ("samples_per_s", "tokens_per_s", "mfu", "hfu")


class FakeClock:
    """`run(spec, trial_dir, timeout_s)` of `inner`, timed by `factors`: {(knob, value): speed factor};
    a knob whose value is absent counts 1.0. `default` is every other change's factor (1.0: a change
    the loop cannot tell from the noise). `real_runs` lists the (kind, trial dir) of the runs that
    ran for real, `replayed` how many were answered from an earlier one."""

    def __init__(self, inner: Any, factors: dict[tuple[str, Any], float], default: float = 1.0,
                 noise: float = 0.01) -> None:
        self.inner, self.factors, self.default, self.noise = inner, factors, default, noise
        self.start: dict[str, Any] | None = None
        self.done: dict[str, tuple[dict[str, Any], Path]] = {}
        self.real_runs: list[tuple[str, str]] = []
        self.replayed = 0
        self.real_s = 0.0      # seconds the real runs took
        self.count = 0

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def speed(self, knobs: dict[str, Any]) -> float:
        """Samples per second of `knobs` on this clock: 10 for the start, times each change's factor."""
        start = self.start or knobs
        speed = 10.0
        for name, value in knobs.items():
            if start.get(name) != value:
                speed *= self.factors.get((name, value), self.default)
        return speed

    def run(self, spec: dict[str, Any], trial_dir: Path, timeout_s: float) -> dict[str, Any]:
        if spec["kind"] != "trial":    # the frame and the hand-over: real, every time
            result = self.inner.run(spec, trial_dir, timeout_s)
            self.real_runs.append((spec["kind"], trial_dir.name))
            self.real_s += result.get("wall_s") or 0.0
            return result
        if self.start is None:         # the first trial run is the baseline's
            self.start = dict(spec["knobs"])
        name = json.dumps([spec["knobs"], spec.get("inject_fault")], sort_keys=True)
        # A run with the worst-case batch (ceiling) answers a later run without one, not the other way.
        earlier = self.done.get(name)
        if earlier is not None and (earlier[0].get("measurement") or {}).get("ceiling") is None and spec.get("ceiling"):
            earlier = None
        if earlier is not None:
            first, folder = earlier
            trial_dir.mkdir(parents=True, exist_ok=True)
            for path in folder.iterdir():
                if path.is_file():
                    shutil.copy(path, trial_dir / path.name)
            result = copy.deepcopy(first)
            if not spec.get("ceiling") and result.get("measurement"):
                result["measurement"].pop("ceiling", None)
            self.replayed += 1
        else:
            result = self.inner.run(spec, trial_dir, timeout_s)
            self.real_runs.append(("trial", trial_dir.name))
            self.real_s += result.get("wall_s") or 0.0
            if name not in self.done or spec.get("ceiling"):
                self.done[name] = (copy.deepcopy(result), trial_dir)
        self.count += 1
        if result.get("state") == "complete" and result.get("measurement"):
            self._retime(result["measurement"], spec["knobs"], f"{name}:{self.count}")
        return result

    def _retime(self, measurement: dict[str, Any], knobs: dict[str, Any], seed: str) -> None:
        rows = measurement["samples_per_s"] * sum(measurement["step_times_s"]) / len(measurement["step_times_s"])
        noise = random.Random(zlib.crc32(seed.encode()))
        speed = self.speed(knobs)
        times = [w * rows / speed * (1 + noise.gauss(0, self.noise)) for w in WORKLOAD]
        factor = rows * len(times) / sum(times) / measurement["samples_per_s"]
        for key in SCALED:
            if isinstance(measurement.get(key), (int, float)):
                measurement[key] = measurement[key] * factor
        # MFU stays a share of the peak whatever the table says.
        for key in ("mfu", "hfu"):
            if isinstance(measurement.get(key), float):
                measurement[key] = min(measurement[key], 0.99)
        measurement["step_times_s"] = times
        if isinstance(measurement.get("median_step_s"), (int, float)):
            measurement["median_step_s"] = sorted(times)[len(times) // 2]


def install(monkeypatch: Any, factors: dict[tuple[str, Any], float] | None = None, default: float = 0.9) -> FakeClock:
    """`autotune tune` and `autotune.tune()` in this process (host=local) get the real executor behind a
    fake clock: for tests whose subject is not the machine's speed (files, states, records), so each
    config runs once, not once per comparison, and no decision waits on how busy the machine is."""
    import autotune.executors as executors
    from autotune.executors import LocalExecutor

    clock = FakeClock(LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}), factors or {}, default=default)
    monkeypatch.setattr(executors, "get_executor", lambda *args, **keys: clock)
    return clock
