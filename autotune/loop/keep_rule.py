"""The loop's keep rule on a trial's runs: probes.sequential fed from the tune's records.

The run-to-run spread is pooled over every group of runs of one config this tune measured: the
baseline's repeats, each earlier trial's candidate runs (its records), and this trial's incumbent
and candidate runs. The margin a gain must clear is one run's clock resolution (a scheduler slice over
the run's time, as probes.stats), not an A/A floor: the spread is already in the interval.

A trial's first and second runs are looks of their own (`reuse_look`): against every run of the
incumbent so far (reused across trials, one group of the pooled spread, so drift between them widens
the interval), they keep a change whose gain is far beyond the spread (a DRIFT allowance on top of the
margin), and discard one that is slower, or cannot be `min_gain` faster, beyond the noise. They take
two shares of the false-keep rate from the pair looks, and only where the spread pooled before the
trial lets them keep a gain of at most REUSE_MAX: where they could keep only what no single change
gains, the pairs keep their whole share; there the look after the second run only discards (a
discard adds no false keep).

The pair looks count the incumbent's earlier runs too (`incumbent_side`), while a drift check holds:
this trial's incumbent runs agree with them within the noise (two-sided DRIFT_ALPHA). Sixteen earlier
runs beside two fresh ones halve a look's standard error on the incumbent's side, so a noisy machine
decides in fewer pairs; where the machine drifted, the look falls back to this trial's runs alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

from ..config.measurement import Measurement
from ..config.records import TrialRecord
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
# A first-run keep compares with the incumbent's runs of earlier trials: the machine may have drifted
# since (clocks, heat, neighbours), so the gain must clear the margin by this much more.
DRIFT = 0.01
# The gain worth a trial's device time (the job's `min_gain` overrides it): a change that cannot be
# this much faster beyond the noise stops being measured.
MIN_GAIN = 0.03
# Looks on the first runs against the incumbent's reused runs (after the first and the second run),
# spent only where the spread pooled before the trial lets them keep a gain of at most REUSE_MAX: the
# size of the larger single changes (a micro-batch or padding change: x2 to x5 on the recorded tables).
# At 2.0 a 12% machine gave them no share until ~30 df had pooled, so an x5 micro-batch change took
# four runs where one decides it; at 8 the pairs' false discards of 5-20% gains are unchanged at 12%
# and the tunes took fewer runs (`python -m bench.extra_pairs`, `python -m bench.search`).
REUSE_LOOKS = 2
REUSE_MAX = 8.0
# The drift check before a pair look counts the incumbent's earlier runs: two-sided, so a trial whose
# incumbent runs moved either way beyond this level is judged on its own runs only. Larger is stricter.
DRIFT_ALPHA = 0.10


def groups(records: Sequence[TrialRecord], *current: Sequence[Measurement], skip: int | None = None) -> list[list[float]]:
    """Samples/s of each group of runs of one config: the records' own runs (but trial `skip`'s) and
    this trial's, and the spread of past runs on this device the baseline's record brought
    (`spread_prior`, a few df)."""
    out = [[m.samples_per_s for m in r.measurements] for r in records if skip is None or r.trial != skip]
    prior = records[0].spread_prior if records else None
    if prior:
        out.append(sequential.prior_group(prior.sd, prior.df))
    return [g for g in out + [[m.samples_per_s for m in c] for c in current] if len(g) > 1]


def margin(records: Sequence[TrialRecord]) -> float:
    runs = [sum(m.step_times_s) for m in records[0].measurements] if records else []
    return stats.SCHED_SLICE_S / sorted(runs)[len(runs) // 2] if runs else 0.0


def looks(most: int) -> tuple[int, ...]:
    """The pair counts at which a trial is decided: doubling (2, 4, 8, 16) up to the most it may take.
    Few looks keep each one's share of the false-keep rate large; doubling keeps late ones worth it."""
    return tuple(n for n in sequential.LOOKS if n < most) + (most,)


def reusing(records: Sequence[TrialRecord], most: int) -> bool:
    """Whether this trial's first runs are looks of their own (set from the runs before the trial): the
    gain one run could show against three of the incumbent is at most REUSE_MAX."""
    spread = sequential.pooled(groups(records))
    t = sequential.t_quantile(1 - sequential.ALPHA / (len(looks(most)) + REUSE_LOOKS), spread.df)
    need = math.exp(t * spread.sd * math.sqrt(1 + 1 / 3)) * (1 + margin(records)) * (1 + DRIFT)
    return need <= REUSE_MAX


