"""The sequential keep rule: its false-keep rate on A/A comparisons holds over every look, and a real
gain at GPU-like noise is kept on two pairs."""

from __future__ import annotations

import math
import random

import pytest

from autotune.probes.sequential import ALPHA, Spread, decide, pooled, t_quantile


def test_the_pooled_spread_is_the_within_group_spread_of_log_throughput():
    spread = pooled([[10.0, 10.0 * math.exp(0.02)], [5.0, 5.0 * math.exp(-0.02)], [7.0]])
    assert spread.df == 2 and spread.sd == pytest.approx(0.02 / math.sqrt(2), rel=1e-6)
    assert pooled([[3.0]]).df == 0


def test_t_quantiles_are_exact_at_the_few_degrees_of_freedom_a_first_run_decides_on():
    # Where a single run may keep a change, the spread rests on two or three df: the table's values.
    assert t_quantile(0.975, 2) == pytest.approx(4.303, abs=0.001)
    assert t_quantile(0.995, 1) == pytest.approx(63.657, abs=0.01)
    assert t_quantile(0.999, 3) == pytest.approx(10.215, abs=0.005)
    assert t_quantile(0.9995, 12) == pytest.approx(4.318, abs=0.005)


def test_t_quantiles_match_the_table_where_the_rule_uses_them():
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=0.01)
    assert t_quantile(0.99, 5) == pytest.approx(3.365, abs=0.05)
    assert t_quantile(0.975, 1000) == pytest.approx(1.96, abs=0.01)


@pytest.mark.parametrize("noise", [0.12, 0.005])
def test_waiting_for_a_lucky_draw_does_not_push_a_and_a_keeps_above_alpha(noise):
    rng, keeps, looks, trials = random.Random(1), 0, 7, 2000
    for _ in range(trials):
        inc, cand = [], []
        pool = [[math.exp(rng.gauss(0, noise)) for _ in range(3)]]  # the baseline's repeats
        for _ in range(2 + looks - 1):
            inc.append(math.exp(rng.gauss(0, noise)))
            cand.append(math.exp(rng.gauss(0, noise)))
            if len(inc) < 2:
                continue
            verdict = decide(inc, cand, pooled(pool + [inc, cand]), 0.0, looks)
            if verdict.verdict != "no difference":
                keeps += verdict.verdict == "faster"
                break
    assert keeps / trials <= ALPHA


def test_a_ten_percent_gain_at_gpu_noise_is_kept_on_two_pairs_and_a_loss_is_called_slower():
    spread = Spread(0.005, 12)
    assert decide([10.0, 10.05], [11.0, 11.02], spread, 0.001, 7).verdict == "faster"
    assert decide([10.0, 10.05], [9.0, 9.02], spread, 0.001, 7).verdict == "slower"
    assert decide([10.0, 10.05], [10.02, 10.04], spread, 0.001, 7).verdict == "no difference"
