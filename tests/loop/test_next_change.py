"""The trials right after a kept warm start: the cold search's first step on the user's config against it,
where it could win, and the single changes the beliefs support before undoing parts of the warm start."""

from __future__ import annotations

from autotune.kb.claims import Claim
from autotune.loop.next_change import next_hypotheses, warm_check
from autotune.reasoner import Hypothesis, key
from tests.reasoner.test_links import CPU, START, allow_all, baseline, trial

WARM = START.with_change("padding", "padding_free").with_change("per_device_train_batch_size", 4)
# The ranking's first change on the user's config, believed to double the speed if it helps.
FIRST = Hypothesis("per_device_train_batch_size", 8, "the ranking's first change on the user's config",
                   expected_ratio=2.0)


def test_a_kept_warm_start_is_checked_once_against_the_cold_first_step():
    records = [baseline(), trial(1, WARM, "padding=padding_free+per_device_train_batch_size=4", 1.5, "keep",
                                 source="warm_start")]
    check = warm_check(WARM, START, records, {key(START), key(WARM)}, lambda: FIRST)
    # One config: the user's with its first change, so the warm start's padding is undone in the same trial.
    assert check is not None and check.source == "warm_check"   # its own label in the report, split like a warm start
    assert check.apply(WARM) == START.with_change("per_device_train_batch_size", 8)
    assert "padding=max_length" in check.change
    # Once: after the check (kept or not) the rest of the search goes on from what it decided.
    later = records + [trial(2, check.apply(WARM), check.change, 0.8)]
    assert warm_check(WARM, START, later, {key(START), key(WARM)}, lambda: FIRST) is None
    # A cold start (nothing warm kept) is never checked.
    cold = [baseline(), trial(1, WARM, "padding=padding_free", 1.5, "keep")]
    assert warm_check(WARM, START, cold, set(), lambda: FIRST) is None


def test_no_check_where_the_warm_start_measured_more_than_the_cold_first_step_could_bring():
    records = [baseline(), trial(1, WARM, "padding=padding_free+per_device_train_batch_size=4", 4.5, "keep",
                                 source="warm_start")]
    # x4.5 measured against a step believed to give x2.0 if it helps: the check would be a trial expected to lose.
    assert warm_check(WARM, START, records, {key(START), key(WARM)}, lambda: FIRST) is None


FUSED = Hypothesis("optim", "adamw_torch_fused", "a single change the beliefs support here", p_helps=0.6,
                   expected_ratio=1.1, score=0.02)


def _after_warm(claims=(), source="warm_start"):
    records = [baseline(), trial(1, WARM, "padding=padding_free+per_device_train_batch_size=4", 4.5, "keep",
                                 source=source)]
    hypotheses, stop = next_hypotheses(WARM, [FUSED], records, CPU, 8, {key(START), key(WARM)}, claims, {},
                                       0.02, allow_all, [])
    assert stop is None
    return [h.change for h in hypotheses]


def test_a_warm_start_that_measured_well_tries_the_supported_change_before_undoing_its_parts():
    order = _after_warm()
    assert order[0] == FUSED.change
    assert set(order[1:]) == {"padding=max_length", "per_device_train_batch_size=1"}   # still tried, after


def test_a_part_the_beliefs_say_hurts_here_is_undone_first():
    # A claim that padding_free hurts this job (rows of one length): undoing it is what the beliefs expect most of.
    hurts = Claim(id="T-pf", knob="padding", value="padding_free", direction="hurts", ratio=0.7, alpha=8, beta=1)
    order = _after_warm([hurts])
    assert order[0] == "padding=max_length"
    assert order.index(FUSED.change) < order.index("per_device_train_batch_size=1")


def test_a_pooled_change_is_still_checked_part_by_part_first():
    # Each part of a pooled change measured faster here within the noise: the undo trials settle it first.
    assert _after_warm(source="pooled")[-1] == FUSED.change
