"""NVML readings during the measured window: clocks, power, temperature, clock-event reasons.

A window in which the GPU slowed itself (hardware slowdown, thermal, power brake) measured the
cooling, not the config: it is marked invalid and measured again. The software power cap is normal
under sustained load and is only recorded. Uses `nvidia-ml-py` (`import pynvml`); on a CPU or
without NVML there are no readings and nothing is judged.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, TypedDict

SAMPLE_INTERVAL_S = 0.1
# nvmlClocksEventReason* bits (REFERENCE: NVML clock-event reasons).
SW_POWER_CAP = 0x4
INVALIDATING = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                0x80: "hardware power brake"}


def judge(reasons_seen: int) -> list[str]:
    """Names of the reasons in `reasons_seen` that make a timing window invalid."""
    return [name for bit, name in INVALIDATING.items() if reasons_seen & bit]


class Spread(TypedDict):
    min: float
    median: float
    max: float


class NvmlSummary(TypedDict):
    """A measurement's `nvml`: the window's readings and whether the GPU slowed itself in it."""

    samples: int
    sm_clock_mhz: Spread
    mem_clock_mhz: Spread
    power_w: Spread
    temperature_c: Spread
    reasons_seen: int                 # the clock-event reason bits seen in any sample, or'ed
    software_power_cap: bool
    throttle_reasons: list[str]       # those that make the window invalid (judge)


def summarize(samples: list[dict[str, float]]) -> NvmlSummary | None:
    if not samples:
        return None
    seen = 0
    for sample in samples:
        seen |= int(sample["reasons"])

    def spread(key: str) -> Spread:
        values = [s[key] for s in samples]
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}

    return {"samples": len(samples), "sm_clock_mhz": spread("sm_clock_mhz"), "mem_clock_mhz": spread("mem_clock_mhz"),
            "power_w": spread("power_w"), "temperature_c": spread("temperature_c"), "reasons_seen": seen,
            "software_power_cap": bool(seen & SW_POWER_CAP), "throttle_reasons": judge(seen)}


class Sampler:
    """Samples NVML in a background thread from `start()` to `stop()`; `__enter__`/`__exit__` mark the
    measured window, and only the samples inside it count. Opening NVML and starting the thread
    happen before the window, so their cost is never timed."""

    def __init__(self, device: str, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.device, self.interval_s = device, interval_s
        self.samples: list[dict[str, float]] = []
        self.window: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None

    def _open(self) -> Any:  # CUDA-only
        """The NVML handle of the GPU this process uses, found by its UUID (CUDA and NVML number
        devices differently); a MIG slice is watched through its parent GPU."""
        import pynvml
        import torch

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"MIG-{uuid}", f"GPU-{uuid}"]
        handle = None
        for name in names:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(name)
                break
            except pynvml.NVMLError:
                continue
        if handle is None:
            raise RuntimeError(f"no NVML device with UUID {uuid}")
        if pynvml.nvmlDeviceIsMigDeviceHandle(handle):
            handle = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        return handle

    def _read(self) -> dict[str, float]:  # CUDA-only
        import pynvml

        handle = self._handle
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons",
                          getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        return {"at": time.perf_counter(),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                "reasons": reasons(handle) if reasons else 0}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._read())
            except Exception:  # noqa: BLE001 - a failed read loses one sample, not the trial
                pass
            self._stop.wait(self.interval_s)

    def start(self) -> "Sampler":
        if self.device != "cuda":
            return self
        try:
            self._handle = self._open()
        except Exception:  # noqa: BLE001 - no NVML (driver, container, permissions): no readings
            return self
        self._thread = threading.Thread(target=self._loop, name="autotune-nvml", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "Sampler":
        self.window = [time.perf_counter()]
        return self

    def __exit__(self, *exc: object) -> None:
        self.window.append(time.perf_counter())

    def summary(self) -> NvmlSummary | None:
        if len(self.window) == 2:
            begin, end = self.window
            return summarize([s for s in self.samples if begin <= s.get("at", begin) <= end])
        return summarize(self.samples)
