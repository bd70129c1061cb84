"""One replayed tune, trial by trial: where its device runs went.

    python -m bench.trace TABLE [--noise recorded|0.02|0.005] [--seed 0] [--warm] [--best-path] [--trials 48]

`bench.search` gives medians over seeds; this shows one seed's tune as `bench.search` runs it (the same
replay, job and knowledge bases): per trial its device runs, the runs so far, the recorded speed of the
config it tried as a share of the table's best, the decision, the change, who proposed it and the
loop's reason. `--warm`: with the knowledge base `bench.search` would use for this seed (learned on the
other tables); `--best-path`: with the table's best path put first (bench/best_path.py).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from autotune.config.knobs import Knobs
from autotune.loop.tuner import Tuner

from .best_path import path_loop
from .replay import TABLES, Table
from .search import KBS, _noise
from .strategies import learn_from, replay_tune


def trace(table: Table, seed: int, trials: int, warm: bool = False, path: bool = False,
          tables: list[Table] | None = None) -> list[str]:
    """The lines of one tune's trace (see the module's docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        kb = Path(tmp) / "kb" if warm else None
        if kb is not None:
            learn_from([t for t in tables or [] if t.name != table.name], trials, kb, seed=seed % KBS)
        outcome, executor = replay_tune(table, seed, trials, kb, path_loop(table) if path else Tuner)
    best, total, lines = table.best_speed, 0, []
    for record in outcome.records:
        runs = executor.runs_by_trial.get(record.trial, 0)
        total += runs
        share = (table.speed(Knobs.from_dict(record.knobs)) or 0.0) / best
        source = record.source.value if record.source else "-"
        lines.append(f"#{record.trial:<2} runs {runs:3d}  total {total:4d}  tried {share:6.1%}  {record.decision:8s} "
                     f"{record.change or 'baseline'}  ({source}): {record.reason}")
    lines.append(f"stopped: {outcome.stop_reason}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", help="a table's name (file stem in --tables)")
    parser.add_argument("--tables", type=Path, default=TABLES)
    parser.add_argument("--noise", type=_noise, default=None, help="'recorded' (default) or a fraction such as 0.02")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--warm", action="store_true", help="with a knowledge base learned on the other tables")
    parser.add_argument("--best-path", action="store_true", help="with the table's best path put first")
    args = parser.parse_args(argv)
    tables = [Table.load(p).with_noise(args.noise) for p in sorted(args.tables.glob("*.json"))]
    table = next((t for t in tables if t.name == args.table), None)
    if table is None:
        parser.exit(2, f"no table {args.table} in {args.tables}: one of {', '.join(t.name for t in tables)}\n")
    for line in trace(table, args.seed, args.trials, args.warm, args.best_path, tables):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
