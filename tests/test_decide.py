"""The trial right after a kept warm start: the cold search's first step on the user's config, against it."""

from __future__ import annotations

from autotune.loop.decide import warm_check
from autotune.reasoner import Hypothesis, key
from tests.reasoner.test_links import START, baseline, trial

WARM = START.with_change("padding", "padding_free").with_change("per_device_train_batch_size", 4)
FIRST = Hypothesis("per_device_train_batch_size", 8, "the ranking's first change on the user's config")


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
