"""Step timing statistics: the noise of repeated measurements and warm-up detection."""

from __future__ import annotations

import pytest

from autotune.probes.timing import SETTLED_SPREAD, StepTimer, median, relative_spread, warmed_up


def test_relative_spread_is_range_over_median():
    assert relative_spread([1.0, 1.1, 0.9]) == pytest.approx(0.2)
    assert relative_spread([10.0, 12.0]) == pytest.approx(2.0 / 11.0)
    assert relative_spread([3.0, 3.0, 3.0]) == 0.0


def test_relative_spread_of_one_value_is_zero():
    assert relative_spread([5.0]) == 0.0
    assert relative_spread([]) == 0.0


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0


def test_two_close_times_are_warmed_up():
    assert warmed_up([0.50, 0.52]) is True
    assert warmed_up([9.0, 0.50, 0.51]) is True


def test_a_falling_compile_like_sequence_is_not_warmed_up():
    assert warmed_up([30.0, 5.0, 1.5]) is False
    assert warmed_up([30.0]) is False
    assert warmed_up([]) is False


def test_warm_up_threshold_is_the_settled_spread():
    assert warmed_up([1.0, 1.0 + 0.9 * SETTLED_SPREAD]) is True
    assert warmed_up([1.0, 1.0 + 1.5 * SETTLED_SPREAD]) is False
    assert warmed_up([1.0 + 1.5 * SETTLED_SPREAD, 1.0]) is False


def test_step_timer_synchronises_before_every_reading():
    calls = []
    timer = StepTimer(lambda: calls.append("sync"))
    timer.start()
    first = timer.lap()
    second = timer.lap()
    assert calls == ["sync", "sync", "sync"]
    assert first >= 0.0 and second >= 0.0
