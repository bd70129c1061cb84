"""How fast each strategy finds a fast config, replayed on tables of real measurements.

    python -m bench.search [--tables bench/tables] [--seeds 20] [--trials 48] [--only NAME ...]
                           [--noise recorded --noise 0.02 --noise 0.005]

For every table (bench/record.py measured every config of a knob grid on one workload), every noise
level and every strategy: the trials it needs before its pick is within 5% of the table's best config,
the device runs and device seconds (each run's recorded wall time, start-up included) that took, its
pick after 8 trials (recorded samples/s over the user's config), its
final pick's share of the best and the trials it used, as medians over the seeds. Each seed draws other
run-to-run noise and, for the randomised peers, another sampler seed. The noise levels: the A/A spread
the recorder measured (a 2-core CPU: about 12%), 2% (a quiet CPU; a lent H200 showed 1.4-2.6%) and 0.5% (a quiet GPU); the
same recorded configs, only the run-to-run factor's spread changes.

A second table puts autotune beside the best peer of each cell (the fewest device runs to 95%): its
runs and seconds, and autotune's as a ratio of them (below 1: autotune spent less of the device). The
best peer is chosen per cell after the fact; a user picks one tool before knowing the table, so a third
table puts autotune beside each peer over all cells: on how many it needed no more device runs, and on
how many either side never came within 5%.

"autotune, best path" is no peer: the same cold loop with the table's best path put first
(bench/best_path.py). Its device runs are what autotune's keep rule needs to confirm the right changes
at that noise; cold's runs beyond them are what its search order spends finding them.

autotune warm runs with a knowledge base that holds one autotune run on each other table and never
one on the table it is scored on (leave one out). Those runs draw noise too, so what a knowledge base
holds is luck as much as the tables: `--kbs` of them are learned (noise seeds 0, 1, ...), and warm seed
s uses knowledge base s mod kbs. With one, a rule that changed how the other tables' tunes went moved the
warm figures more than its effect on the scored table did.
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table as RichTable

from .best_path import best_path, path_search
from .replay import SHARE_OF_BEST, TABLES, Table
from .strategies import PEERS, Trace, autotune_search, learn_from

CHECKPOINTS = (8,)
NOISE_LEVELS: tuple[float | None, ...] = (None, 0.02, 0.005)  # None: the table's recorded A/A spread
PATH = "autotune, best path"  # the keep rule along the table's best path (bench.best_path): not a peer
KBS = 5  # knowledge bases the warm start is scored over (each learned on the other tables with another noise seed)


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


def seconds_to_best(table: Table, trace: Trace) -> float:
    trials = trials_to_best(table, trace)
    return float(trials) if trials in (0, math.inf) else trace.seconds[int(trials) - 1]


def ratio_at(table: Table, trace: Trace, trials: int) -> float:
    picks = trace.picks[:trials]
    return table.ratio(picks[-1]) if picks else 1.0


def final_share(table: Table, trace: Trace) -> float:
    """The last pick's recorded samples/s as a share of the table's best config."""
    return (table.speed(trace.picks[-1] if trace.picks else table.start) or 0.0) / table.best_speed


def noise_label(cv: float | None) -> str:
    return "recorded" if cv is None else f"{cv:.1%}"


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _count(value: float, limit: int) -> str:
    return f">{limit}" if value == math.inf else f"{value:g}"


def evaluate(tables: list[Table], seeds: int, trials: int, console: Console, only: list[str] | None = None,
             noises: tuple[float | None, ...] = NOISE_LEVELS, kbs: int = KBS) -> list[dict[str, object]]:
    rows = []
    for cv in noises:
        rows += _evaluate([t.with_noise(cv) for t in tables], seeds, trials, console, only, noise_label(cv), kbs)
    return rows


def _evaluate(tables: list[Table], seeds: int, trials: int, console: Console, only: list[str] | None,
              noise: str, kbs: int) -> list[dict[str, object]]:
    rows = []
    for table in tables:
        if only and table.name not in only:
            continue
        strategies: dict[str, Callable[[int], Trace]] = {
            name: (lambda seed, run=run, table=table: run(table, seed, trials)) for name, run in PEERS.items()}
        strategies["autotune cold"] = lambda seed, table=table: autotune_search(table, seed, trials)
        path = best_path(table)  # once a table: every seed replays along the same path
        strategies[PATH] = lambda seed, table=table, path=path: path_search(table, seed, trials, path)
        others = [t for t in tables if t is not table]
        holder = None
        if others:
            holder = tempfile.TemporaryDirectory()
            warm_kbs = [Path(holder.name) / f"kb{k}" for k in range(max(1, min(kbs, seeds)))]
            for k, kb in enumerate(warm_kbs):
                learn_from(others, trials, kb, seed=k)
            strategies["autotune warm"] = (lambda seed, table=table, learned=warm_kbs:
                                           autotune_search(table, seed, trials, learned[seed % len(learned)]))
        for name, run in strategies.items():
            started = time.monotonic()
            traces = [run(seed) for seed in range(seeds)]
            rows.append({
                "table": table.name, "noise": noise, "strategy": name,
                "trials_to_95": _median([trials_to_best(table, t) for t in traces]),
                "runs_to_95": _median([runs_to_best(table, t) for t in traces]),
                "seconds_to_95": _median([seconds_to_best(table, t) for t in traces]),
                **{f"ratio_at_{k}": _median([ratio_at(table, t, k) for t in traces]) for k in CHECKPOINTS},
                "final_share": _median([final_share(table, t) for t in traces]),
                "trials_used": _median([len(t.picks) for t in traces]),
                "outside": sum(t.outside for t in traces),
                "stops": collections.Counter(t.stop_reason.split(":")[0] for t in traces if t.stop_reason),
                "best_ratio": table.best_speed / table.baseline_speed, "seconds": time.monotonic() - started,
                "noise_floor": _median([t.noise_floor for t in traces]) if traces[0].noise_floor is not None else None,
                "noise_cv": table.noise_cv, **({"path_steps": len(path)} if name == PATH else {}),
            })
            console.log(f"{table.name} at {noise} noise: {name} done in {rows[-1]['seconds']:.1f}s")
        if holder is not None:
            holder.cleanup()
    return rows


def print_table(rows: list[dict[str, object]], trials: int, seeds: int, console: Console) -> None:
    out = RichTable(title=f"Search on recorded tables: medians over {seeds} seeds, at most {trials} trials")
    for column in ("table", "noise", "strategy", "trials to 95% of best", "device runs to 95%",
                   "device s to 95%", *(f"pick after {k} trials" for k in CHECKPOINTS), "final pick's share of best",
                   "trials used", "table's best"):
        out.add_column(column, justify="left" if column in ("table", "noise", "strategy") else "right")
    for row in rows:
        out.add_row(row["table"], row["noise"], row["strategy"], _count(row["trials_to_95"], trials),
                    _count(row["runs_to_95"], 999), _seconds(row["seconds_to_95"]),
                    *(f"x{row[f'ratio_at_{k}']:.2f}" for k in CHECKPOINTS),
                    f"{row['final_share']:.1%}", f"{row['trials_used']:g}", f"x{row['best_ratio']:.2f}")
    console.print(out)
    console.print(against_best_peer(rows))
    console.print(against_each_peer(rows))
    for (table, noise), by in _cells(rows).items():
        for line in verdicts(by, trials):
            console.print(f"{table} at {noise} noise: {line}", highlight=False)


def best_peer(by: dict[str, dict[str, object]]) -> dict[str, object]:
    """The peer that reached 95% of the best in the fewest device runs (then seconds)."""
    peers = [row for name, row in by.items() if not name.startswith("autotune")]
    return min(peers, key=lambda r: (r["runs_to_95"], r["seconds_to_95"]))


def _ratio(mine: float, theirs: float) -> str:
    if mine == math.inf or theirs == math.inf:
        return "-" if mine == theirs else ("never" if mine == math.inf else "x0")
    return f"x{mine / theirs:.2f}" if theirs else "-"


def against_best_peer(rows: list[dict[str, object]]) -> RichTable:
    """Per cell: the best peer's device runs and seconds to 95%, and autotune's beside them."""
    out = RichTable(title="Device runs and seconds to 95% of the best: autotune beside the best peer of each cell")
    for column in ("table", "noise", "best peer", "runs", "s", "cold runs", "cold s", "cold/peer runs",
                   "cold/peer s", "warm runs", "warm s", "warm/peer runs", "best-path runs"):
        out.add_column(column, justify="left" if column in ("table", "noise", "best peer") else "right")
    for (table, noise), by in _cells(rows).items():
        if "autotune cold" not in by:
            continue
        peer, cold, warm = best_peer(by), by["autotune cold"], by.get("autotune warm")
        out.add_row(table, noise, peer["strategy"], _count(peer["runs_to_95"], 999), _seconds(peer["seconds_to_95"]),
                    _count(cold["runs_to_95"], 999), _seconds(cold["seconds_to_95"]),
                    _ratio(cold["runs_to_95"], peer["runs_to_95"]), _ratio(cold["seconds_to_95"], peer["seconds_to_95"]),
                    *((_count(warm["runs_to_95"], 999), _seconds(warm["seconds_to_95"]),
                       _ratio(warm["runs_to_95"], peer["runs_to_95"])) if warm else ("-", "-", "-")),
                    _count(by[PATH]["runs_to_95"], 999) if PATH in by else "-")
    return out


def against_each_peer(rows: list[dict[str, object]]) -> RichTable:
    """Per peer, over every cell (table and noise) it shares with autotune: the cells where cold, and
    warm, reached 95% of the best in no more device runs than it (medians over the seeds), and where
    the peer never did (in at least half the seeds); under the table, where cold and warm never did."""
    cells = [by for by in _cells(rows).values() if "autotune cold" in by]
    peers = list(dict.fromkeys(name for by in cells for name in by if not name.startswith("autotune")))
    never = {name: sum(by[name]["runs_to_95"] == math.inf for by in cells if name in by)
             for name in ("autotune cold", "autotune warm")}
    out = RichTable(title="Device runs to 95% of the best: autotune beside each peer, over every cell",
                    caption=f"never within 5% in at least half the seeds: cold on {never['autotune cold']} "
                            f"cells, warm on {never['autotune warm']}")
    for column in ("peer", "cells", "cold: no more runs", "warm: no more runs", "peer never within 5%"):
        out.add_column(column, justify="left" if column == "peer" else "right")
    for peer in peers:
        shared = [by for by in cells if peer in by]
        out.add_row(peer, str(len(shared)), _held(shared, "autotune cold", peer), _held(shared, "autotune warm", peer),
                    str(sum(by[peer]["runs_to_95"] == math.inf for by in shared)))
    return out


def _cells(rows: list[dict[str, object]]) -> dict[tuple[object, object], dict[str, dict[str, object]]]:
    """The rows of each (table, noise) cell, by strategy, cells in the rows' order."""
    cells: dict[tuple[object, object], dict[str, dict[str, object]]] = {}
    for row in rows:
        cells.setdefault((row["table"], row["noise"]), {})[str(row["strategy"])] = row
    return cells


