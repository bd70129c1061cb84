"""autotune's keep rule along a table's best path: what its evidence costs when the order is perfect.

`bench.search` scores whole tunes: their device runs to 95% of the best mix two costs, the trials the
search order spends before it finds the right changes and the runs the keep rule needs to confirm
each of them. This strategy removes the first. It knows the table: before each trial it puts the next
step of the table's best path first, and the loop measures and decides it as it would any change
(the same baseline, keep rule, noise and records). What it spends to 95% is the keep rule's share of a
tune; what cold spends beyond it is the search order's.

The best path: the fewest trials, each of one change or two made together (autotune tries pairs too),
each faster than the config before it on the recorded speeds, from the user's config to one within 5% of
the table's best; among as short ones, the one whose smallest step is largest (the cheapest to confirm).
A step moves the micro-batch up at most MAX_JUMP times, as the ranking's largest jump does, and passes
the loop's own checks (`only=`, the frame's limits): the path holds moves autotune makes itself. Where
noise discards a step, the tune goes on with the loop's own ranking from there, as any tune would.

The split is approximate: the keep rule pools the run-to-run spread over every trial so far, and the
path's steps come first, with the least pooled; a tune's later trials decide on more.
"""

from __future__ import annotations

from typing import Any

from pathlib import Path

from autotune.config.job import Job
from autotune.config.knobs import Knobs
from autotune.loop.outcome import Asked
from autotune.loop.tuner import Tuner
from autotune.reasoner import Hypothesis, key
from autotune.reasoner.rank import MAX_JUMP

from .replay import SHARE_OF_BEST, ReplayExecutor, Table
from .strategies import Loop, Trace, autotune_search

MOST_CHANGES = 2  # a step changes at most this many knobs: one trial of a single change or of a pair


def best_path(table: Table) -> list[Knobs]:
    """The configs after each step of the table's best path (empty where the user's config is within 5%)."""
    speeds = {key(c): (c, s) for c in table.configs if (s := table.speed(c))}
    target = SHARE_OF_BEST * table.best_speed
    start = table.start
    if key(start) not in speeds:
        return []  # the user's config did not run: no step can be faster than it
    # Breadth first: each layer holds, per config, the path there whose smallest step gain is largest.
    layer: dict[Any, tuple[list[Knobs], float]] = {key(start): ([], float("inf"))}
    seen = set(layer)
    while layer:
        done = [(path, least) for k, (path, least) in layer.items() if (speeds.get(k) or (None, 0.0))[1] >= target]
        if done:
            return max(done, key=lambda found: found[1])[0]
        following: dict[Any, tuple[list[Knobs], float]] = {}
        for k, (path, least) in layer.items():
            here = path[-1] if path else start
            speed = table.speed(here) or 0.0
            for step, (config, faster) in speeds.items():
                if step in seen or faster <= speed or not takes(here, config):
                    continue
                gain = min(least, faster / speed)
                if step not in following or following[step][1] < gain:
                    following[step] = (path + [config], gain)
        seen |= set(following)
        layer = following
    return []


def takes(here: Knobs, there: Knobs) -> bool:
    """Whether one trial of autotune's goes from `here` to `there`: one or two changes, the micro-batch
    up at most MAX_JUMP times (rank._largest_fitting's cap)."""
    changed = here.diff(there)
    micro = changed.get("per_device_train_batch_size")
    return 1 <= len(changed) <= MOST_CHANGES and (micro is None or micro[1] <= MAX_JUMP * micro[0])


def step_hypothesis(table: Table, here: Knobs, there: Knobs) -> Hypothesis:
    """One step of the path as the loop's hypothesis: its recorded ratio as the expected one."""
    (knob, (_, value)), *rest = here.diff(there).items()
    ratio = (table.speed(there) or 0.0) / (table.speed(here) or 1.0)
    return Hypothesis(knob, value, "the next step of the table's best path (bench.best_path)", p_helps=1.0,
                      expected_ratio=ratio, also=tuple((k, v) for k, (_, v) in rest))


class PathTuner(Tuner):
    """The loop, with the next step of `path` put first where the incumbent is on it; stops once the
    incumbent is within 5% of the table's best (what is scored has been reached)."""

    def __init__(self, table: Table, path: list[Knobs], job: Job, executor: ReplayExecutor, root: Path) -> None:
        super().__init__(job, executor, root)
        self.table, self.path = table, path

    def ask(self) -> Asked:
        asked = super().ask()
        if asked.stop:
            return asked
        here = self.state.incumbent.knobs
        if (self.table.speed(here) or 0.0) >= SHARE_OF_BEST * self.table.best_speed:
            return Asked([], asked.skipped, stop="the table's best path is done: the pick is within 5% of the best")
        on_path = [key(self.table.start)] + [key(c) for c in self.path]
        if key(here) not in on_path[:-1]:
            return asked
        there = self.path[on_path.index(key(here))]
        if key(there) in self.state.measured:
            return asked  # noise discarded this step: the loop's own order from here
        allowed = self._allowed([step_hypothesis(self.table, here, there)], [])[0]
        if not allowed:
            return asked  # a step the user or the frame rules out is no move of autotune's
        rest = [h for h in asked.hypotheses if key(h.apply(here)) != key(there)]
        return Asked(allowed + rest, asked.skipped, asked.spent)


def path_loop(table: Table, path: list[Knobs] | None = None) -> Loop:
    """Makes a PathTuner on `table`'s best path (`path`, where the caller found it already)."""
    steps = best_path(table) if path is None else path
    return lambda job, executor, root: PathTuner(table, steps, job, executor, root)


def path_search(table: Table, seed: int, trials: int, path: list[Knobs] | None = None) -> Trace:
    """A cold tune (the shipped priors only) with the table's best path (`path`, found once a table by
    the caller where it has it) put first."""
    return autotune_search(table, seed, trials, loop=path_loop(table, path))
