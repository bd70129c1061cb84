"""The keep rule: is a candidate faster than its incumbent, on runs so far, with a known error rate?

Each run of a config yields one throughput over the same rows in the same order, so the step-to-step
workload cancels in a run's total and what differs between two runs of one config is the run-to-run
noise (start-up state, clocks, neighbours; on a CPU also the step noise that a run's total sums).
The test works on log throughputs of one trial's interleaved runs:

    d = mean(log candidate) - mean(log incumbent),   se = s * sqrt(1/n_candidate + 1/n_incumbent)

where s is the run-to-run spread pooled over every group of runs of one config measured so far in
this tune (the baseline's repeats, each trial's candidate runs and its incumbent's), so it rests on
many degrees of freedom, not on three baseline runs: a floor from three runs is itself noisy (2.6%
on one run of a script, 9.4% on the next) and asking an interval to clear 1 + that floor counted
the same noise twice.

Sequential: the trial looks after 2, 4, 8 and 16 pairs while undecided (LOOKS); each look tests at
alpha / looks (Bonferroni), so waiting for a lucky draw cannot push the false-keep rate above alpha. Kept: the one-sided lower bound clears log(1 + margin) (margin: a
run's clock resolution). Undecided stays open while looks remain. Slower: the upper bound is below 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

# One-sided false-keep rate of the whole sequence of looks on an A/A comparison.
ALPHA = 0.005
# Pair counts at which a trial is decided (the last look is at the most pairs a trial may take).
LOOKS = (2, 4, 8, 16)
# A spread never trusted below this (relative): even a GPU's runs differ by a few tenths of a percent.
MIN_SPREAD = 0.002


@dataclass(frozen=True)
class Spread:
    """Pooled run-to-run spread of log throughput, and its degrees of freedom."""

    sd: float
    df: int


def pooled(groups: list[list[float]]) -> Spread:
    """Pooled within-group SD of log(throughput): each group holds runs of one config measured close in
    time (one trial's candidate runs, its incumbent's, the baseline's repeats)."""
    squares, df = 0.0, 0
    for group in groups:
        if len(group) < 2:
            continue
        logs = [math.log(v) for v in group]
        mean = sum(logs) / len(logs)
        squares += sum((v - mean) ** 2 for v in logs)
        df += len(logs) - 1
    if df == 0:
        return Spread(MIN_SPREAD, 0)
    return Spread(max(MIN_SPREAD, math.sqrt(squares / df)), df)


def prior_group(sd: float, df: int) -> list[float]:
    """A group of throughputs whose log spread is `sd` over `df` degrees of freedom (rounded down to
    even): what a spread learnt before this tune adds to the pooled one, as if measured here."""
    half = max(0, int(df) // 2)
    return [math.exp(sd), math.exp(-sd)] * half + [1.0] if half else []


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for up to EXACT_DF degrees of freedom (bisection on the closed-form
    distribution function of an integer df), the Cornish-Fisher expansion about the normal beyond (within
    0.1% there). The expansion alone is 20% short at 2 df and 0.1% one-sided, where a single run decides."""
    z = NormalDist().inv_cdf(p)
    if df <= 0:
        return z * 10  # no spread estimate at all: nothing is decided
    if df <= EXACT_DF and p > 0.5:
        return _exact(p, int(df))
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


EXACT_DF = 30


@functools.lru_cache(maxsize=4096)
def _exact(p: float, df: int) -> float:
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer df >= 1 (the finite sums over cos(theta), theta =
    atan(t / sqrt(df)), for odd and even df)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2 / math.pi * (theta + (s * math.cos(theta) * total if df > 1 else 0.0))
    else:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    return (1 + inside) / 2


@dataclass(frozen=True)
class Verdict:
    ratio: float
    low: float
    high: float
    verdict: str        # "faster" | "slower" | "no difference"
    reason: str


def decide(incumbent: list[float], candidate: list[float], spread: Spread, margin: float, looks: float,
           alpha: float = ALPHA) -> Verdict:
    """The verdict on one trial's throughputs (samples/s per run), at a look that spends alpha / `looks`."""
    if not incumbent or not candidate:
        raise ValueError("decide needs at least one run on each side")
    d = sum(math.log(v) for v in candidate) / len(candidate) - sum(math.log(v) for v in incumbent) / len(incumbent)
    se = spread.sd * math.sqrt(1 / len(candidate) + 1 / len(incumbent))
    t = t_quantile(1 - alpha / max(1, looks), spread.df)
    low, high = math.exp(d - t * se), math.exp(d + t * se)
    shown = (f"x{math.exp(d):.3f} [{low:.3f}, {high:.3f}] ({len(candidate)} vs {len(incumbent)} runs, run-to-run "
             f"spread {spread.sd:.2%} over {spread.df} df, one-sided {alpha / max(1, looks):.2%} per look)")
    if low > 1 + margin:
        return Verdict(math.exp(d), low, high, "faster", f"{shown} clears the noise and the {margin:.2%} margin")
    if high < 1:
        return Verdict(math.exp(d), low, high, "slower", f"{shown} is slower beyond the noise")
    return Verdict(math.exp(d), low, high, "no difference",
                   f"{shown} is not faster beyond the noise and the {margin:.2%} margin")
