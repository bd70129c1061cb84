"""What measuring costs: a text trial's instruments inside `trl.SFTTrainer` against a bare `SFTTrainer`.

    python -m bench.overhead [--repeats 9] [--measure-steps 6]

Both train the same tiny model (the demo preset, the same seeded weights each run) on the same rows in
the same order with the same `SFTConfig` (the knobs below, by `trl_args.knob_fields`): the bare run is
the installed `trl.SFTTrainer` with sequential sampling over the plan's rows; the instrumented one is
what a trial runs (the plan's sampler, the `Instruments` callback and hooks: a synchronised clock per
step, per-row parity losses with dropout off on the first two steps, the step loss). Warm-up is off in
the plan, so both run the same steps. Each run is timed from `on_train_begin` to `on_train_end`
(trainer set-up aside), interleaved in pairs of alternating order (bare first, then instrumented
first) in one process; the overhead is the median of the paired ratios, since adjacent runs share
this kind of VM's slow drift.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from transformers import TrainerCallback

from autotune.workloads.jobs import job_from_words
from autotune.config.job import Job
from autotune.config.knobs import Knobs
from autotune.probes.timing import relative_spread
from autotune.engine.data import synthetic_rows
from autotune.engine.instruments import Instruments
from autotune.workloads.hf.models import build_model, resolve_config
from autotune.workloads.hf.sft import PlanSampler, make_trainer, sft_config, step_shape, text_plan


class Wall(TrainerCallback):
    """Two clock readings a run: the training loop's wall time, set-up aside."""

    trainer = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.began = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = time.perf_counter() - self.began


def one_run(job: Job, knobs: Knobs, config, rows: list[list[int]], measure_steps: int, instrumented: bool) -> float:
    plan = text_plan(rows, knobs, job, measure_steps, warmup_max=0, profile_steps=0)
    steps = len(plan.parity) + len(plan.measured)
    wall = Wall()
    callbacks: list = [wall]
    sampler = None
    if instrumented:
        callbacks.insert(0, Instruments(plan, step_shape(rows, knobs.padding, job.max_len), lambda: None))
        sampler = PlanSampler(plan)
    model = build_model(job, knobs, "cpu", config, for_trainer=True)
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(model, rows[:steps * job.effective_batch], sft_config(knobs, job, "cpu", out, steps),
                               job, 0, callbacks, sampler)
        trainer.train()
    if instrumented:
        log = callbacks[0].close()
        assert len(log.times) == measure_steps and len(log.parity["step1"]) == job.effective_batch
    return wall.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--measure-steps", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    job, _ = job_from_words("bench", ["smoke", "max_len=256", "padding=padding_free", "per_device_train_batch_size=4"])
    knobs = job.start
    config, _ = resolve_config(job)
    rows = synthetic_rows(job.effective_batch * (2 + args.measure_steps), job.max_len, config.vocab_size, 0)
    one_run(job, knobs, config, rows, args.measure_steps, True)  # warm-up: allocator, first-call costs
    bare, instrumented = [], []
    for repeat in range(args.repeats):
        # ABBA order: a drift within a pair favours neither side over the repeats.
        for instrumented_run in ((False, True) if repeat % 2 == 0 else (True, False)):
            seconds = one_run(job, knobs, config, rows, args.measure_steps, instrumented_run)
            (instrumented if instrumented_run else bare).append(seconds)
    ratio = statistics.median(i / b for b, i in zip(bare, instrumented))
    print(f"model {config.model_type}, {job.effective_batch} rows/step, max_len {job.max_len}, "
          f"{2 + args.measure_steps} steps a run, 1 CPU thread, {args.repeats} repeats, knobs {knobs.padding} "
          f"x{knobs.per_device_train_batch_size}")
    print(f"bare SFTTrainer     median {statistics.median(bare):7.3f} s   runs {[round(x, 3) for x in bare]}")
    print(f"with instruments    median {statistics.median(instrumented):7.3f} s   runs {[round(x, 3) for x in instrumented]}")
    print(f"instrument overhead: median of paired instrumented/bare = {ratio:.4f} ({ratio - 1:+.2%}; target under +2%)")
    print(f"A/A spread of the bare runs (max-min)/median: {relative_spread(bare):.2%}")


if __name__ == "__main__":
    main()
