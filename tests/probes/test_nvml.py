"""Clock-event reasons decide whether a GPU timing window counts; on the CPU there are no readings."""

from __future__ import annotations

from autotune.probes import nvml


def sample(reasons: int, clock: float = 1980.0) -> dict:
    return {"sm_clock_mhz": clock, "mem_clock_mhz": 2619.0, "power_w": 650.0, "temperature_c": 61.0,
            "reasons": reasons}


def test_software_power_cap_is_recorded_not_rejected():
    summary = nvml.summarize([sample(0), sample(nvml.SW_POWER_CAP), sample(0)])
    assert summary["software_power_cap"] is True
    assert summary["throttle_reasons"] == []


def test_thermal_slowdown_or_power_brake_invalidates_the_window():
    summary = nvml.summarize([sample(0), sample(0x40, clock=1200.0), sample(0x80 | nvml.SW_POWER_CAP)])
    assert summary["throttle_reasons"] == ["hardware thermal slowdown", "hardware power brake"]
    assert summary["sm_clock_mhz"]["min"] == 1200.0 and summary["samples"] == 3


def test_each_invalidating_bit_is_named():
    assert nvml.judge(0x8) == ["hardware slowdown"]
    assert nvml.judge(0x20) == ["software thermal slowdown"]
    assert nvml.judge(0x1 | 0x4) == []


def test_a_cpu_window_has_no_readings():
    with nvml.Sampler("cpu") as sampler:
        pass
    assert sampler.summary() is None
