"""Records a table of real measurements: every config of a workload's knob grid, each a real trial.

    python -m bench.record [--workload NAME ...] [--out bench/tables] [--budget-s SECONDS] [--steps N]

Each config runs as a trial through the same runner and executor `autotune tune` uses (a fresh child
process, the same rows, warm-up excluded, the worst-case batch checked against the memory limit), so a
table holds what a real trial would have measured: samples/s, step times, peak memory, per-row losses
for the parity check, and the state (complete, oom, crash, ...). The baseline is measured three
times first for the A/A noise. The table also holds the workload's job, frame and job features, so the
search benchmark can replay autotune's reasoner on it as if the trials ran. A bring-your-own script
(bench/byo) is read and run in a scratch copy, as bench.scripts runs it; its table names the script
inside that copy, and keeps what the loop reads of a script's run (rows matched by content).

The fastest configs of the first pass are then measured twice more (--refine) and keep their median
run, so the top of the table, which the benchmark scores against, is not one noisy run.

Without --workload it records the CPU workloads, or with --gpu the GPU ones (scripts/record_gpu.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, ContextManager, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from autotune.api import job_from_words as api_job_from_words
from autotune.executors import LocalExecutor
from autotune.util.io import write_json_atomic
from autotune.workloads.jobs import job_from_words
from autotune.kb.features import job_features
from autotune.config.knobs import Knobs
from autotune.loop.tuner import StepBudget, Tuner

from . import byo_setup
from .replay import TABLES
from .workloads import CPU_WORKLOADS, GPU_WORKLOADS, WORKLOADS, Workload, configs

# Measured optimizer steps per trial of a table (--steps): a CPU trial in a few seconds.
STEPS = 4
# What a replayed trial needs of a measurement; the rest (model and data facts) is in the frame.
KEPT_FIELDS = ("samples_per_s", "tokens_per_s", "step_times_s", "peak_memory", "parity_losses", "ceiling",
               "breakdown", "mfu", "hfu", "device", "rows_per_step")
# What the loop also reads of a script's run: its rows matched by content for parity, why they or the
# worst-case batch were out of reach, and the real tokens its window trained (compared at the baseline's).
SCRIPT_FIELDS = ("parity_rows", "parity_note", "ceiling_unchecked", "real_tokens_per_step")


def _slim(measurement: dict[str, Any] | None, workload: Workload) -> dict[str, Any] | None:
    if not measurement:
        return None
    kept = KEPT_FIELDS + (SCRIPT_FIELDS if workload.is_script else ())
    return {k: measurement[k] for k in kept if k in measurement}


@contextmanager
def session(workload: Workload, steps: int) -> Iterator[tuple[Tuner, Path]]:
    """A tuner for the workload in a scratch folder, its executor closed at the end."""
    with tempfile.TemporaryDirectory() as tmp, _scratch(workload, Path(tmp)):
        root = Path(tmp)
        words = workload.job_words(root) + [f"kb={root / 'kb'}"]
        # A script is read as `tune` reads it: its probe runs in a run folder the API places.
        job = (api_job_from_words(workload.name, words, runs_dir=root / "probe-runs")[0] if workload.is_script
               else job_from_words(workload.name, words)[0])
        executor = LocalExecutor()
        try:
            tuner = Tuner(job, executor, root / "runs")
            tuner.steps = StepBudget(measure_steps=steps, warmup_max=2)
            tuner.folder.create(job.to_dict())
            yield tuner, root
        finally:
            close = getattr(executor, "close", None)
            if close is not None:
                close()


def _scratch(workload: Workload, root: Path) -> ContextManager[Path]:
    """For a bring-your-own script: a copy of bench/byo under root, the working folder while the session
    lasts (bench.byo_setup.scratch); nothing for the other workloads."""
    return byo_setup.scratch(root, workload.setup) if workload.is_script else nullcontext(root)


def _progress(name: str) -> Progress:
    return Progress(TextColumn(name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.description}"))


def record(workload: Workload, out: Path, budget_s: float | None = None, steps: int = STEPS) -> Path:
    """Measure every config of the workload's grid once; returns the table's path."""
    started = time.monotonic()
    with session(workload, steps) as (tuner, root):
        job = tuner.job
        begun = tuner.begin()
        frame, floor = begun.frame, begun.noise_floor
        grid = list(configs(workload.grid, job.start, frame["device"], job.effective_batch))
        entries = []
        with _progress(workload.name) as progress:
            task = progress.add_task("", total=len(grid))
            for index, knobs in enumerate(grid, 1):
                if budget_s is not None and entries and (
                        time.monotonic() - started) * (1 + 1 / len(entries)) > budget_s:
                    break  # the next config would overrun the budget: the table says it is partial
                change = ", ".join(f"{k}={v}" for k, (_, v) in job.start.diff(knobs).items()) or "start"
                progress.update(task, description=change)
                result = tuner.measure(knobs, index, change, ceiling=True)
                measured = result.measurement
                entries.append({"knobs": knobs.to_dict(), "state": result.state, "reason": result.reason,
                                "wall_s": round(result.wall_s, 3),
                                "measurement": _slim(measured.to_dict() if measured else None, workload),
                                "runs_samples_per_s": [measured.samples_per_s] if measured else []})
                progress.advance(task)
        baseline_runs = [_slim(m.to_dict(), workload) for m in tuner.records[0].measurements]
        job_dict = job.to_dict()
        if workload.is_script:
            # The scratch copy goes with the session: the table names the script inside a copy of bench/byo
            # (and the setup that completes it), which the search replay makes again to read it.
            job_dict["script"] = os.path.relpath(job_dict["script"], root.resolve())
    table = {
        "schema_version": 1, "workload": workload.name, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "job": job_dict, **({"byo": {"setup": workload.setup}} if workload.is_script else {}),
        "features": job_features(job, frame), "frame": frame,
        "grid": {name: list(values) for name, values in workload.grid.items()},
        "baseline": {"knobs": job.start.to_dict(), "noise_floor": floor, "measurements": baseline_runs},
        "complete": len(entries) == len(grid), "configs": entries, "refined": None,
        "record_wall_s": round(time.monotonic() - started, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{workload.name}.json"
    write_json_atomic(path, table)
    return path


def refine(workload: Workload, path: Path, top: int, repeats: int, steps: int = STEPS) -> Path:
    """Measure the table's `top` fastest configs `repeats` more times and keep each one's median run.

    One run per config leaves the top of a table to the machine's run-to-run noise, and the top is
    what "within 5% of the best" is scored against; a config outside the first pass's top is far
    from the best, so the repeats go where they change the score."""
    started = time.monotonic()
    table = json.loads(path.read_text())
    complete = [e for e in table["configs"] if e["state"] == "complete"]
    chosen = sorted(complete, key=lambda e: -e["measurement"]["samples_per_s"])[:top]
    with session(workload, steps) as (tuner, _):
        tuner.frame()
        with _progress(f"{workload.name} (top {top})") as progress:
            task = progress.add_task("", total=len(chosen))
            for entry in chosen:
                knobs = Knobs.from_dict(entry["knobs"])
                runs = [entry["measurement"]]
                for _ in range(repeats):
                    result = tuner.measure(knobs, 1, "refine")
                    if result.state == "complete":
                        runs.append(_slim(result.measured().to_dict(), workload))
                runs.sort(key=lambda m: m["samples_per_s"])
                # The median run, with the worst-case reading of the first pass (refine runs skip it), or
                # why a script's was out of reach (and then none: a measurement holds no null reading).
                first, median = entry["measurement"], dict(runs[len(runs) // 2])
                kept = {k: first[k] for k in ("ceiling", "ceiling_unchecked") if first.get(k) is not None}
                for name in ("ceiling", "ceiling_unchecked"):
                    if name not in kept:
                        median.pop(name, None)
                entry["measurement"] = {**median, **kept}
                entry["runs_samples_per_s"] = [m["samples_per_s"] for m in runs]
                progress.advance(task)
    table["refined"] = {"top": top, "repeats": repeats, "wall_s": round(time.monotonic() - started, 1)}
    write_json_atomic(path, table)
    return path


def aa(workload: Workload, path: Path, runs: int, steps: int = STEPS) -> Path:
    """The user's config measured `runs` times back to back: the short-term run-to-run noise that an
    interleaved comparison sees (slow drift between runs far apart cancels in one, so a replay, which
    has no drift, must not draw it as noise)."""
    table = json.loads(path.read_text())
    with session(workload, steps) as (tuner, _):
        tuner.frame()
        speeds = []
        with _progress(f"{workload.name} (A/A)") as progress:
            task = progress.add_task("", total=runs)
            for _ in range(runs):
                result = tuner.measure(tuner.job.start, 1, "A/A")
                if result.state == "complete":
                    speeds.append(result.measured().samples_per_s)
                progress.advance(task)
    table["aa_samples_per_s"] = speeds
    write_json_atomic(path, table)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS),
                        help="record this workload (repeatable); default: the CPU ones")
    parser.add_argument("--gpu", action="store_true", help="record the GPU workloads")
    parser.add_argument("--out", type=Path, default=TABLES)
    parser.add_argument("--budget-s", type=float, default=None, help="stop each table after this many seconds")
    parser.add_argument("--steps", type=int, default=STEPS, help="measured optimizer steps per trial")
    parser.add_argument("--refine", type=int, default=24, metavar="TOP",
                        help="then measure the TOP fastest configs again (default 24; 0: no)")
    parser.add_argument("--repeats", type=int, default=2, help="extra runs of each refined config")
    parser.add_argument("--aa", type=int, default=8, help="then runs of the user's config back to back (A/A)")
    parser.add_argument("--refine-only", action="store_true",
                        help="refine the existing tables and measure their A/A runs; record nothing")
    args = parser.parse_args(argv)
    if args.workload:
        chosen = [WORKLOADS[name] for name in args.workload]
    else:
        chosen = list(GPU_WORKLOADS if args.gpu else CPU_WORKLOADS)
    for workload in chosen:
        path = args.out / f"{workload.name}.json"
        if not args.refine_only:
            path = record(workload, args.out, args.budget_s, args.steps)
        if args.refine:
            refine(workload, path, args.refine, args.repeats, args.steps)
        if args.aa:
            aa(workload, path, args.aa, args.steps)
        table = json.loads(path.read_text())
        done = sum(c["state"] == "complete" for c in table["configs"])
        print(f"{path}: {len(table['configs'])} configs ({done} complete) in {table['record_wall_s']:.0f}s"
              + ("" if table["complete"] else " -- partial: the budget ran out"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
