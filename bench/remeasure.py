"""A recorded table's configs measured again for real, interleaved round by round.

    python -m bench.remeasure TABLE CHANGE [CHANGE ...] [--rounds 12] [--tables bench/tables]

A table holds one to three runs per config (bench/record.py refines only its top), and `bench.search`
scores every strategy against the table's best. Where a figure hangs on how far apart two configs
are, this measures them again through the same runner and executor the recorder uses: each CHANGE
(`knob=value+knob=value` on the table's user config; `start` for the user config itself; each a
config the table completed) once per round, the order reversed every other round so drift hits each
alike. Only rounds where every config completed count. It prints each config's median samples/s and
its ratio to the first CHANGE's (x1.000 for the first itself), the geometric mean over rounds with a
95% interval (the per-round log ratios' t interval), beside the ratio the table records.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from autotune.config.knobs import CATALOG, Knobs, parse_knob_value
from autotune.config.records import parse_change
from autotune.util.errors import AutotuneError
from autotune.probes.sequential import t_quantile

from .replay import TABLES, Table


def config_of(start: Knobs, change: str) -> Knobs:
    """`change` (`knob=value+...`, or `start`) applied to the table's user config; ValueError, in one
    line, when a knob is unknown or a value does not parse."""
    if change == "start":
        return start
    knobs = start
    for knob, text in parse_change(change):
        if knob not in CATALOG:
            raise ValueError(f"unknown knob {knob!r} in {change!r}: one of {', '.join(sorted(CATALOG))}")
        try:
            knobs = knobs.with_change(knob, parse_knob_value(knob, text))
        except AutotuneError as error:
            raise ValueError(f"{change!r}: {error}") from None
    return knobs


def paired_ratio(speeds: list[float], reference: list[float]) -> tuple[float, float, float] | None:
    """The geometric mean of per-round ratios of `speeds` to `reference` (the same rounds), with a 95%
    t interval on the mean log ratio (the round's shared drift cancels in each ratio); None with fewer
    than two rounds, where there is no interval."""
    logs = [math.log(a / b) for a, b in zip(speeds, reference)]
    if len(logs) < 2:
        return None
    mean = statistics.fmean(logs)
    half = t_quantile(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def remeasure(table: Table, changes: list[str], rounds: int) -> list[str]:
    """Measure each change's config `rounds` times, interleaved; the lines to print."""
    from .record import STEPS, session  # the real runner and executor: only here, not for --help
    from .workloads import WORKLOADS

    configs = {change: config_of(table.start, change) for change in changes}
    speeds: dict[str, list[float]] = {change: [] for change in changes}
    with session(WORKLOADS[table.data["workload"]], STEPS) as (tuner, _):
        tuner.frame()
        for number in range(rounds):
            order = changes if number % 2 == 0 else changes[::-1]
            measured = {change: tuner.measure(configs[change], 1, "remeasure") for change in order}
            if all(result.state == "complete" for result in measured.values()):  # a round compares whole
                for change, result in measured.items():
                    speeds[change].append(result.measured().samples_per_s)
            print(f"round {number + 1}/{rounds}: " + ", ".join(f"{change} {_shown(result)}" for change, result
                                                                 in measured.items()), file=sys.stderr, flush=True)
    reference, first = speeds[changes[0]], table.speed(configs[changes[0]]) or math.nan
    lines = [f"{len(reference)} whole rounds of {rounds}; ratios to {changes[0]}"]
    for change in changes:
        paired = paired_ratio(speeds[change], reference)
        if paired is None:
            lines.append(f"{change}: {len(reference)} whole round(s), too few for an interval")
            continue
        ratio, low, high = paired
        recorded = (table.speed(configs[change]) or math.nan) / first
        lines.append(f"{change}: median {statistics.median(speeds[change]):.2f} samples/s, x{ratio:.3f} "
                     f"[{low:.3f}, {high:.3f}] (table: x{recorded:.3f})")
    return lines


def _shown(result: Any) -> str:
    """A run's samples/s, or the state it ended in."""
    return f"{result.measured().samples_per_s:.2f}" if result.state == "complete" else result.state


def checked(table: Table, changes: list[str]) -> str | None:
    """Why `changes` cannot be measured on `table` (one line), or None."""
    if len(set(changes)) != len(changes):
        return f"a CHANGE given twice: {', '.join(sorted({c for c in changes if changes.count(c) > 1}))}"
    for change in changes:
        try:
            knobs = config_of(table.start, change)
        except ValueError as error:
            return str(error)
        if table.speed(knobs) is None:
            return f"{change}: not a config the table {table.name} completed (outside its grid, or OOM or crash)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", help="a table's name (file stem in --tables)")
    parser.add_argument("changes", nargs="+", help="configs as changes on the table's user config, or `start`")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--tables", type=Path, default=TABLES)
    args = parser.parse_args(argv)
    path = args.tables / f"{args.table}.json"
    if not path.exists():
        names = ", ".join(p.stem for p in sorted(args.tables.glob("*.json")))
        parser.exit(2, f"no table {args.table} in {args.tables}: one of {names}\n")
    try:
        table = Table.load(path)
    except (OSError, ValueError, KeyError) as error:
        parser.exit(2, f"{path}: not a table bench.record wrote ({type(error).__name__}: {error})\n")
    from .workloads import WORKLOADS

    if table.data["workload"] not in WORKLOADS:
        parser.exit(2, f"no workload {table.data['workload']} in bench/workloads.py to measure table {args.table} "
                       "with\n")
    why = checked(table, args.changes)
    if why:
        parser.exit(2, f"{why}\n")
    if args.rounds < 2:
        parser.exit(2, f"--rounds {args.rounds}: at least 2, for an interval\n")
    for line in remeasure(table, args.changes, args.rounds):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
