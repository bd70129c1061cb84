"""Is a candidate config really faster than the incumbent? Throughput, the A/A noise floor, comparison.

Inputs are the per-step wall times (seconds) of trials, one list per run (one fresh process). Every
run of a tuning session times the same rows in the same order, so step i is the same workload in
every run and every config: the statistics below pair steps by index, which cancels the step-to-step
workload differences (long rows, short rows) and leaves only the noise of the instrument.

Two sources of noise, handled separately:
- within a run (one step hit by a page fault, a preemption): the bootstrap resamples step indices;
- between runs (process start-up, allocator layout, clock state, neighbours): the bootstrap resamples
  runs on each side, and the noise floor is the margin for what a few runs cannot show.

How the loop uses it: noise_floor() once, from the baseline's repeats (>= 3 fresh runs of the user's
config); then, for each candidate, compare() on NEW interleaved runs of incumbent and candidate with
that floor. The floor is not recomputed from the compared runs: fitted to them, it would hide noise.

Standard library and numpy only: the tuner's parent process never imports torch.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Smallest wall-clock difference one run cannot tell from no difference at all: Linux's scheduler
# lets another runnable task take the CPU for a base slice (EEVDF `sched_base_slice`, 0.75 ms by
# default since 6.6; CFS `sched_min_granularity` before, same default) at any step, invisibly to the
# timed process. One slice per run, relative to the run's total time, is the resolution of a run's
# throughput; the noise floor never goes below it (0.2% for a 0.35 s CPU run, 0.01% for 10 s GPU runs).
SCHED_SLICE_S = 0.75e-3


@dataclass(frozen=True)
class Comparison:
    ratio: float        # candidate throughput / incumbent throughput (median of runs); > 1 is faster
    low: float          # confidence interval on the ratio (hierarchical, paired bootstrap)
    high: float
    confidence: float
    noise_floor: float  # relative margin: faster needs low > 1 + floor, slower needs high < 1 - floor
    verdict: str        # "faster" | "slower" | "no difference"
    reason: str         # one line for the user


def throughput(step_times: Sequence[float], rows_per_step: int) -> float:
    """Rows per second of one run: rows_per_step x steps / total time (not a mean of per-step rates,
    which would over-weight the short steps)."""
    return rows_per_step * len(step_times) / math.fsum(step_times)


def impossible(step_times: list[float], resolution: float | None = None) -> str | None:
    """Why a run's step times cannot be a real reading, or None when they can.

    A step shorter than the clock's resolution (`time.perf_counter`'s unless given) was not timed:
    zero, negative, NaN and infinity are all caught here, and so is a run with no steps at all.
    """
    if resolution is None:
        resolution = time.get_clock_info("perf_counter").resolution
    if len(step_times) == 0:
        return "no step times: the run measured nothing"
    for i, t in enumerate(step_times):
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            return f"step {i} time is {t!r}, not a number"
        if math.isnan(t):
            return f"step {i} time is NaN"
        if math.isinf(t):
            return f"step {i} time is infinite"
        if t <= 0:
            return f"step {i} took {t:g} s: a step cannot take zero or negative time"
        if t < resolution:
            return f"step {i} took {t:g} s, below the clock's {resolution:g} s resolution"
    return None


def _matrix(runs: list[list[float]], side: str) -> np.ndarray:
    """Runs as a (runs x steps) array. Runs of unequal length keep their common first steps, because
    pairing is by step index and a step that only some runs have has no partner."""
    if not runs:
        raise ValueError(f"{side}: no runs")
    for i, run in enumerate(runs):
        bad = impossible(run)
        if bad:
            raise ValueError(f"{side} run {i}: {bad} (check impossible() before comparing)")
    steps = min(len(run) for run in runs)
    return np.array([run[:steps] for run in runs], dtype=float)


def _interval(inc: np.ndarray, cand: np.ndarray, confidence: float, resamples: int,
              seed: int) -> tuple[float, float, float]:
    """Point ratio and percentile interval of median(candidate tp) / median(incumbent tp).

    Each resample draws step indices with replacement, the SAME indices for every run on both sides
    (step i is one workload everywhere: pairing keeps the workload mix identical in numerator and
    denominator), then draws runs with replacement on each side. rows_per_step cancels in the ratio.
    """
    steps = min(inc.shape[1], cand.shape[1])
    inc, cand = inc[:, :steps], cand[:, :steps]
    ratio = float(np.median(steps / cand.sum(axis=1)) / np.median(steps / inc.sum(axis=1)))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, steps, size=(resamples, steps))
    weights = np.zeros((resamples, steps))
    np.add.at(weights, (np.arange(resamples)[:, None], picks), 1.0)   # how often each step is drawn
    medians = []
    for side in (inc, cand):
        totals = weights @ side.T                                     # (resamples, runs) run times
        chosen = rng.integers(0, side.shape[0], size=totals.shape)    # resample runs on this side
        medians.append(np.median(steps / np.take_along_axis(totals, chosen, axis=1), axis=1))
    ratios = medians[1] / medians[0]
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return ratio, float(low), float(high)


def noise_floor(runs: list[list[float]], confidence: float = 0.95, resamples: int = 2000, seed: int = 0,
                slice_s: float = SCHED_SLICE_S) -> float:
    """The A/A noise floor of one config from its repeated runs (the baseline's repeats).

    Definition: for every ordered pair (a, b) of distinct runs, take the paired step bootstrap
    interval of tp(b) / tp(a) -- the interval `compare([a], [b])` reports -- and its excess, the
    distance by which that interval misses 1 (max(low - 1, 1 - high, 0)). The floor is the
    `confidence` quantile of the excesses: how far one process of a config can sit from another
    BEYOND what its step-to-step noise explains (start-up state, memory layout, clocks, neighbours),
    i.e. the run-to-run offset that resampling a few runs in `compare` cannot see. A comparison of
    two groups of the same config then rarely (about 1 - confidence) has low > 1 + floor; single-run
    pairs make it conservative for groups of 3 (recorded A/A, 3 vs 3, floor from 3 other runs:
    "no difference" in 199 of 200 draws).

    It is never below one scheduler slice over the median run's time (see SCHED_SLICE_S): the
    resolution of a wall-clock run. With one run there are no pairs and that minimum is returned:
    the loop should measure at least 3 baseline runs (2 give a single pair, one draw of the spread).
    """
    mat = _matrix(runs, "baseline")
    minimum = slice_s / float(np.median(mat.sum(axis=1)))
    excess = [0.0]
    for a, b in itertools.permutations(range(mat.shape[0]), 2):
        _, low, high = _interval(mat[[a]], mat[[b]], confidence, resamples, seed)
        excess.append(max(low - 1.0, 1.0 - high, 0.0))
    spread = float(np.quantile(excess[1:], confidence)) if len(excess) > 1 else 0.0
    return max(minimum, spread)


def compare(incumbent_runs: list[list[float]], candidate_runs: list[list[float]], rows_per_step: int,
            noise_floor: float, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> Comparison:
    """Candidate against incumbent: ratio of the medians of per-run throughputs, a hierarchical
    paired bootstrap interval on it, and a verdict that needs the whole interval beyond the noise
    floor. Deterministic for a given seed. Raises ValueError on runs that `impossible` rejects:
    the loop records those as impossible readings before it gets here.
    """
    if rows_per_step <= 0:
        raise ValueError(f"rows_per_step must be positive, got {rows_per_step}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    inc, cand = _matrix(incumbent_runs, "incumbent"), _matrix(candidate_runs, "candidate")
    ratio, low, high = _interval(inc, cand, confidence, resamples, seed)
    shown = f"x{ratio:.3f} [{low:.3f}, {high:.3f}] ({confidence:.0%}, {len(candidate_runs)} vs {len(incumbent_runs)} runs)"
    if low > 1.0 + noise_floor:
        verdict, reason = "faster", f"{shown} clears the {noise_floor:.2%} noise floor"
    elif high < 1.0 - noise_floor:
        verdict, reason = "slower", f"{shown} is below the {noise_floor:.2%} noise floor"
    else:
        verdict, reason = "no difference", f"{shown} does not clear the {noise_floor:.2%} noise floor"
    return Comparison(ratio, low, high, confidence, noise_floor, verdict, reason)
