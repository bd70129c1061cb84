"""Records a table of real measurements: every config of a workload's knob grid, each a real trial.

    python -m bench.record [--workload NAME ...] [--out bench/tables] [--budget-s SECONDS] [--steps N]

Each config runs as a trial through the same runner and executor `autotune tune` uses (a fresh child
process, the same rows, warm-up excluded, the worst-case batch checked against the memory limit), so a
table holds what a real trial would have measured: samples/s, step times, peak memory, per-row losses
for the parity check, and the state (complete, oom, crash, ...). The baseline is measured three
times first for the A/A noise. The table also holds the workload's job, frame and job features, so the
search benchmark can replay autotune's reasoner on it as if the trials ran.

Without --workload it records the CPU workloads, or with --gpu the GPU ones (scripts/record_gpu.sh).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from autotune.executors import LocalExecutor
from autotune.io import write_json_atomic
from autotune.job import job_from_words
from autotune.kb.features import job_features
from autotune.tuner import StepBudget, Tuner

from .workloads import CPU_WORKLOADS, GPU_WORKLOADS, WORKLOADS, Workload, configs

TABLES = Path(__file__).parent / "tables"
# What a replayed trial needs of a measurement; the rest (model and data facts) is in the frame.
KEPT_FIELDS = ("samples_per_s", "tokens_per_s", "step_times_s", "peak_memory", "parity_losses", "ceiling",
               "breakdown", "mfu", "hfu", "device", "rows_per_step")


def _slim(measurement: dict[str, Any] | None) -> dict[str, Any] | None:
    if not measurement:
        return None
    return {k: measurement[k] for k in KEPT_FIELDS if k in measurement}


def record(workload: Workload, out: Path, budget_s: float | None = None, steps: int = 4) -> Path:
    """Measure every config of the workload's grid; returns the table's path."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        job, _ = job_from_words(workload.name, workload.job_words(root) + [f"kb={root / 'kb'}"])
        executor = LocalExecutor()
        try:
            tuner = Tuner(job, executor, root / "runs")
            tuner.steps = StepBudget(measure_steps=steps, warmup_max=2)
            tuner.folder.create(job.to_dict())
            frame, _, _, floor = tuner.begin()
            grid = list(configs(workload.grid, job.start, frame["device"], job.effective_batch))
            entries = []
            columns = (TextColumn(workload.name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("{task.description}"))
            with Progress(*columns) as progress:
                task = progress.add_task("", total=len(grid))
                for index, knobs in enumerate(grid, 1):
                    if budget_s is not None and entries and (
                            time.monotonic() - started) * (1 + 1 / len(entries)) > budget_s:
                        break  # the next config would overrun the budget: the table says it is partial
                    change = ", ".join(f"{k}={v}" for k, (_, v) in job.start.diff(knobs).items()) or "start"
                    progress.update(task, description=change)
                    result = tuner.measure(knobs, index, change, ceiling=True)
                    entries.append({"knobs": knobs.to_dict(), "state": result["state"], "reason": result["reason"],
                                    "wall_s": round(result.get("wall_s") or 0.0, 3),
                                    "measurement": _slim(result.get("measurement"))})
                    progress.advance(task)
        finally:
            close = getattr(executor, "close", None)
            if close is not None:
                close()
    table = {
        "schema_version": 1, "workload": workload.name, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "job": job.to_dict(), "features": job_features(job, frame), "frame": frame,
        "grid": {name: list(values) for name, values in workload.grid.items()},
        "baseline": {"knobs": job.start.to_dict(), "noise_floor": floor,
                     "measurements": [_slim(m) for m in tuner.records[0]["measurements"]]},
        "complete": len(entries) == len(grid), "configs": entries,
        "record_wall_s": round(time.monotonic() - started, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{workload.name}.json"
    write_json_atomic(path, table)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS),
                        help="record this workload (repeatable); default: the CPU ones")
    parser.add_argument("--gpu", action="store_true", help="record the GPU workloads")
    parser.add_argument("--out", type=Path, default=TABLES)
    parser.add_argument("--budget-s", type=float, default=None, help="stop each table after this many seconds")
    parser.add_argument("--steps", type=int, default=4, help="measured optimizer steps per trial")
    args = parser.parse_args(argv)
    if args.workload:
        chosen = [WORKLOADS[name] for name in args.workload]
    else:
        chosen = list(GPU_WORKLOADS if args.gpu else CPU_WORKLOADS)
    for workload in chosen:
        path = record(workload, args.out, args.budget_s, args.steps)
        table = json.loads(path.read_text())
        done = sum(c["state"] == "complete" for c in table["configs"])
        print(f"{path}: {len(table['configs'])} configs ({done} complete) in {table['record_wall_s']:.0f}s"
              + ("" if table["complete"] else " -- partial: the budget ran out"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
