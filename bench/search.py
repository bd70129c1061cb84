"""How fast each strategy finds a fast config, replayed on tables of real measurements.

    python -m bench.search [--tables bench/tables] [--seeds 20] [--trials 16] [--only NAME ...]

For every table (bench/record.py measured every config of a knob grid on one workload) and every
strategy: the trials it needs before its pick is within 5% of the table's best config, the device runs
that took, and how good its pick is after 8 and after 16 trials (the pick's recorded samples/s over the
user's config), as medians over the seeds. Each seed draws other run-to-run noise (from the A/A noise
the recorder measured) and, for the randomised peers, another sampler seed.

autotune warm runs with a knowledge base that holds one autotune run on each other table and never
one on the table it is scored on (leave one out).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table as RichTable

from .replay import Table
from .strategies import PEERS, Trace, autotune_search, learn_from

TABLES = Path(__file__).parent / "tables"
SHARE_OF_BEST = 0.95
CHECKPOINTS = (8, 16)


def trials_to_best(table: Table, trace: Trace) -> float:
    """The first trial after which the pick is within 5% of the table's best (0: the user's config
    already is; inf: never within the trials run)."""
    target = SHARE_OF_BEST * table.best_speed
    if (table.speed(table.start) or 0.0) >= target:
        return 0
    return next((t for t, pick in enumerate(trace.picks, 1) if (table.speed(pick) or 0.0) >= target), math.inf)


def runs_to_best(table: Table, trace: Trace) -> float:
    trials = trials_to_best(table, trace)
    return trials if trials in (0, math.inf) else trace.runs[int(trials) - 1]


def ratio_at(table: Table, trace: Trace, trials: int) -> float:
    picks = trace.picks[:trials]
    return table.ratio(picks[-1]) if picks else 1.0


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _count(value: float, limit: int) -> str:
    return f">{limit}" if value == math.inf else f"{value:g}"


def evaluate(tables: list[Table], seeds: int, trials: int, console: Console,
             only: list[str] | None = None) -> list[dict[str, object]]:
    rows = []
    for table in tables:
        if only and table.name not in only:
            continue
        strategies: dict[str, Callable[[int], Trace]] = {
            name: (lambda seed, run=run, table=table: run(table, seed, trials)) for name, run in PEERS.items()}
        strategies["autotune cold"] = lambda seed, table=table: autotune_search(table, seed, trials)
        others = [t for t in tables if t is not table]
        warm_kb = None
        if others:
            holder = tempfile.TemporaryDirectory()
            warm_kb = Path(holder.name) / "kb"
            learn_from(others, trials, warm_kb)
            strategies["autotune warm"] = lambda seed, table=table, kb=warm_kb: autotune_search(table, seed, trials, kb)
        for name, run in strategies.items():
            started = time.monotonic()
            traces = [run(seed) for seed in range(seeds)]
            rows.append({
                "table": table.name, "strategy": name,
                "trials_to_95": _median([trials_to_best(table, t) for t in traces]),
                "runs_to_95": _median([runs_to_best(table, t) for t in traces]),
                **{f"ratio_at_{k}": _median([ratio_at(table, t, k) for t in traces]) for k in CHECKPOINTS},
                "best_ratio": table.best_speed / table.baseline_speed, "seconds": time.monotonic() - started,
                "noise_floor": _median([t.noise_floor for t in traces]) if traces[0].noise_floor is not None else None,
                "noise_cv": table.noise_cv,
            })
            console.log(f"{table.name}: {name} done in {rows[-1]['seconds']:.1f}s")
        if warm_kb is not None:
            holder.cleanup()
    return rows


def print_table(rows: list[dict[str, object]], trials: int, seeds: int, console: Console) -> None:
    out = RichTable(title=f"Search on recorded tables: medians over {seeds} seeds, at most {trials} trials")
    for column in ("table", "strategy", "trials to 95% of best", "device runs to 95%",
                   *(f"pick after {k} trials" for k in CHECKPOINTS), "table's best"):
        out.add_column(column, justify="left" if column in ("table", "strategy") else "right")
    for row in rows:
        out.add_row(row["table"], row["strategy"], _count(row["trials_to_95"], trials), _count(row["runs_to_95"], 999),
                    *(f"x{row[f'ratio_at_{k}']:.2f}" for k in CHECKPOINTS), f"x{row['best_ratio']:.2f}")
    console.print(out)
    for table in dict.fromkeys(r["table"] for r in rows):
        by = {r["strategy"]: r for r in rows if r["table"] == table}
        cold, tpe, warm = by["autotune cold"]["trials_to_95"], by["optuna TPE"]["trials_to_95"], by.get("autotune warm")
        met = "not measured (TPE never got there)" if tpe == math.inf and cold == math.inf else (
            "met" if cold <= tpe / 2 else "missed")
        verdict = [f"cold {_count(cold, trials)} vs TPE {_count(tpe, trials)}: {met} (target: at most half)"]
        if warm:
            verdict.append(f"warm {_count(warm['trials_to_95'], trials)}: "
                           + ("met" if warm["trials_to_95"] <= 3 else "missed") + " (target: at most 3)")
        floor = by["autotune cold"]["noise_floor"]
        verdict.append(f"A/A spread of the table {by['autotune cold']['noise_cv']:.1%}, autotune's noise floor "
                       f"{floor:.0%} (a change is kept when its interval clears it)")
        console.print(f"{table}: " + "; ".join(verdict), highlight=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=Path, default=TABLES)
    parser.add_argument("--only", action="append", help="only this table (file stem; repeatable)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=48,
                        help="trials each strategy may run (the cap on 'trials to 95%%'; default 48)")
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)  # a log or a pipe: one line per row
    paths = sorted(args.tables.glob("*.json"))
    tables = [Table.load(p) for p in paths]
    if not tables:
        console.print(f"no table in {args.tables}: record some with `python -m bench.record`")
        return 2
    rows = evaluate(tables, args.seeds, args.trials, console, args.only)
    print_table(rows, args.trials, args.seeds, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
