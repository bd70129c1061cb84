"""Whole tunes as a user runs them, timed: the measured gains the tests no longer assert.

    python -m bench.e2e [--only demo,clm] [--no-save] [--results bench/results/e2e.json]

Runs the README's main job (`autotune tune demo smoke`) and its "Bring your own script" commands, each
through the console script in a fresh folder (a copy of examples/byo_script, its own knowledge base),
on the CPU, and prints per tune beside the last recorded figures: the loop's speed-up and its interval,
the speed-up realized in `trl sft` (text jobs), trials, device runs (the trials' child runs: the frame
and the hand-over aside), wall time and the stop reason. The figures are this machine's today:
a loaded box stops a smoke tune's budget sooner. The new figures replace the results file unless
--no-save; each tune's figures keep the machine and the date they were measured on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "e2e.json"
RUN_DIR = re.compile(r"^\d{3}-\d{3}$")


@dataclass(frozen=True)
class Case:
    name: str
    words: tuple[str, ...]   # after `autotune tune`, as the README gives them


# The README's commands, word for word (tests/bench/test_e2e.py holds the README to them).
CASES = (
    Case("demo", ("demo", "smoke")),
    Case("nano", ("nano", "script=examples/byo_script/nano_train.py",
                  "script_args=examples/byo_script/config/train_tiny.py", "smoke")),
    Case("clm", ("clm", "script=examples/byo_script/hf_clm.py", "script_args=examples/byo_script/hf_clm.json", "smoke")),
    Case("sft", ("sft", "script=examples/byo_script/trl_sft.py",
                 "script_args=--config examples/byo_script/trl_sft.yaml", "smoke")),
)


def shell_words(case: Case) -> str:
    """The case as a shell command line, in the README's quoting."""
    out = []
    for word in case.words:
        key, eq, value = word.partition("=")
        out.append(f"{key}='{value}'" if eq and key == "script_args" else word)
    return "autotune tune " + " ".join(out)


def device_runs(folder: Path) -> int:
    """The trials' child runs (baseline repeats, screens, interleaved pairs) the run folder holds."""
    trials = folder / "trials"
    return sum(1 for p in trials.iterdir() if p.is_dir() and RUN_DIR.match(p.name)) if trials.is_dir() else 0


def figures(result: dict[str, Any], folder: Path, wall_s: float) -> dict[str, Any]:
    """One row of the table from `tune --json`'s object and the run folder."""
    realized = result.get("realized") or {}
    interval = result.get("speedup_interval")
    return {"speedup": result["speedup"], "interval": list(interval) if interval else None,
            "realized_speedup": realized.get("speedup"), "realized_state": realized.get("state"),
            "trials": result["trials"], "kept": result["kept"], "device_runs": device_runs(folder),
            "wall_s": round(wall_s, 1), "stop_reason": result["stop_reason"]}


def run_case(case: Case, timeout_s: float, autotune: list[str] | None = None) -> dict[str, Any]:
    """Tune `case` in a fresh folder; its figures, or {"error": ...} when the command failed."""
    command = autotune or [sys.executable, "-m", "autotune.cli.main"]
    with tempfile.TemporaryDirectory(prefix=f"e2e-{case.name}-") as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "examples", work / "examples")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "AUTOTUNE_KB": str(work / "kb"), "PYTHONPATH":
               os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
        began = time.monotonic()
        try:
            done = subprocess.run([*command, "tune", *case.words, "--json"], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"did not end within {timeout_s:.0f}s", "wall_s": round(time.monotonic() - began, 1)}
        wall = time.monotonic() - began
        if done.returncode != 0:
            return {"error": f"exit {done.returncode}: {why_failed(done.stderr)}"[:300], "wall_s": round(wall, 1)}
        return figures(json.loads(done.stdout), work / "runs" / case.words[0], wall)


def why_failed(stderr: str) -> str:
    """The line that says why a tune failed: autotune's own one-line error, else the last line (a
    warning printed at exit, a resource tracker's, must not stand in for the reason)."""
    lines = stderr.strip().splitlines() or ["no output"]
    return next((line for line in reversed(lines) if line.startswith("autotune:")), lines[-1])


def _speedup(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    if "error" in row:
        return "failed"
    low_high = row.get("interval")
    text = f"x{row['speedup']:.2f}"
    return text + (f" [{low_high[0]:.2f}, {low_high[1]:.2f}]" if low_high else "")


def _cell(row: dict[str, Any] | None, key: str, form: str) -> str:
    value = (row or {}).get(key)
    return "-" if value is None else format(value, form)


def table(now: dict[str, dict[str, Any]], last: dict[str, dict[str, Any]]) -> str:
    """Now beside the last recorded run, one line per tune (a markdown table)."""
    head = ("tune", "speed-up [interval]", "last", "realized", "last", "trials", "last", "device runs", "last",
            "wall s", "last", "stop reason")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in now.items():
        before = last.get(name)
        cells = (name, _speedup(row), _speedup(before), _cell(row, "realized_speedup", ".2f"),
                 _cell(before, "realized_speedup", ".2f"), _cell(row, "trials", "d"), _cell(before, "trials", "d"),
                 _cell(row, "device_runs", "d"), _cell(before, "device_runs", "d"), _cell(row, "wall_s", ".0f"),
                 _cell(before, "wall_s", ".0f"), row.get("stop_reason") or row.get("error", "-"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"schema_version": 1, "tunes": {}}


def machine() -> str:
    """The machine, and how busy it was as the tune began (a smoke budget buys fewer trials on a loaded box)."""
    load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}{load}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated tunes: " + ",".join(c.name for c in CASES))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--no-save", action="store_true", help="print only; keep the results file as it is")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one tune may take")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in {c.name for c in CASES}]
    if unknown:
        parser.error(f"--only {','.join(unknown)}: the tunes are {', '.join(c.name for c in CASES)}")
    cases = [c for c in CASES if not names or c.name in names]
    stored = load(args.results)
    now: dict[str, dict[str, Any]] = {}
    for case in cases:
        print(f"{shell_words(case)} ...", flush=True)
        now[case.name] = {"command": shell_words(case), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "machine": machine(), **run_case(case, args.timeout)}
    last = stored.get("tunes", {})
    print()
    for name in now:
        print(f"{name}: last recorded {last[name]['date']} ({last[name]['machine']})" if name in last
              else f"{name}: no figures recorded before")
    print(table(now, last))
    if not args.no_save:
        record = {"schema_version": 1, "tunes": {**last, **now}}
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(record, indent=1) + "\n")
    return 1 if any("error" in row for row in now.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