def shares(records: Sequence[TrialRecord], most: int) -> int:
    """How many shares the false-keep rate of a trial is split into: its looks."""
    return len(looks(most)) + (REUSE_LOOKS if reusing(records, most) else 0)


def incumbent_side(records: Sequence[TrialRecord], earlier: Sequence[float], incumbent: Sequence[Measurement],
                   candidate: Sequence[Measurement], skip: int | None) -> tuple[list[float], list[list[float]]]:
    """The incumbent's samples/s a pair look compares with, and the groups its spread pools: the earlier
    runs (`earlier`, of trial `skip` and the trials since) and this trial's, while they agree within the
    noise; else this trial's alone. The spread keeps them two groups: pooled as one, it would be small
    exactly when the check passes (runs that agree), and a look taken on it would keep more than its share."""
    fresh, mine = [m.samples_per_s for m in incumbent], [m.samples_per_s for m in candidate]
    alone = groups(records, incumbent, candidate)
    if not earlier or not fresh:
        return fresh, alone
    split_groups = [g for g in groups(records, skip=skip) + [list(earlier), fresh, mine] if len(g) > 1]
    split = sequential.pooled(split_groups)
    d = sum(math.log(v) for v in fresh) / len(fresh) - sum(math.log(v) for v in earlier) / len(earlier)
    se = split.sd * math.sqrt(1 / len(fresh) + 1 / len(earlier))
    if abs(d) > sequential.t_quantile(1 - DRIFT_ALPHA / 2, split.df) * se:
        return fresh, alone
    return list(earlier) + fresh, split_groups


def verdict(records: Sequence[TrialRecord], incumbent: Sequence[Measurement], candidate: Sequence[Measurement],
            most: int, last: bool = False, earlier: Sequence[float] = (), skip: int | None = None) -> stats.Comparison:
    """The sequential verdict on this trial's runs (`most`: the pairs it may take), as the loop's
    Comparison; between two looks it stays undecided. `last`: the time budget allows no more pairs,
    so this look spends what the looks not taken would have (the budget, not the data, ends it).
    `earlier`: the incumbent's samples/s before this trial (from trial `skip` on), counted while the
    drift check holds (`incumbent_side`)."""
    inc, pooled_groups = incumbent_side(records, earlier, incumbent, candidate, skip)
    spread = sequential.pooled(pooled_groups)
    floor = margin(records)
    points = looks(most)
    share: float = shares(records, most)
    if last and len(candidate) < most:
        share = share / (len(points) - sum(n < len(candidate) for n in points))
    v = sequential.decide(inc, [m.samples_per_s for m in candidate], spread, floor, share)
    confidence = 1 - 2 * sequential.ALPHA / share
    if not last and len(candidate) not in points and len(candidate) < most and v.verdict != "no difference":
        nxt = min(n for n in points if n > len(candidate))
        return stats.Comparison(v.ratio, v.low, v.high, confidence, floor, "no difference",
                                f"{v.reason.split(')')[0]}): undecided until the look at {nxt} pairs")
    return stats.Comparison(v.ratio, v.low, v.high, confidence, floor, v.verdict, v.reason)


def detectable(records: Sequence[TrialRecord], most: int) -> float:
    """The smallest gain the rule could keep with the most pairs at the spread pooled so far (and never
    under WORTH): the noise floor of this rule, below which a proposal's expected improvement is not
    worth a trial."""
    spread = sequential.pooled(groups(records))
    t = sequential.t_quantile(1 - sequential.ALPHA / shares(records, most), spread.df + 2 * most)
    return max(margin(records), WORTH, math.expm1(t * spread.sd * math.sqrt(2 / most)))


def most_pairs(records: Sequence[TrialRecord], least: int) -> int:
    """The most pairs the next trial may take: `least`, doubled while the spread pooled so far leaves
    a GOAL-sized gain undetectable (at most DOUBLINGS times). Fixed from earlier trials' runs before
    the trial's own, so its looks and each one's share of the false-keep rate are set in advance."""
    most = least
    for _ in range(DOUBLINGS):
        if detectable(records, most) <= GOAL:
            break
        most *= 2
    return most