def _held(cells: list[dict[str, dict[str, object]]], name: str, peer: str) -> str:
    """On how many of the cells `name` has, it came within 5% in no more device runs than `peer`."""
    mine = [by for by in cells if name in by]
    held = sum(math.inf > by[name]["runs_to_95"] <= by[peer]["runs_to_95"] for by in mine)  # type: ignore[operator]
    return f"{held} of {len(mine)}" if mine else "-"


def _seconds(value: float) -> str:
    return "never" if value == math.inf else f"{value:.0f}"


def verdicts(by: dict[str, dict[str, object]], trials: int) -> list[str]:
    """The targets on one table at one noise level: autotune cold reaches 95% of the best in no more
    device runs than the best peer and ends within 5% of the best; warm in fewer runs than cold."""
    cold, warm, peer = by["autotune cold"], by.get("autotune warm"), best_peer(by)
    lines = [f"cold {_count(cold['runs_to_95'], 999)} vs {peer['strategy']} {_count(peer['runs_to_95'], 999)} device "
             "runs: " + ("met" if cold["runs_to_95"] <= peer["runs_to_95"] else "missed") + " (target: no more); "
             f"cold's final pick {cold['final_share']:.1%} of the best: "
             + ("met" if cold["final_share"] >= SHARE_OF_BEST else "missed") + " (target: within 5%)"]
    if warm:
        lines.append(f"warm {_count(warm['runs_to_95'], 999)} device runs: "
                     + ("met" if warm["runs_to_95"] < cold["runs_to_95"] else "missed") + " (target: fewer than cold)")
    path = by.get(PATH)
    if path:
        lines.append(f"autotune's keep rule along the table's best path ({path['path_steps']} steps): "
                     f"{_count(path['runs_to_95'], 999)} device runs to 95%, the evidence's share; cold's runs "
                     "beyond it are the search order's")
    for name, row in (("cold", cold), ("warm", warm)):
        if row and row["outside"]:
            lines.append(f"autotune {name} asked {row['outside']} times for a config outside the grid (no rule "
                         "allows it; answered as a crash)")
    lines.append("autotune cold stopped: " + "; ".join(f"{n}x {why}" for why, n in cold["stops"].most_common()))
    floor = cold["noise_floor"]
    lines.append(f"run-to-run spread {cold['noise_cv']:.1%}, autotune's A/A noise floor {floor:.1%} (median)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=Path, default=TABLES)
    parser.add_argument("--only", action="append", help="only this table (file stem; repeatable)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=48,
                        help="trials each strategy may run (the cap on 'trials to 95%%'; default 48)")
    parser.add_argument("--kbs", type=int, default=KBS,
                        help=f"knowledge bases the warm start is scored over, each learned with other noise (default {KBS})")
    parser.add_argument("--noise", action="append", type=_noise,
                        help="run-to-run spread to replay at: 'recorded' or a fraction such as 0.005 (repeatable; "
                             "default: recorded, 0.02 and 0.005)")
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: one line per row
    paths = sorted(args.tables.glob("*.json"))
    tables = [Table.load(p) for p in paths]
    if not tables:
        console.print(f"no table in {args.tables}: record some with `python -m bench.record`")
        return 2
    rows = evaluate(tables, args.seeds, args.trials, console, args.only, tuple(args.noise or NOISE_LEVELS),
                    args.kbs)
    print_table(rows, args.trials, args.seeds, console)
    return 0


def _noise(text: str) -> float | None:
    if text == "recorded":
        return None
    value = float(text)
    if not 0 <= value < 0.5:
        raise argparse.ArgumentTypeError(f"noise {text}: a fraction between 0 and 0.5, such as 0.005, or 'recorded'")
    return value


if __name__ == "__main__":
    raise SystemExit(main())
