"""The search strategies compared on a table: autotune (cold and warm) and what users would otherwise run.

Each returns a Trace: after trial t (1-based), the config it would hand the user (its pick) and how
many device runs it has used so far, baseline runs included. Every strategy starts from the user's
config, already measured (autotune measures it three times for the A/A noise, the others once).
A peer picks the config with the best observed run (one noisy run each); autotune picks its incumbent.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

from autotune.config.job import Job
from autotune.config.knobs import Knobs
from autotune.reasoner import key
from autotune.loop.outcome import Outcome
from autotune.loop.tuner import Tuner

from . import byo_setup
from .replay import ReplayExecutor, Table


@dataclass
class Trace:
    picks: list[Knobs] = field(default_factory=list)   # after trial 1, 2, ...
    runs: list[int] = field(default_factory=list)       # device runs used by then
    seconds: list[float] = field(default_factory=list)  # device seconds used by then (recorded wall times)
    noise_floor: float | None = None                    # autotune's A/A floor on this seed's noise
    outside: int = 0                                    # configs asked for that no rule allows (not in the grid)
    stop_reason: str = ""


class Greedy:
    """Measure configs one run each and keep the best observed: the bookkeeping every peer shares."""

    def __init__(self, table: Table, seed: int) -> None:
        self.table, self.noise = table, random.Random(seed + 10_000)
        self.pick, self.best = table.start, table.observe(table.start, self.noise) or 0.0
        self.trace = Trace()
        self.seen = {key(table.start): self.best}
        self.spent = table.wall(table.start)  # the baseline's one run

    def measure(self, knobs: Knobs) -> float | None:
        observed = self.table.observe(knobs, self.noise)
        self.seen[key(knobs)] = observed
        self.spent += self.table.wall(knobs)
        if observed is not None and observed > self.best:
            self.pick, self.best = knobs, observed
        self.trace.picks.append(self.pick)
        self.trace.runs.append(len(self.trace.picks) + 1)
        self.trace.seconds.append(self.spent)
        return observed


def _in_order(table: Table, seed: int, trials: int, order: list[Knobs]) -> Trace:
    greedy = Greedy(table, seed)
    for knobs in [k for k in order if k != table.start][:trials]:
        greedy.measure(knobs)
    return greedy.trace


def random_search(table: Table, seed: int, trials: int) -> Trace:
    order = table.configs
    random.Random(seed).shuffle(order)
    return _in_order(table, seed, trials, order)


def grid_order(table: Table, seed: int, trials: int) -> Trace:
    """The grid as a nested loop writes it (the last knob varies fastest)."""
    return _in_order(table, seed, trials, table.configs)


def optuna_tpe(table: Table, seed: int, trials: int) -> Trace:
    """Optuna's TPE sampler with its defaults, the user's config enqueued first. A config TPE proposes
    again is answered from what it saw, at no device time; one that cannot run here (not in the table,
    such as flash attention in fp32) is told as failed without counting, as a user would skip it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    greedy = Greedy(table, seed)
    study.enqueue_trial({name: getattr(table.start, name) for name in table.grid})
    attempts = 0
    while len(greedy.trace.picks) < trials and attempts < 50 * trials:
        if len(greedy.seen) >= len(table.entries):
            break  # a table smaller than the trials, all of it measured: TPE could only propose it again
        attempts += 1
        trial = study.ask()
        values = {}
        for name, choices in table.grid.items():
            if name == "group_by_length" and values.get("padding", table.start.padding) != "longest":
                continue  # conditional, as TPE's define-by-run space allows
            values[name] = trial.suggest_categorical(name, choices)
        knobs = Knobs.from_dict({**table.start.to_dict(), **values})
        if table.entry(knobs) is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        observed = greedy.seen[key(knobs)] if key(knobs) in greedy.seen else greedy.measure(knobs)
        if observed is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # it ran and failed (OOM, crash)
        else:
            study.tell(trial, observed)
    return greedy.trace


# The order DeepSpeed's autotuner fixes after the micro-batch: the biggest memory and speed levers first.
FIXED_ORDER = ("padding", "attn_implementation", "precision", "gradient_checkpointing", "optim", "group_by_length")


