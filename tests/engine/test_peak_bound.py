"""A trial's MFU over the recorded peak: judged again against the device's fastest product now."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_spec, tiny_job

from autotune.config.messages import TrialSpec
from autotune.engine.steps import StepLog, TrialFault, accepted

SPEC = TrialSpec.from_dict(make_spec(Path("unused"), job=tiny_job(effective_batch=2), measure_steps=2,
                                     peaks={"matmul_flops": {"fp32": 1.0}}))


def _measurement(mfu: float) -> dict:
    return {"device": "cpu", "mfu": mfu, "hfu": mfu * 1.25, "peak_flops": 1.0, "nvml": None}


def test_a_trial_within_the_fastest_product_stands_and_says_which_peak_bounds_it():
    measurement = _measurement(mfu=50.0)  # 50 FLOP/s against a recorded peak of 1: any CPU multiplies faster
    result = accepted(SPEC, StepLog(times=[0.1, 0.1], measured_rows=4), measurement)["measurement"]
    again = result["peak_remeasured"]
    assert again["bound"] == "fp32" and again["recorded_mfu"] == 50.0 and again["recorded_flops"] == 1.0
    assert result["peak_flops"] == again["flops"] > 1e6
    assert result["mfu"] == pytest.approx(50.0 / again["flops"]) and result["hfu"] == pytest.approx(1.25 * result["mfu"])


def test_a_trial_beyond_the_fastest_product_is_an_impossible_reading():
    measurement = _measurement(mfu=1e18)  # an exaflop on a CPU: the timing is wrong, whatever the peak
    with pytest.raises(TrialFault) as fault:
        accepted(SPEC, StepLog(times=[0.1, 0.1], measured_rows=4), measurement)
    assert fault.value.state == "invalid" and "the timing is wrong" in fault.value.reason
    assert fault.value.details["measurement_rejected"]["mfu"] == 1e18
