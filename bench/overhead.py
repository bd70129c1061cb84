"""What measuring costs: the trial harness against a bare training loop on the same model and rows.

    python -m bench.overhead [--repeats 9] [--measure-steps 6]

Both loops train the same tiny model (the demo preset) on the same seeded rows with the same knobs,
interleaved (bare, harness, bare, harness, ...) in one process so they share the machine's state.
Prints the overhead as a ratio of median throughputs, and the A/A noise floor of the harness's own
repeats on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from autotune.job import job_from_words
from autotune.knobs import Knobs
from autotune.probes.stats import noise_floor
from autotune.probes.timing import relative_spread
from autotune.runners.batching import collate, step_plan
from autotune.runners.data import synthetic_rows
from autotune.runners.models import build_model, resolve_config
from autotune.runners.train import Engine, run_steps


def bare_loop(engine: Engine, rows: list[list[int]], knobs: dict, job: dict, measured: list[int]) -> float:
    """Rows per second of a plain loop: collate, forward, backward, step. No timer per step, no loader."""
    effective_batch, micro = job["effective_batch"], knobs["per_device_train_batch_size"]
    steps = step_plan(measured, effective_batch, micro)
    began = time.perf_counter()
    for step in steps:
        targets = sum(len(rows[r]) - 1 for micro_rows in step for r in micro_rows)
        for micro_rows in step:
            batch = collate([rows[r] for r in micro_rows], knobs["padding"], job["max_len"], job["pad_id"],
                            knobs["attn_implementation"])
            engine.micro_step(batch, targets)
        engine.optimizer_step()
    engine.synchronize()
    return len(steps) * effective_batch / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--measure-steps", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    job_obj, _ = job_from_words("bench", ["smoke", "max_len=256", "padding=padding_free",
                                          "per_device_train_batch_size=4"])
    job = {**job_obj.to_dict(), "pad_id": 0}
    knobs = Knobs.from_dict(job["start"]).to_dict()
    config, _ = resolve_config(job)
    rows = synthetic_rows(job["effective_batch"] * (2 + args.measure_steps), job["max_len"], config.vocab_size, 0)
    engine = Engine(build_model(job, knobs, "cpu", config), knobs, "cpu")
    measured = list(range(2 * job["effective_batch"], len(rows)))
    bare_loop(engine, rows, knobs, job, list(range(2 * job["effective_batch"])))  # warm-up
    bare, harness, runs = [], [], []
    for _ in range(args.repeats):
        bare.append(bare_loop(engine, rows, knobs, job, measured))
        log = run_steps(engine, rows, knobs, job, args.measure_steps, warmup_max=3)
        harness.append(log.measured_rows / sum(log.times))
        runs.append(log.times)
    # Adjacent runs share the machine's slow drift (this kind of VM wanders by +-15%), so the ratio of
    # each bare run to the harness run right after it is steadier than a ratio of overall medians.
    ratio = statistics.median(b / h for b, h in zip(bare, harness))
    spread = relative_spread(harness)
    print(f"model {config.model_type} {sum(p.numel() for p in engine.model.parameters()):,} params, "
          f"{job['effective_batch']} rows/step, max_len {job['max_len']}, 1 CPU thread, {args.repeats} repeats")
    print(f"bare loop  median {statistics.median(bare):8.2f} rows/s   runs {[round(x, 2) for x in bare]}")
    print(f"harness    median {statistics.median(harness):8.2f} rows/s   runs {[round(x, 2) for x in harness]}")
    print(f"harness overhead: median of paired bare/harness = {ratio:.4f} ({(ratio - 1):+.2%}; target under +2%)")
    print(f"A/A spread of the harness repeats (max-min)/median: {spread:.2%}")
    print(f"A/A noise floor of the harness repeats (autotune.probes.stats.noise_floor): {noise_floor(runs):.2%}")


if __name__ == "__main__":
    main()
