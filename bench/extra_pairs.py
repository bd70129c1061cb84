"""What the extra interleaved pairs cost and buy: A/A false keeps and real gains kept, with and without.

    python -m bench.extra_pairs [--tunes 150] [--gain 1.25] [--run-spread 0.1]

Whole tunes through the real loop (`Tuner`) against a simulated device: every run's speed is the
config's true speed times a run-level offset (gauss, `--run-spread`: start-up state, clocks,
neighbours) with 1% step noise on top, as the 2-core CI machine shows. Two tables of truth, each
tuned `--tunes` times with `extra_pairs` 2 (the loop's default) and 0 (decide on two pairs always),
the same seeds on both sides:
- A/A: no change has any effect, so every keep is a false keep;
- one real gain: `padding=padding_free` is `--gain` faster, everything else has no effect.
Prints the false-keep rate per trial, the share of tunes that kept the real gain, and the runs spent.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from autotune.job import job_from_words
from autotune.tuner import StepBudget, Tuner

FRAME = {"device": {"kind": "cpu", "cpu_count": 2, "bf16": False, "compile": False, "fused_adamw": True,
                    "memory_bytes": 8 * 2**30, "name": "simulated cpu",
                    "peaks": {"fingerprint": "simulated cpu", "matmul_flops": {"fp32": 1e11}, "copy_bytes_per_s": 1e10}},
         "model": {"params": 1, "trainable_params": 1, "layers": 2, "hidden": 8, "vocab": 16, "model_type": "qwen2",
                   "source": "preset tiny-qwen2"},
         "data": {"rows_sampled": 10, "p10_len": 5, "p50_len": 9, "p90_len": 30, "max_seen_len": 64,
                  "padding_share": 0.7, "truncated_share": 0.0, "dataset": "synthetic"}}
WORKLOAD = [0.6, 1.4, 0.9, 1.1]
LOSSES = {"step1": [2.0, 2.1], "step2": [1.9, 2.0]}
WORDS = ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=4", "max_trials=4"]


class Simulated:
    def __init__(self, start: dict[str, Any], gain: float, spread: float, seed: int) -> None:
        self.start, self.gain, self.spread = start, gain, spread
        self.random = random.Random(seed)
        self.runs = 0

    def run(self, spec: dict[str, Any], trial_dir: Path, timeout_s: float) -> dict[str, Any]:
        if spec["kind"] == "frame":
            return {"state": "complete", "reason": "", "frame": FRAME, "wall_s": 0.01}
        self.runs += 1
        faster = spec["knobs"]["padding"] == "padding_free" and self.start["padding"] != "padding_free"
        speed = 10.0 * (self.gain if faster else 1.0) * (1 + self.random.gauss(0, self.spread))
        times = [w * 4 / speed * (1 + self.random.gauss(0, 0.01)) for w in WORKLOAD]
        tp = 4 * len(times) / sum(times)
        measurement = {"device": "cpu", "samples_per_s": tp, "tokens_per_s": tp * 100, "step_times_s": times,
                       "peak_memory": {"kind": "cpu_peak_rss", "bytes": 2**30}, "parity_losses": LOSSES}
        if spec["ceiling"]:
            measurement["ceiling"] = {"fits": True, "kind": "cpu_peak_rss", "bytes": 2**30, "limit_bytes": 6 * 2**30}
        return {"state": "complete", "reason": "", "measurement": measurement, "wall_s": 0.01}


def tune(root: Path, seed: int, gain: float, spread: float, extra_pairs: int) -> tuple[list[dict], int]:
    job, _ = job_from_words(f"s{seed}", WORDS + [f"seed={seed}"])
    executor = Simulated(job.start.to_dict(), gain, spread, seed)
    where = root / f"{gain}-{seed}-{extra_pairs}"
    os.environ["AUTOTUNE_KB"] = str(where / "kb")  # each tune from the priors alone
    tuner = Tuner(job, executor, where)
    tuner.steps = StepBudget(measure_steps=len(WORKLOAD), warmup_max=0, extra_pairs=extra_pairs)
    return tuner.run().records[1:], executor.runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tunes", type=int, default=150)
    parser.add_argument("--gain", type=float, default=1.25)
    parser.add_argument("--run-spread", type=float, default=0.1)
    args = parser.parse_args()
    print(f"{args.tunes} tunes per cell, run-level spread {args.run_spread:.0%}, real gain x{args.gain}")
    print(f"{'table':<10} {'extra pairs':>11} {'false keeps/trial':>18} {'real gain kept':>15} {'runs/tune':>10}")
    with tempfile.TemporaryDirectory() as folder:
        for table, gain in (("A/A", 1.0), ("one gain", args.gain)):
            for extra in (2, 0):
                false, trials, kept, runs = 0, 0, 0, 0
                for seed in range(args.tunes):
                    records, spent = tune(Path(folder), seed, gain, args.run_spread, extra)
                    runs += spent
                    trials += len(records)
                    false += sum(r["decision"] == "keep" and (gain == 1.0 or r["change"] != "padding=padding_free")
                                 for r in records)
                    kept += any(r["decision"] == "keep" and r["change"] == "padding=padding_free" for r in records)
                shown = "-" if gain == 1.0 else f"{kept / args.tunes:.1%}"
                print(f"{table:<10} {extra:>11} {false / max(trials, 1):>18.2%} {shown:>15} {runs / args.tunes:>10.1f}")


if __name__ == "__main__":
    main()
