"""The loop's keep rule on records: the pooled spread, and a look the time budget makes the last."""

from __future__ import annotations

from autotune.config.measurement import Measurement
from autotune.config.records import TrialRecord
from autotune.loop import keep_rule


def run(speed: float) -> Measurement:
    return Measurement(speed, (4 / speed,) * 4)


def rec(runs: list[Measurement], trial: int = -1, **stored: object) -> TrialRecord:
    """A trial's record holding `runs` (and what else a test stores in it), as the loop reads it."""
    return TrialRecord.from_dict({"trial": trial, "measurements": [m.to_dict() for m in runs], **stored})


def test_the_spread_pools_the_baseline_and_every_trials_groups():
    records = [rec([run(10.0), run(10.4), run(9.6)]), rec([run(20.0)])]
    groups = keep_rule.groups(records, [run(10.0), run(10.1)], [run(12.0), run(12.1)])
    assert len(groups) == 3 and groups[0] == [10.0, 10.4, 9.6]


def test_a_look_the_budget_makes_the_last_spends_the_false_keep_rate_left():
    records = [rec([run(10.0), run(10.3), run(9.7)])]
    incumbent, candidate = [run(10.0), run(10.2)], [run(11.6), run(11.4)]
    open_ended = keep_rule.verdict(records, incumbent, candidate, 16)
    last = keep_rule.verdict(records, incumbent, candidate, 16, last=True)
    # The same runs: the last look may use all of alpha, an early one a quarter (looks at 2, 4, 8, 16).
    assert open_ended.confidence > last.confidence and last.low > open_ended.low
    assert open_ended.verdict == "no difference" and last.verdict == "faster"


def test_a_noisy_machine_gets_more_pairs_and_a_quiet_one_keeps_the_budgets():
    quiet = [rec([run(10.0), run(10.1), run(9.9), run(10.05)])]
    noisy = [rec([run(10.0), run(11.5), run(8.7), run(10.9), run(9.1)])]
    assert keep_rule.most_pairs(quiet, 16) == 16
    most = keep_rule.most_pairs(noisy, 16)
    assert most > 16
    # The pairs added are worth it: the smallest gain they can show is smaller than with sixteen.
    assert keep_rule.detectable(noisy, most) < keep_rule.detectable(noisy, 16)


def test_a_real_gain_that_starts_on_two_unlucky_pairs_gets_more_pairs():
    # A 12% machine: a 10% gain measured x0.93 on its first two pairs is still within reach of the
    # pairs left, and is given them; one measured x0.5 is not worth them.
    noisy = [rec([run(10.0), run(11.5), run(8.7), run(10.9), run(9.1)])]
    incumbent = [run(10.0), run(10.6)]
    unlucky = [run(9.3), run(9.9)]
    assert keep_rule.could_close(noisy, incumbent, unlucky, 62, 64)
    assert not keep_rule.could_close(noisy, incumbent, [run(5.0), run(5.2)], 62, 64)


def _quiet(spread: float, **stored: object) -> list[TrialRecord]:
    return [rec([run(10.0 * (1 + spread * k)) for k in (-1, 0, 1)], 0, **stored)]


def test_one_run_keeps_a_gain_far_beyond_the_spread_and_not_a_modest_one():
    # A GPU-like spread (0.5%): x2 after one run is kept against the incumbent's three runs; x1.03 is
    # left to the pairs, and x0.99 cannot reach min_gain: discarded on that one run.
    records = _quiet(0.005)
    reference = [list(m.step_times_s) for m in records[0].measurements]
    assert keep_rule.reusing(records, 16)
    assert keep_rule.reuse_look(records, reference, 0, [run(20.0)], 1, 16).verdict == "faster"
    assert keep_rule.reuse_look(records, reference, 0, [run(10.3)], 1, 16).verdict == "no difference"
    futile = keep_rule.reuse_look(records, reference, 0, [run(9.9)], 1, 16)
    assert futile.verdict == "slower" and "min_gain" in futile.reason
    # A smaller min_gain keeps measuring it.
    assert keep_rule.reuse_look(records, reference, 0, [run(9.99)], 1, 16, min_gain=0.001).verdict == "no difference"


def test_a_noisy_machine_gives_the_first_runs_no_share_so_the_pairs_keep_theirs():
    quiet, noisy = _quiet(0.005), _quiet(0.12)
    assert keep_rule.shares(quiet, 16) == keep_rule.shares(noisy, 16) + keep_rule.REUSE_LOOKS
    reference = [list(m.step_times_s) for m in noisy[0].measurements]
    assert keep_rule.reuse_look(noisy, reference, 0, [run(20.0)], 1, 16).verdict == "no difference"


def test_the_incumbents_reused_runs_are_one_group_of_the_spread_counted_once():
    # The incumbent's record and its later runs are one group: its record is not counted again.
    records = _quiet(0.005) + [rec([run(12.0), run(12.1)], 1)]
    reference = [list(m.step_times_s) for m in records[0].measurements] + [list(run(10.02).step_times_s)]
    look = keep_rule.reuse_look(records, reference, 0, [run(20.0)], 1, 16)
    assert "over 4 df" in look.reason  # 3 of the incumbent's 4 runs and 1 of trial 1's 2


