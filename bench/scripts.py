"""Bring-your-own scripts tuned beside the best config measured by hand over the same knobs (issue 30).

    python -m bench.scripts [--only plain_yaml] [--time 6m] [--rounds 2] [--no-save]

Each case is a script written for this benchmark (bench/byo/, not the examples' own) on a tiny model
built from a config and generated rows; a case's `setup` (bench/byo_setup.py) makes in its copy what
is not committed: TRL's installed sft.py, a tiny model folder, data files. Per case, in one run so the machine's load cancels:
1. `autotune tune CASE script=... smoke time=T only=KNOBS --json` through the console script, in a
   fresh copy of bench/byo with its own knowledge base: autotune's pick.
2. Every config of the case's grid over the same KNOBS (those autotune is held to), each once, as a
   trial through the runner and executor `tune` uses (bench.record's instrument).
3. Rounds of interleaved runs of the baseline, the grid's three fastest and autotune's pick; each
   config's median over the rounds, divided by the baseline's median, is its gain.
Both measure as the tune does: a run whose measured steps drew other rows than the baseline's (length
grouping in a script's own sampler) is compared per real token, at the baseline window's work.
It prints per case autotune's gain, the hand-measured best gain and their ratio (target >= 0.7) and
writes bench/results/scripts.json unless --no-save.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import chdir
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import byo_setup

ROOT = Path(__file__).resolve().parents[1]
BYO = ROOT / "bench" / "byo"
RESULTS = ROOT / "bench" / "results" / "scripts.json"


@dataclass(frozen=True)
class Case:
    name: str
    words: tuple[str, ...]          # after `autotune tune NAME`, paths relative to the copy's root
    grid: dict[str, tuple] = field(default_factory=dict)
    setup: str = ""                 # a function of bench.byo_setup that prepares the copy (files made at run time)
    scale: float = 1.0              # autotune's budget is --time times this (a launcher starts twice per run)

    def only(self) -> str:
        return "only=" + ",".join(self.grid)

    def held(self, knobs: dict[str, Any]) -> dict[str, Any]:
        """A config's values of the knobs the case holds autotune to (the rest are the start's)."""
        return {name: knobs[name] for name in self.grid}


CASES = (
    Case("plain_yaml", ("script=byo/plain_yaml.py", "script_args=byo/plain_yaml.yaml"),
         {"per_device_train_batch_size": (2, 4, 8, 16), "padding": ("max_length", "longest"),
          "group_by_length": (False, True), "attn_implementation": ("eager", "sdpa")}),
    Case("nano_windows", ("script=byo/nano_windows.py", "script_configs=byo/nano_windows.yaml"),
         {"per_device_train_batch_size": (1, 2, 4, 8, 16)}),
    Case("hf_trainer", ("script=byo/hf_trainer.py", "script_args=byo/hf_trainer.yaml"),
         {"per_device_train_batch_size": (1, 4, 16), "padding": ("max_length", "longest"),
          "group_by_length": (False, True), "attn_implementation": ("eager", "sdpa")}),
    Case("trl_sft", ("script=trl/sft.py", "script_args=--config byo/trl_sft.yaml"),
         {"precision": ("bf16", "fp32"), "gradient_checkpointing": (True, False),
          "per_device_train_batch_size": (1, 8), "padding": ("max_length", "longest")}, setup="trl_sft"),
    Case("accel_loop", ("script=byo/accel_loop.py",),
         {"per_device_train_batch_size": (2, 8, 16), "padding": ("max_length", "longest"),
          "attn_implementation": ("eager", "sdpa")}),
    Case("accel_launch", ("script=byo/accel_loop.py", "script_launcher=accelerate launch"),
         {"precision": ("fp32", "bf16"), "per_device_train_batch_size": (2, 8, 16),
          "padding": ("max_length", "longest")}, scale=2.0),
    Case("pl_trainer", ("script=byo/pl_trainer.py", "script_args=byo/pl_trainer.yaml"),
         {"precision": ("fp32", "bf16"), "per_device_train_batch_size": (1, 4, 8), "padding": ("max_length", "longest")}),
    Case("pl_cli", ("script=byo/pl_cli.py", "script_args=fit --config byo/pl_cli.yaml"),
         {"precision": ("fp32", "bf16"), "per_device_train_batch_size": (1, 4, 16), "padding": ("max_length", "longest")}),
)


def seconds(budget: str) -> float:
    """`6m`, `90s`, `1h` or a bare number of seconds, as --time takes it."""
    units = {"s": 1, "m": 60, "h": 3600}
    return float(budget[:-1]) * units[budget[-1]] if budget[-1:] in units else float(budget)


def tune(case: Case, work: Path, budget: str) -> dict[str, Any]:
    """autotune's own tune of the case, as a user runs it; its --json object."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "AUTOTUNE_KB": str(work / "kb"), "PYTHONPATH":
           os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    done = subprocess.run([sys.executable, "-m", "autotune.cli.main", "tune", case.name, *case.words, case.only(),
                           "smoke", f"time={budget}", "--json"], cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{case.name}: tune exit {done.returncode}: {done.stderr.strip()[-400:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    result["best_knobs"] = json.loads((work / "runs" / case.name / "best_config.json").read_text())["knobs"]
    return result


def by_hand(case: Case, work: Path, picked: dict[str, Any], rounds: int) -> dict[str, Any]:
    """The grid measured once, then the baseline, the grid's top 3 and autotune's pick interleaved."""
    from autotune import job_from_words
    from autotune.config.knobs import Knobs
    from autotune.executors import LocalExecutor
    from autotune.loop.measuring import at_baseline_work
    from autotune.loop.tuner import Tuner

    from .workloads import configs

    with chdir(work):
        # Read as `tune` reads it, its parse and probe runs included (TRL's defaults, a name a probe confirms),
        # so the grid starts where the tune did and sets what the tune can set.
        # The grid's own time budget: the tuner's clock runs over every measurement below (smoke's 3 minutes
        # ended the last rounds in a timeout).
        job, _ = job_from_words(case.name + "-grid", [*case.words, "smoke", "time=2h", f"kb={work / 'kb-grid'}"],
                                runs_dir=work / "probe-runs")
        executor = LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""})
        try:
            tuner = Tuner(job, executor, work / "runs")
            tuner.folder.create(job.to_dict())
            frame = tuner.frame()
            grid = list(configs(case.grid, job.start, frame["device"], job.effective_batch))
            if not grid:
                raise ValueError(f"{case.name}: no config of the grid can run here")
            # The tune's instrument: a run whose measured steps drew other rows than the baseline's (length
            # grouping) is compared per real token, at the baseline window's work (Measurement.at_work).
            first = tuner.measure(job.start, 0, "reference")
            work = first.measured().window_tokens if first.state == "complete" else None
            once = []
            for index, knobs in enumerate(grid, 1):
                result = at_baseline_work(tuner.measure(knobs, index, "grid", ceiling=False), work, True)
                speed = result.measured().samples_per_s if result.state == "complete" else None
                once.append({"knobs": case.held(knobs.to_dict()), "state": result.state, "samples_per_s": speed,
                             **({} if speed else {"reason": result.reason[:200]})})
            top = sorted((e for e in once if e["samples_per_s"]), key=lambda e: -e["samples_per_s"])[:3]
            chosen = {"baseline": job.start, "autotune": Knobs.from_dict({**job.start.to_dict(), **picked})}
            chosen.update({f"grid{i + 1}": Knobs.from_dict({**job.start.to_dict(), **e["knobs"]})
                           for i, e in enumerate(top)})
            runs: dict[str, list[float]] = {label: [] for label in chosen}
            failed: dict[str, list[str]] = {}
            for _ in range(rounds):
                for label, knobs in chosen.items():
                    result = at_baseline_work(tuner.measure(knobs, 1, label), work, True)
                    if result.state == "complete":
                        runs[label].append(result.measured().samples_per_s)
                    else:
                        failed.setdefault(label, []).append(f"{result.state}: {result.reason}"[:200])
        finally:
            close = getattr(executor, "close", None)
            if close is not None:
                close()
    median = {label: statistics.median(v) for label, v in runs.items() if v}
    base = median["baseline"]
    hand = max((label for label in median if label.startswith("grid")), key=lambda label: median[label])
    return {"grid": once, "runs": runs, "failed_runs": failed, "hand_knobs": case.held(chosen[hand].to_dict()),
            "autotune_gain": median.get("autotune", 0.0) / base, "hand_gain": median[hand] / base}


def run_case(case: Case, budget: str, rounds: int) -> dict[str, Any]:
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"bench-scripts-{case.name}-") as tmp:
        work = Path(tmp)
        shutil.copytree(BYO, work / "byo")
        if case.setup:
            getattr(byo_setup, case.setup)(work)
        tuned = tune(case, work, f"{round(seconds(budget) * case.scale)}s")
        hand = by_hand(case, work, tuned["best_knobs"], rounds)
    ratio = (hand["autotune_gain"] - 1) / (hand["hand_gain"] - 1) if hand["hand_gain"] > 1 else 1.0
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load": os.getloadavg(),
            "tune_speedup": tuned["speedup"], "tune_trials": tuned["trials"], "stop_reason": tuned["stop_reason"],
            "autotune_knobs": case.held(tuned["best_knobs"]), **hand, "gain_ratio": hand["autotune_gain"] / hand["hand_gain"],
            "excess_ratio": ratio, "wall_s": round(time.monotonic() - began, 1)}


def table(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| script | autotune's gain | hand-best gain | ratio | autotune's own figure | trials |", "|---|---|---|---|---|---|"]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | failed: {row['error'][:80]} | | | | |")
            continue
        lines.append(f"| {name} | x{row['autotune_gain']:.2f} | x{row['hand_gain']:.2f} | {row['gain_ratio']:.2f} | "
                     f"x{row['tune_speedup']:.2f} | {row['tune_trials']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scripts", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated cases: " + ",".join(c.name for c in CASES))
    parser.add_argument("--time", default="6m", help="autotune's time budget per case")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the final comparison")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    rows: dict[str, dict[str, Any]] = {}
    for case in (c for c in CASES if not names or c.name in names):
        print(f"{case.name} ...", flush=True)
        try:
            rows[case.name] = run_case(case, args.time, args.rounds)
        except (RuntimeError, KeyError, ValueError) as error:
            rows[case.name] = {"error": str(error)}
    print(table(rows))
    if not args.no_save:
        old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"schema_version": 1, "cases": {}}
        RESULTS.write_text(json.dumps({"schema_version": 1, "cases": {**old["cases"], **rows}}, indent=1) + "\n")
    return 1 if any("error" in row for row in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