def deepspeed_like(table: Table, seed: int, trials: int) -> Trace:
    """Like DeepSpeed's autotuner: the micro-batch first (larger until one fails, the fastest that ran
    kept), then each other knob in a fixed order, every value, keeping a faster observed config."""
    greedy = Greedy(table, seed)

    def budget_left() -> bool:
        return len(greedy.trace.picks) < trials

    sizes = sorted(v for v in table.grid.get("per_device_train_batch_size", ())
                   if v > table.start.per_device_train_batch_size)
    for size in sizes:
        if not budget_left() or greedy.measure(table.start.with_change("per_device_train_batch_size", size)) is None:
            break
    for name in (n for n in FIXED_ORDER if n in table.grid):
        base = greedy.pick
        for value in table.grid[name]:
            candidate = base.with_change(name, value)
            if budget_left() and value != getattr(base, name) and table.entry(candidate) is not None \
                    and key(candidate) not in greedy.seen:
                greedy.measure(candidate)
    return greedy.trace


Loop = Callable[[Job, ReplayExecutor, Path], Tuner]


def replay_tune(table: Table, seed: int, trials: int, kb: Path | None = None,
                loop: Loop = Tuner) -> tuple[Outcome, ReplayExecutor]:
    """One tune of autotune's own loop on the table, and the replay that answered its runs (which counts
    them per trial): cold with an empty knowledge base (the shipped priors only), warm with a copy of
    `kb`. It may try only the grid's knobs (`knobs=`). `loop` makes the tuner (bench.best_path's puts
    the table's best path first)."""
    with tempfile.TemporaryDirectory() as tmp, _place(table, Path(tmp)):
        folder = Path(tmp) / "kb"
        if kb is not None:
            shutil.copytree(kb, folder)
        executor = ReplayExecutor(table, seed, strict=False)
        return loop(_job(table, trials, folder), executor, Path(tmp) / "runs").run(), executor


def autotune_search(table: Table, seed: int, trials: int, kb: Path | None = None, loop: Loop = Tuner) -> Trace:
    """`replay_tune`'s tune as a strategy's trace: its pick, device runs and seconds after each trial."""
    outcome, executor = replay_tune(table, seed, trials, kb, loop)
    trace = Trace(noise_floor=outcome.noise_floor, outside=len(executor.outside), stop_reason=outcome.stop_reason)
    pick = table.start
    used, spent = executor.runs_by_trial.get(0, 0), executor.seconds_by_trial.get(0, 0.0)
    for record in outcome.records[1:]:
        if record["decision"] == "keep":
            pick = Knobs.from_dict(record["knobs"])
        used += executor.runs_by_trial.get(record["trial"], 0)
        spent += executor.seconds_by_trial.get(record["trial"], 0.0)
        trace.picks.append(pick)
        trace.runs.append(used)
        trace.seconds.append(spent)
    return trace


def learn_from(tables: list[Table], trials: int, kb: Path, seed: int = 0) -> None:
    """A knowledge base that has seen these tables: one autotune run on each (its noise drawn by `seed`)."""
    for table in tables:
        with tempfile.TemporaryDirectory() as tmp, _place(table, Path(tmp)):
            Tuner(_job(table, trials, kb), ReplayExecutor(table, seed, strict=False), Path(tmp)).run()


def _place(table: Table, root: Path) -> ContextManager[Path]:
    """Where the replayed tuner runs: for a bring-your-own script, a fresh copy of bench/byo it reads the
    script and its configs from (the tuner reads them to know what the script can say; nothing runs)."""
    byo = table.data.get("byo")
    return byo_setup.scratch(root, byo["setup"]) if byo is not None else nullcontext(root)


def _job(table: Table, trials: int, kb: Path) -> Job:
    job = Job.from_dict(table.data["job"])
    if job.script is not None:  # named inside the copy (_place), the working folder now
        job = dataclasses.replace(job, script=dataclasses.replace(job.script, path=str(Path(job.script.path).resolve())))
    return dataclasses.replace(job, run=f"bench-{table.name}", max_trials=trials, time_budget_s=None, kb=str(kb),
                               only=tuple(table.grid), smoke=False, llm=None)


PEERS: dict[str, Callable[[Table, int, int], Trace]] = {
    "random": random_search, "grid order": grid_order, "optuna TPE": optuna_tpe, "DeepSpeed-like": deepspeed_like,
}
