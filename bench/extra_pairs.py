"""The keep rule, calibrated on both sides: false keeps (A/A) and false discards (known gains).

    python -m bench.extra_pairs [--tunes 100] [--noise 0.12 --noise 0.02 --noise 0.005]

Whole tunes through the real loop (`Tuner`) against a simulated device: every run's speed is the
config's true speed times a run-level offset (gauss, the noise level: start-up state, clocks,
neighbours) with 1% step noise on top. At each noise level (0.12: the recorded CPU tables' spread; 2%:
a quiet CPU and what a lent H200 showed; 0.5%: a quiet GPU) and for each keep rule, the same seeds:
- before: "floor", the bootstrap interval must clear the baseline's A/A floor, 2 extra pairs at most;
- after: "sequential", the run-level test on the pooled spread, looked at after each added pair;
tuned `--tunes` times on
- A/A: no change has any effect, so every keep is a false keep (printed per trial);
- one real gain of 5%, 10% and 20% (`padding=padding_free`, everything else no effect): the share of
  tunes that did not keep it is the false-discard rate.
Prints both rates and the device runs per tune.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from autotune.workloads.jobs import job_from_words
from autotune.loop.tuner import StepBudget, Tuner
from bench.floor_rule import FLOOR

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


def tune(root: Path, seed: int, gain: float, spread: float, rule: str) -> tuple[list[dict], int]:
    job, _ = job_from_words(f"s{seed}", WORDS + [f"seed={seed}"])
    executor = Simulated(job.start.to_dict(), gain, spread, seed)
    where = root / f"{gain}-{spread}-{seed}-{rule}"
    os.environ["AUTOTUNE_KB"] = str(where / "kb")  # each tune from the priors alone
    tuner = Tuner(job, executor, where)
    tuner.steps = (StepBudget(measure_steps=len(WORKLOAD), warmup_max=0, extra_pairs=2, keep_rule=FLOOR)
                   if rule == "floor" else StepBudget(measure_steps=len(WORKLOAD), warmup_max=0))
    return tuner.run().records[1:], executor.runs


def cell(folder: Path, tunes: int, gain: float, spread: float, rule: str,
         first_seed: int = 0) -> tuple[float, float, float]:
    """(false keeps per trial, share of tunes that kept the real gain, device runs per tune)."""
    false, trials, kept, runs = 0, 0, 0, 0
    for seed in range(first_seed, first_seed + tunes):
        records, spent = tune(folder, seed, gain, spread, rule)
        runs += spent
        trials += len(records)
        false += sum(r["decision"] == "keep" and (gain == 1.0 or r["change"] != "padding=padding_free")
                     for r in records)
        kept += any(r["decision"] == "keep" and r["change"] == "padding=padding_free" for r in records)
    return false / max(trials, 1), kept / tunes, runs / tunes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tunes", type=int, default=100)
    parser.add_argument("--noise", type=float, action="append", help="run-level spread (repeatable)")
    parser.add_argument("--gain", type=float, action="append", help="real gains to find (default 1.05 1.1 1.2)")
    parser.add_argument("--rule", action="append", choices=("floor", "sequential"), help="default: both")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds FIRST_SEED .. FIRST_SEED + TUNES - 1")
    args = parser.parse_args()
    print(f"{args.tunes} tunes per cell from seed {args.first_seed}; before = 'floor' rule, after = 'sequential' rule")
    print(f"{'noise':>6} {'rule':>10} {'A/A false keeps/trial':>22} "
          + " ".join(f"{'discards x' + format(g, 'g'):>15}" for g in args.gain or GAINS) + f" {'runs/tune':>10}")
    with tempfile.TemporaryDirectory() as folder:
        for spread in args.noise or NOISES:
            for rule in args.rule or ("floor", "sequential"):
                false, _, runs = cell(Path(folder), args.tunes, 1.0, spread, rule, args.first_seed)
                discards = [1 - cell(Path(folder), args.tunes, g, spread, rule, args.first_seed)[1]
                            for g in args.gain or GAINS]
                print(f"{spread:>6.1%} {rule:>10} {false:>22.2%} " + " ".join(f"{d:>15.1%}" for d in discards)
                      + f" {runs:>10.1f}", flush=True)


NOISES = (0.12, 0.02, 0.005)
GAINS = (1.05, 1.1, 1.2)


if __name__ == "__main__":
    main()