def could_close(records: Sequence[TrialRecord], incumbent: Sequence[Measurement], candidate: Sequence[Measurement],
                left: int, most: int, earlier: Sequence[float] = (), skip: int | None = None) -> bool:
    """Could `left` more pairs clear the margin, were the true ratio SLACK standard errors above the one
    measured so far? Stopping early when not only ever turns a keep into a discard (no false keep is
    added); the slack keeps a real gain that started on unlucky pairs open. `earlier`, `skip`: as `verdict`."""
    inc, pooled_groups = incumbent_side(records, earlier, incumbent, candidate, skip)
    spread = sequential.pooled(pooled_groups)
    cand = [m.samples_per_s for m in candidate]
    d = sum(math.log(v) for v in cand) / len(cand) - sum(math.log(v) for v in inc) / len(inc)
    now = spread.sd * math.sqrt(1 / len(cand) + 1 / len(inc))
    end = spread.sd * math.sqrt(1 / (len(cand) + left) + 1 / (len(inc) + left))
    t = sequential.t_quantile(1 - sequential.ALPHA / shares(records, most), spread.df + 2 * left)
    return d + SLACK * now - t * end > math.log1p(max(margin(records), WORTH))


def reuse_look(records: Sequence[TrialRecord], reference: list[list[float]], incumbent_trial: int | None,
               candidate: Sequence[Measurement], rows_per_step: int, most: int, min_gain: float = MIN_GAIN
               ) -> stats.Comparison:
    """After a trial's first (or second) run, against the incumbent's runs so far (`reference`, from
    trial `incumbent_trial`): "faster" when the gain clears the margin and DRIFT beyond the noise at its
    share of the false-keep rate (where `reusing` gives it one); "slower" when it is slower, or cannot
    be `min_gain` faster, beyond the noise (one-sided SCREEN_ALPHA); else "no difference"."""
    incumbent = [stats.throughput(run, rows_per_step) for run in reference]
    mine = [stats.throughput(m.step_times_s, rows_per_step) for m in candidate]
    spread = sequential.pooled(groups(records, skip=incumbent_trial) + [incumbent, mine])
    d = sum(math.log(v) for v in mine) / len(mine) - sum(math.log(v) for v in incumbent) / len(incumbent)
    se = spread.sd * math.sqrt(1 / len(mine) + 1 / len(incumbent))
    t = sequential.t_quantile(1 - SCREEN_ALPHA, spread.df) * se
    share = shares(records, most)
    keep = sequential.t_quantile(1 - sequential.ALPHA / share, spread.df) * se
    low, high = math.exp(d - t), math.exp(d + t)
    floor = margin(records)
    runs = f"{len(mine)} vs {len(incumbent)} runs"
    shown = f"x{math.exp(d):.3f} [{low:.3f}, {high:.3f}] ({runs}, run-to-run spread {spread.sd:.2%} over {spread.df} df)"
    if reusing(records, most) and math.exp(d - keep) > (1 + floor) * (1 + DRIFT):
        return stats.Comparison(math.exp(d), math.exp(d - keep), high, 1 - 2 * sequential.ALPHA / share, floor,
                                "faster", f"x{math.exp(d):.3f}, at least x{math.exp(d - keep):.3f} ({runs} of the "
                                f"incumbent so far, run-to-run spread {spread.sd:.2%} over {spread.df} df, one-sided "
                                f"{sequential.ALPHA / share:.2%}): clears the noise, the {floor:.2%} margin and "
                                f"{DRIFT:.0%} for drift since the incumbent's runs")
    if high < 1:
        return stats.Comparison(math.exp(d), low, high, 1 - 2 * SCREEN_ALPHA, floor, "slower",
                                f"{shown} is slower beyond the noise")
    if high < 1 + min_gain:
        return stats.Comparison(math.exp(d), low, high, 1 - 2 * SCREEN_ALPHA, floor, "slower",
                                f"{shown} cannot be {min_gain:.0%} faster (min_gain) beyond the noise: not worth "
                                "more runs")
    return stats.Comparison(math.exp(d), low, high, 1 - 2 * SCREEN_ALPHA, floor, "no difference",
                            f"{shown}: worth confirming")


