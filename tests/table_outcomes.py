"""A table of outcomes for whole tunes, the same wherever it runs: in the test process (serial), behind
fake slots (parallel without Ray), or inside Ray actors on cluster nodes (pickled by value, so this
module imports nothing from the tests).

Speed is the baseline's times each changed knob's factor; the step-time noise of a run is seeded by
its trial number, its knobs and how many runs of those knobs this trial had before, so a trial
measures the same numbers whichever slot runs it, as long as its runs stay on one slot.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import zlib
from pathlib import Path
from typing import Any

DEVICE = {"kind": "cpu", "cpu_count": 4, "bf16": False, "compile": False, "fused_adamw": True,
          "memory_bytes": 8 * 2**30, "name": "test cpu", "matmul_tflops": {"fp32": 0.1},
          "peaks": {"fingerprint": "test cpu", "matmul_flops": {"fp32": 1e11}, "copy_bytes_per_s": 1e10}}
FRAME = {"device": DEVICE, "model": {"params": 1, "trainable_params": 1, "layers": 2, "hidden": 8, "vocab": 16,
                                     "model_type": "qwen2", "source": "preset tiny-qwen2"},
         "data": {"rows_sampled": 10, "p10_len": 5, "p50_len": 9, "p90_len": 30, "max_seen_len": 64,
                  "padding_share": 0.7, "truncated_share": 0.0, "dataset": "synthetic"}}
WORKLOAD = [0.6, 1.4, 0.9, 1.1, 0.8, 1.2]
LOSSES = {"step1": [2.0, 2.1, 2.2, 2.3], "step2": [1.9, 2.0, 2.1, 2.2]}
# Knob changes by their effect on speed: two real gains, the rest noise-level or slower.
FACTORS = {("padding", "padding_free"): 1.8, ("per_device_train_batch_size", 2): 1.3,
           ("dataloader_num_workers", 2): 0.9, ("attn_implementation", "sdpa"): 0.97}
DOOMED = "AUTOTUNE_TEST_DOOMED"  # set in the environment of a node that the crash test kills


class Table:
    def __init__(self, start: dict[str, Any], sleep_s: float = 0.0, marker: str = "", card_speed: float = 1.0) -> None:
        # card_speed: this device against the others (two cards of one model differ by several percent).
        self.start, self.sleep_s, self.marker, self.card_speed = start, sleep_s, marker, card_speed
        self.seen: dict[str, int] = {}

    def run(self, spec: dict[str, Any], trial_dir: Path, timeout_s: float) -> dict[str, Any]:
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / "stdout.txt").write_text(f"table run of {trial_dir.name}\n")
        if spec["kind"] == "frame":
            return {"state": "complete", "reason": "", "frame": FRAME, "wall_s": 0.01}
        trial = trial_dir.name.split("-")[0]
        if self.marker and os.environ.get(DOOMED) and trial != "000":
            # On the node the test kills: say so, then hold the slot until the node is gone.
            Path(self.marker).write_text(trial_dir.name)
            time.sleep(120)
        began = time.monotonic()
        time.sleep(self.sleep_s)
        knobs = spec["knobs"]
        changed = {(k, v) for k, v in knobs.items() if self.start[k] != v}
        speed = 10.0 * self.card_speed
        for change in changed:
            speed *= FACTORS.get(change, 1.0)
        name = f"{trial}:{json.dumps(knobs, sort_keys=True)}:{spec['ceiling']}"
        self.seen[name] = self.seen.get(name, 0) + 1
        noise = random.Random(zlib.crc32(f"{name}:{self.seen[name]}".encode()))
        times = [w * 4 / speed * (1 + noise.gauss(0, 0.01)) for w in WORKLOAD]
        speed = 4 * len(times) / sum(times)
        measurement = {"device": "cpu", "samples_per_s": speed, "tokens_per_s": speed * 100, "step_times_s": times,
                       "peak_memory": {"kind": "cpu_peak_rss", "bytes": 2**30}, "parity_losses": LOSSES}
        if spec["ceiling"]:
            measurement["ceiling"] = {"fits": True, "kind": "cpu_peak_rss", "bytes": 2**30, "limit_bytes": 6 * 2**30}
        return {"state": "complete", "reason": "", "measurement": measurement,
                "wall_s": round(time.monotonic() - began, 3)}


class TableSlot:
    """One fake GPU: its own table, one run at a time (as a Ray actor serialises its calls)."""

    def __init__(self, start: dict[str, Any], number: int, sleep_s: float, card_speed: float = 1.0) -> None:
        self.table, self.lock = Table(start, sleep_s, card_speed=card_speed), threading.Lock()
        self.where = {"ip": "10.0.0.1", "host": "fake", "gpu": str(number), "node": f"node{number}"}
        self.alive = True

    def run(self, spec: dict[str, Any], trial_dir: Path, timeout_s: float) -> dict[str, Any]:
        with self.lock:
            result = self.table.run(spec, trial_dir, timeout_s)
            (trial_dir / "slot.txt").write_text(self.where["gpu"])
        return {**result, "placement": {"node": self.where["ip"], "gpu": self.where["gpu"], "model": "FAKE"}}


class TableSlots:
    """An executor with several fake GPUs: the parallel loop without a cluster."""

    def __init__(self, start: dict[str, Any], count: int, sleep_s: float = 0.0,
                 card_speeds: tuple[float, ...] = (), sleeps_s: tuple[float, ...] = ()) -> None:
        speeds = card_speeds or (1.0,) * count
        # A slot's own wall time per run (sleeps_s) decides which slot frees first, where a test needs a
        # trial to land on a given card whatever the machine's load.
        sleeps = sleeps_s or (sleep_s,) * count
        self._slots = [TableSlot(start, i, sleeps[i], speeds[i]) for i in range(count)]

    def slots(self) -> list[TableSlot]:
        return [s for s in self._slots if s.alive]

    def run(self, spec: dict[str, Any], trial_dir: Path, timeout_s: float) -> dict[str, Any]:
        return self.slots()[0].run(spec, trial_dir, timeout_s)
