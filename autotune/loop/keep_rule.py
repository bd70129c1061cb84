"""The loop's keep rule on a trial's runs: probes.sequential fed from the tune's records.

The run-to-run spread is pooled over every group of runs of one config this tune measured: the
baseline's repeats, each earlier trial's candidate runs (its records), and this trial's incumbent
and candidate runs. The margin a gain must clear is one run's clock resolution (a scheduler slice over
the run's time, as probes.stats), not an A/A floor: the spread is already in the interval.
"""

from __future__ import annotations

import math
from typing import Any

from ..probes import sequential, stats

# One run says "not worth confirming" only when it is slower beyond this one-sided level: a screen
# that discards on any ratio below 1 loses a quarter of real 10% gains at a CPU's run-to-run noise.
SCREEN_ALPHA = 0.05
# More pairs are spent only on what could be shown at least this much faster: a 0.3% gain is real but
# not worth sixteen more runs.
WORTH = 0.01
# The gain the most pairs of a trial should be able to show: on a noisy machine (a 2-core CPU, 10% and
# more run to run) sixteen pairs cannot show a 10% gain, so a real one was discarded six times in seven.
GOAL = 0.05
# How many times the step budget's pairs may double to reach GOAL (4x: 64 pairs where it allows 16).
DOUBLINGS = 2
# Standard errors of slack when asking whether more pairs could decide a trial: at one, a real 10%
# gain on a 12% machine that started on two unlucky pairs (x0.93) was given up in a third of the
# discards (`python -m bench.extra_pairs`). Stopping early only ever turns a keep into a discard, so
# the slack costs runs, never false keeps: at 12% noise 1.5 gives 40% discards of a 10% gain for
# 91 runs a tune, 2.0 gives 30% for 143 (1.0: 48% for 52); at 2% and 0.5% it costs a few runs.
SLACK = 1.5


def groups(records: list[dict[str, Any]], *current: list[dict[str, Any]]) -> list[list[float]]:
    """Samples/s of each group of runs of one config: the records' own runs and this trial's."""
    out = [[m["samples_per_s"] for m in r.get("measurements") or ()] for r in records]
    return [g for g in out + [[m["samples_per_s"] for m in c] for c in current] if len(g) > 1]


def margin(records: list[dict[str, Any]]) -> float:
    runs = [sum(m["step_times_s"]) for m in records[0]["measurements"]] if records else []
    return stats.SCHED_SLICE_S / sorted(runs)[len(runs) // 2] if runs else 0.0


def looks(most: int) -> tuple[int, ...]:
    """The pair counts at which a trial is decided: doubling (2, 4, 8, 16) up to the most it may take.
    Few looks keep each one's share of the false-keep rate large; doubling keeps late ones worth it."""
    return tuple(n for n in sequential.LOOKS if n < most) + (most,)


def verdict(records: list[dict[str, Any]], incumbent: list[dict[str, Any]], candidate: list[dict[str, Any]],
            most: int, last: bool = False) -> stats.Comparison:
    """The sequential verdict on this trial's runs (`most`: the pairs it may take), as the loop's
    Comparison; between two looks it stays undecided. `last`: the time budget allows no more pairs,
    so this look spends what the looks not taken would have (the budget, not the data, ends it)."""
    spread = sequential.pooled(groups(records, incumbent, candidate))
    floor = margin(records)
    points = looks(most)
    share = len(points)
    if last and len(candidate) < most:
        share = len(points) / (len(points) - sum(n < len(candidate) for n in points))
    v = sequential.decide([m["samples_per_s"] for m in incumbent], [m["samples_per_s"] for m in candidate],
                          spread, floor, share)
    confidence = 1 - 2 * sequential.ALPHA / share
    if not last and len(candidate) not in points and len(candidate) < most and v.verdict != "no difference":
        nxt = min(n for n in points if n > len(candidate))
        return stats.Comparison(v.ratio, v.low, v.high, confidence, floor, "no difference",
                                f"{v.reason.split(')')[0]}): undecided until the look at {nxt} pairs")
    return stats.Comparison(v.ratio, v.low, v.high, confidence, floor, v.verdict, v.reason)


def detectable(records: list[dict[str, Any]], most: int) -> float:
    """The smallest gain the rule could keep with the most pairs at the spread pooled so far (and never
    under WORTH): the noise floor of this rule, below which a proposal's expected improvement is not
    worth a trial."""
    spread = sequential.pooled(groups(records))
    t = sequential.t_quantile(1 - sequential.ALPHA / len(looks(most)), spread.df + 2 * most)
    return max(margin(records), WORTH, math.expm1(t * spread.sd * math.sqrt(2 / most)))


def most_pairs(records: list[dict[str, Any]], least: int) -> int:
    """The most pairs the next trial may take: `least`, doubled while the spread pooled so far leaves
    a GOAL-sized gain undetectable (at most DOUBLINGS times). Fixed from earlier trials' runs before
    the trial's own, so its looks and each one's share of the false-keep rate are set in advance."""
    most = least
    for _ in range(DOUBLINGS):
        if detectable(records, most) <= GOAL:
            break
        most *= 2
    return most


def could_close(records: list[dict[str, Any]], incumbent: list[dict[str, Any]], candidate: list[dict[str, Any]],
                left: int, most: int) -> bool:
    """Could `left` more pairs clear the margin, were the true ratio SLACK standard errors above the one
    measured so far? Stopping early when not only ever turns a keep into a discard (no false keep is
    added); the slack keeps a real gain that started on unlucky pairs open."""
    spread = sequential.pooled(groups(records, incumbent, candidate))
    inc = [m["samples_per_s"] for m in incumbent]
    cand = [m["samples_per_s"] for m in candidate]
    d = sum(math.log(v) for v in cand) / len(cand) - sum(math.log(v) for v in inc) / len(inc)
    now = spread.sd * math.sqrt(1 / len(cand) + 1 / len(inc))
    end = spread.sd * math.sqrt(1 / (len(cand) + left) + 1 / (len(inc) + left))
    t = sequential.t_quantile(1 - sequential.ALPHA / len(looks(most)), spread.df + 2 * left)
    return d + SLACK * now - t * end > math.log1p(max(margin(records), WORTH))


def screen(records: list[dict[str, Any]], reference: list[list[float]], measurement: dict[str, Any],
           rows_per_step: int) -> stats.Comparison:
    """After one run: "slower" when the candidate is slower than the incumbent's runs beyond the noise
    (one-sided SCREEN_ALPHA), else "no difference": worth confirming on interleaved pairs."""
    spread = sequential.pooled(groups(records))
    incumbent = [stats.throughput(run, rows_per_step) for run in reference]
    d = math.log(stats.throughput(measurement["step_times_s"], rows_per_step)) - sum(
        math.log(v) for v in incumbent) / len(incumbent)
    t = sequential.t_quantile(1 - SCREEN_ALPHA, spread.df) * spread.sd * math.sqrt(1 + 1 / len(incumbent))
    low, high = math.exp(d - t), math.exp(d + t)
    shown = (f"x{math.exp(d):.3f} [{low:.3f}, {high:.3f}] (1 vs {len(incumbent)} runs, run-to-run spread "
             f"{spread.sd:.2%} over {spread.df} df)")
    slower = high < 1
    return stats.Comparison(math.exp(d), low, high, 1 - 2 * SCREEN_ALPHA, margin(records),
                            "slower" if slower else "no difference",
                            f"{shown} is slower beyond the noise" if slower else f"{shown}: worth confirming")