def test_a_spread_learnt_on_this_device_adds_a_few_df_and_is_kept_with_the_baseline():
    records = _quiet(0.005)
    alone = keep_rule.sequential.pooled(keep_rule.groups(records))
    records = _quiet(0.005, spread_prior={"sd": 0.005, "df": 4, "runs": 8})
    helped = keep_rule.sequential.pooled(keep_rule.groups(records))
    assert helped.df == alone.df + 4 and abs(helped.sd - 0.005) < 0.001
    # Skipping the incumbent's own record (its runs are passed as one group) keeps the prior.
    assert keep_rule.sequential.pooled(keep_rule.groups(records, skip=0)).df == 4


def test_a_second_tune_on_this_device_starts_from_the_first_ones_spread(tmp_path):
    from conftest import tiny_job
    from tests.loop.test_tuner import TableExecutor

    from autotune.loop.learn import PRIOR_DF
    from autotune.loop.tuner import Tuner

    factors = {("padding", "padding_free"): 2.0}
    kb = str(tmp_path / "kb")
    first = Tuner(tiny_job(max_trials=2, run="a", kb=kb), TableExecutor(factors), tmp_path).run()
    assert "spread_prior" not in first.records[0]  # nothing measured on this device before
    # Another job (seed) on the same device: not a replay of the first one.
    second = Tuner(tiny_job(max_trials=2, run="b", kb=kb, seed="1"), TableExecutor(factors), tmp_path).run()
    prior = second.records[0]["spread_prior"]
    assert 0 < prior["df"] <= PRIOR_DF and prior["runs"] >= 3 and prior["sd"] > 0


def test_the_loop_decides_by_the_keep_rule_its_step_budget_names(tmp_path):
    import dataclasses

    from conftest import tiny_job
    from tests.loop.test_tuner import TableExecutor

    from autotune.loop.tuner import Tuner
    from bench.floor_rule import FloorRule

    class ScreensAllOut(FloorRule):
        """The floor rule, but no one run is ever worth confirming."""

        def screened_out(self, verdict):
            return True

    outcomes = {}
    for name, rule in (("floor", FloorRule()), ("screens", ScreensAllOut())):
        # fresh: the second tune measures again rather than replaying the first one's trial
        tuner = Tuner(tiny_job(max_trials=1, run=name), TableExecutor({("padding", "padding_free"): 2.0}), tmp_path,
                      fresh=True)
        tuner.steps = dataclasses.replace(tuner.steps, keep_rule=rule, extra_pairs=2)
        outcomes[name] = tuner.run().records[1]
    assert outcomes["floor"]["decision"] == "keep"   # twice as fast: the floor rule keeps it on its pairs
    screened = outcomes["screens"]
    assert screened["decision"] == "discard" and screened["reason"].startswith("not faster after one run")
    assert len(screened["measurements"]) == 1


def test_a_pair_look_counts_the_incumbents_earlier_runs_while_they_agree_with_this_trials():
    # Twelve earlier runs of the incumbent that agree with this trial's two: the look compares with
    # fourteen, and its spread keeps the earlier runs and this trial's as two groups.
    records = _quiet(0.01) + [rec([run(10.0), run(10.1)], 1)]
    earlier = [10.0 * (1 + 0.01 * k) for k in (-1, 0, 1)] * 4
    fresh, candidate = [run(10.05), run(9.95)], [run(10.6), run(10.5)]
    side, pooled = keep_rule.incumbent_side(records, earlier, fresh, candidate, 1)
    assert len(side) == 14 and [10.05, 9.95] in pooled and earlier in pooled
    alone = keep_rule.verdict(records, fresh, candidate, 16)
    reused = keep_rule.verdict(records, fresh, candidate, 16, earlier=earlier, skip=1)
    assert "2 vs 14 runs" in reused.reason and reused.low > alone.low
    # The machine drifted 8% since: this trial's incumbent runs alone are compared with.
    moved, _ = keep_rule.incumbent_side(records, earlier, [run(10.8), run(10.85)], candidate, 1)
    assert moved == [10.8, 10.85]


def test_a_noisy_machine_discards_a_futile_change_after_two_runs_and_never_keeps_on_them():
    noisy = _quiet(0.12)
    reference = [list(m.step_times_s) for m in noisy[0].measurements] * 4
    assert not keep_rule.reusing(noisy, 16)
    futile = keep_rule.SEQUENTIAL.second_look(noisy, reference, [run(7.0), run(7.2)], 1, 0, 16, keep_rule.MIN_GAIN)
    assert futile is not None and futile.verdict == "slower"
    fast = keep_rule.SEQUENTIAL.second_look(noisy, reference, [run(40.0), run(41.0)], 1, 0, 16, keep_rule.MIN_GAIN)
    assert fast is not None and fast.verdict == "no difference"