class KeepRule(Protocol):
    """How a trial's runs decide keep or discard: what judge.py asks of a rule. `most` is the most pairs
    the trial may take (`most_pairs`, fixed before its runs); `floor` the baseline's A/A noise floor."""

    @property
    def looks_at_second_run(self) -> bool:
        """Whether a trial's second run is a look of its own, taken before the incumbent's paired runs."""

    def most_pairs(self, records: Sequence[TrialRecord], least: int) -> int:
        """The most interleaved pairs the next trial may take, `least` the step budget's."""

    def smallest_gain(self, records: Sequence[TrialRecord], most: int, floor: float) -> float:
        """The smallest gain the rule can show: a proposal expected to gain less is not tried."""

    def screen(self, records: Sequence[TrialRecord], reference: list[list[float]], measurement: Measurement,
               rows_per_step: int, floor: float, incumbent_trial: int | None, most: int,
               min_gain: float) -> stats.Comparison:
        """One candidate run against the incumbent's runs on its card (`reference`, step times)."""

    def second_look(self, records: Sequence[TrialRecord], reference: list[list[float]],
                    candidate: Sequence[Measurement], rows_per_step: int, incumbent_trial: int, most: int,
                    min_gain: float) -> stats.Comparison | None:
        """The look after the second run, or None where the rule takes none."""

    def kept_on_one_run(self, verdict: stats.Comparison) -> bool:
        """Whether the screen's verdict keeps the change without pairs."""

    def screened_out(self, verdict: stats.Comparison) -> bool:
        """Whether the screen's verdict says the change is not worth confirming."""

    def compare(self, records: Sequence[TrialRecord], incumbent: Sequence[Measurement],
                candidate: Sequence[Measurement], rows_per_step: int, floor: float, most: int,
                last: bool, earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> stats.Comparison:
        """The verdict on the trial's interleaved runs; `last`: the time budget allows no further pair;
        `earlier`: the incumbent's samples/s on this card before the trial (from trial `incumbent_trial`),
        which a rule may count beside the trial's own incumbent runs."""

    def could_close(self, records: Sequence[TrialRecord], verdict: stats.Comparison,
                    incumbent: Sequence[Measurement], candidate: Sequence[Measurement], left: int,
                    most: int, earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> bool:
        """Whether `left` more pairs could decide what the pairs so far leave open."""


@dataclass(frozen=True)
class Sequential:
    """The loop's keep rule (this module): a run-level test on the spread pooled from the tune's runs,
    looked at after the first and second runs and at doubling pair counts."""

    looks_at_second_run: bool = True

    def most_pairs(self, records: Sequence[TrialRecord], least: int) -> int:
        return most_pairs(records, least)

    def smallest_gain(self, records: Sequence[TrialRecord], most: int, floor: float) -> float:
        return detectable(records, most)

    def screen(self, records: Sequence[TrialRecord], reference: list[list[float]], measurement: Measurement,
               rows_per_step: int, floor: float, incumbent_trial: int | None, most: int,
               min_gain: float) -> stats.Comparison:
        # A look of its own, which may keep a gain far beyond the noise.
        return reuse_look(records, reference, incumbent_trial, [measurement], rows_per_step, most, min_gain)

    def second_look(self, records: Sequence[TrialRecord], reference: list[list[float]],
                    candidate: Sequence[Measurement], rows_per_step: int, incumbent_trial: int, most: int,
                    min_gain: float) -> stats.Comparison | None:
        # Where the spread so far leaves this look no share (reusing), reuse_look only discards.
        return reuse_look(records, reference, incumbent_trial, candidate, rows_per_step, most, min_gain)

    def kept_on_one_run(self, verdict: stats.Comparison) -> bool:
        return verdict.verdict == "faster"

    def screened_out(self, verdict: stats.Comparison) -> bool:
        return verdict.verdict == "slower"

    def compare(self, records: Sequence[TrialRecord], incumbent: Sequence[Measurement],
                candidate: Sequence[Measurement], rows_per_step: int, floor: float, most: int,
                last: bool, earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> stats.Comparison:
        # The look after which the time budget allows no further pair spends the looks left.
        return verdict(records, incumbent, candidate, most, last=last, earlier=earlier, skip=incumbent_trial)

    def could_close(self, records: Sequence[TrialRecord], verdict: stats.Comparison,
                    incumbent: Sequence[Measurement], candidate: Sequence[Measurement], left: int,
                    most: int, earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> bool:
        return could_close(records, incumbent, candidate, left, most, earlier, incumbent_trial)


SEQUENTIAL = Sequential()
