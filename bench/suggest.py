"""How long `autotune suggest` takes against a knowledge base of 10,000 records.

    python -m bench.suggest [--records 10000] [--repeats 5]

Builds a knowledge base in a temporary folder: runs, trials (with slimmed measurements, as the tuner
writes them), learned claims and belief events carrying evidence, 10,000 records in all. Then times
`autotune suggest` two ways, medians of the repeats:
- in process, cold store: a new Store and Beliefs each time (what one CLI call does after its imports);
- the whole command in a fresh interpreter (`python -m autotune.cli.main suggest ...`), imports included,
  against an empty knowledge base and against the full one, so the ratio shows what the records cost.
Target: under 1 s.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autotune.kb import Store
from autotune.kb.beliefs import Beliefs
from autotune.kb.claims import Claim, Clause, Evidence, Update
from autotune.loop.advice import advise

WORDS = ["model=Qwen/Qwen2.5-1.5B", "max_len=4096", "gpu=4090", "method=lora", "padding_share=0.4"]
TARGET_S = 1.0


def build(folder: Path, records: int, seed: int = 0) -> dict[str, int]:
    """Fill `folder` with `records` records: a tenth runs, half trials, the rest claims and events."""
    rng = random.Random(seed)
    store = Store(folder)
    n_runs, n_trials = records // 10, records // 2
    n_claims = records // 50
    n_events = records - n_runs - n_trials - n_claims
    knobs = {"per_device_train_batch_size": 1, "padding": "max_length", "precision": "bf16"}
    runs = [{"schema_version": 1, "run_id": f"r{i}", "run": f"r{i}", "job_fingerprint": f"job{i % 97}",
             "device_fingerprint": f"gpu{i % 5}", "features": {"max_len": 512 * (1 + i % 8), "model_family": "qwen2"},
             "best": {"knobs": knobs, "trial": 3, "speedup": 1.5}} for i in range(n_runs)]
    store.extend("runs", runs)
    step_times = [round(0.1 + rng.random() * 0.01, 5) for _ in range(8)]
    trials = [{"schema_version": 1, "run_id": f"r{i % n_runs}", "trial": i, "job_fingerprint": f"job{i % 97}",
               "device_fingerprint": f"gpu{i % 5}", "knobs": knobs, "incumbent_knobs": knobs, "state": "complete",
               "decision": rng.choice(["keep", "discard"]), "ratio": 0.8 + rng.random() * 0.6,
               "measurements": [{"samples_per_s": 10.0, "step_times_s": step_times}]} for i in range(n_trials)]
    store.extend("trials", trials)
    beliefs = Beliefs(store)
    learned = [Claim(id=f"L-bench{i}", knob="per_device_train_batch_size", value="up", direction="helps", ratio=1.2,
                     condition=(Clause("max_len", "<", 512 * (1 + i % 16)),), origin="learned") for i in range(n_claims)]
    targets = [c.id for c in beliefs.claims()] + [c.id for c in learned]
    updates = [Update("create", c.id, "bench", children=(c,)) for c in learned]
    for i in range(n_events - len(learned)):
        features = {"max_len": rng.choice([256, 512, 1024, 2048, 4096]), "gpu_mem_gb": rng.choice([24, 80]),
                    "device_kind": "cuda", "headroom": round(rng.random(), 3)}
        updates.append(Update(rng.choice(["confirm", "weaken"]), rng.choice(targets), "bench",
                              evidence=Evidence(f"bench#{i}", 0.8 + rng.random() * 0.6,
                                                rng.choice(["helps", "neutral"]), features)))
    beliefs.apply(updates, run="bench")
    return {table: len(store.all(table)) for table in ("runs", "trials", "claims", "claim_history")}


def in_process(folder: Path, repeats: int) -> float:
    os.environ["AUTOTUNE_KB"] = str(folder)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        advise(WORDS)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def command(folder: Path, repeats: int) -> float:
    env = {**os.environ, "AUTOTUNE_KB": str(folder)}
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autotune.cli.main", "suggest", *WORDS, "--json"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        full, empty = Path(tmp) / "full", Path(tmp) / "empty"
        started = time.perf_counter()
        counts = build(full, args.records)
        print(f"knowledge base: {sum(counts.values())} records {counts} built in {time.perf_counter() - started:.1f} s")
        cold_full = in_process(full, args.repeats)
        cold_empty = in_process(empty, args.repeats)
        cmd_full = command(full, args.repeats)
        cmd_empty = command(empty, args.repeats)
    print(f"suggest in process, cold store: {cold_full:.3f} s with the records, {cold_empty:.3f} s without "
          f"(x{cold_full / cold_empty:.1f})")
    print(f"suggest as a command (fresh interpreter, imports included): {cmd_full:.3f} s with the records, "
          f"{cmd_empty:.3f} s without (x{cmd_full / cmd_empty:.2f})")
    verdict = "meets" if cmd_full < TARGET_S else "misses"
    print(f"target {TARGET_S:.1f} s for the whole command against {sum(counts.values())} records: {verdict} "
          f"({cmd_full / TARGET_S:.2f} of the target)")


if __name__ == "__main__":
    main()
