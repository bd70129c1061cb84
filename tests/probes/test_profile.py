"""The time breakdown: phase shares of a step, plus padding and idle shares."""

from __future__ import annotations

import types

import pytest

from autotune.probes.profile import PhaseTimer, breakdown


def test_phases_add_up_to_the_step_and_other_takes_the_rest(monkeypatch):
    # A fake clock: each phase lasts what the test says, whatever the machine's load does to a sleep.
    from autotune.probes import profile

    now = [100.0]
    monkeypatch.setattr(profile, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    phases = PhaseTimer()
    began = now[0]
    phases.start()
    for phase, seconds in (("data_wait", 0.02), ("forward", 0.04), ("backward", 0.06), ("optimizer", 0.02)):
        now[0] += seconds
        phases.mark(phase)
    now[0] += 0.02  # host time between phases
    phases.add_step(now[0] - began)
    shares = breakdown(phases.totals(), padded_tokens=300, real_tokens=100)
    assert shares["backward_share"] > shares["forward_share"] > shares["data_wait_share"]
    total = sum(shares[f"{p}_share"] for p in ("data_wait", "forward", "backward", "optimizer", "other"))
    assert total == pytest.approx(1.0, abs=0.01)
    assert shares["other_share"] > 0.05
    assert shares["idle_share"] == pytest.approx(shares["data_wait_share"] + shares["other_share"], abs=0.01)
    assert shares["padding_share"] == 0.75


def test_no_profiled_step_gives_no_breakdown():
    assert breakdown(PhaseTimer().totals(), 0, 10) is None
