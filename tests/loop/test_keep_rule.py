"""The loop's keep rule on records: the pooled spread, and a look the time budget makes the last."""

from __future__ import annotations

from autotune.loop import keep_rule


def run(speed: float) -> dict:
    return {"samples_per_s": speed, "step_times_s": [4 / speed] * 4}


def test_the_spread_pools_the_baseline_and_every_trials_groups():
    records = [{"measurements": [run(10.0), run(10.4), run(9.6)]}, {"measurements": [run(20.0)]}]
    groups = keep_rule.groups(records, [run(10.0), run(10.1)], [run(12.0), run(12.1)])
    assert len(groups) == 3 and groups[0] == [10.0, 10.4, 9.6]


def test_a_look_the_budget_makes_the_last_spends_the_false_keep_rate_left():
    records = [{"measurements": [run(10.0), run(10.3), run(9.7)]}]
    incumbent, candidate = [run(10.0), run(10.2)], [run(11.6), run(11.4)]
    open_ended = keep_rule.verdict(records, incumbent, candidate, 16)
    last = keep_rule.verdict(records, incumbent, candidate, 16, last=True)
    # The same runs: the last look may use all of alpha, an early one a quarter (looks at 2, 4, 8, 16).
    assert open_ended.confidence > last.confidence and last.low > open_ended.low
    assert open_ended.verdict == "no difference" and last.verdict == "faster"


def test_a_noisy_machine_gets_more_pairs_and_a_quiet_one_keeps_the_budgets():
    quiet = [{"measurements": [run(10.0), run(10.1), run(9.9), run(10.05)]}]
    noisy = [{"measurements": [run(10.0), run(11.5), run(8.7), run(10.9), run(9.1)]}]
    assert keep_rule.most_pairs(quiet, 16) == 16
    most = keep_rule.most_pairs(noisy, 16)
    assert most > 16
    # The pairs added are worth it: the smallest gain they can show is smaller than with sixteen.
    assert keep_rule.detectable(noisy, most) < keep_rule.detectable(noisy, 16)


def test_a_real_gain_that_starts_on_two_unlucky_pairs_gets_more_pairs():
    # A 12% machine: a 10% gain measured x0.93 on its first two pairs is still within reach of the
    # pairs left, and is given them; one measured x0.5 is not worth them.
    noisy = [{"measurements": [run(10.0), run(11.5), run(8.7), run(10.9), run(9.1)]}]
    incumbent = [run(10.0), run(10.6)]
    unlucky = [run(9.3), run(9.9)]
    assert keep_rule.could_close(noisy, incumbent, unlucky, 62, 64)
    assert not keep_rule.could_close(noisy, incumbent, [run(5.0), run(5.2)], 62, 64)
