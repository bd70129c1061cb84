"""Measured peaks of this device: matmul FLOP/s per precision and copy bandwidth.

MFU is divided by these, never by a datasheet constant (REFERENCE: an H100 reaches ~795 of its 989
bf16 TFLOP/s). Measured in the child process; cached per device fingerprint by the parent, so a
known card is not re-measured.
"""

from __future__ import annotations

import math
import os
import platform
import time
from typing import Any, Callable

from ..config.types import PeakCache, Peaks

# Products large enough to reach the plateau, small enough to measure in seconds.
MATMUL_SIZE = {"cuda": 8192, "cpu": 1024}
COPY_BYTES = {"cuda": 2 * 2**30, "cpu": 256 * 2**20}
REPEATS = {"cuda": 10, "cpu": 3}
# A GPU ramps its clocks under load: warm up this long before timing, and time this many products
# back to back per reading so launch gaps do not count.
WARMUP_S = {"cuda": 1.0, "cpu": 0.0}
BATCH = {"cuda": 10, "cpu": 1}


def cpu_name() -> str:
    """The CPU's model name, as the peaks' fingerprint and the device facts name it."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device: str) -> str:
    """What makes two peak measurements comparable: device, driver, torch, threads."""
    import torch

    if device == "cuda":  # CUDA-only
        return "|".join((torch.cuda.get_device_name(0), _driver_version(), f"torch {torch.__version__}",
                         f"cuda {torch.version.cuda}"))
    return "|".join((cpu_name(), f"{os.cpu_count()} cpus", f"{torch.get_num_threads()} threads",
                     f"torch {torch.__version__}", platform.machine()))


def _driver_version() -> str:  # CUDA-only
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return f"driver {version.decode() if isinstance(version, bytes) else version}"
    except Exception:  # noqa: BLE001 - NVML missing or not permitted: the name still identifies the card
        return "driver unknown"


def _timer(device: str) -> Callable[[Callable[[], Any], int], float]:
    """Best seconds per call of `work` over `repeats` readings, after a warm-up."""
    import torch

    batch = BATCH[device]

    def run(work: Callable[[], Any], repeats: int) -> float:
        warm_until = time.perf_counter() + WARMUP_S[device]
        work()
        while time.perf_counter() < warm_until:
            work()
            if device == "cuda":  # CUDA-only
                torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeats):
            if device == "cuda":  # CUDA-only: events time the device, not the launches
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(batch):
                    work()
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1000 / batch)
            else:
                began = time.perf_counter()
                work()
                best = min(best, time.perf_counter() - began)
        return best

    return run


def matmul_flops(device: str, precision: str, size: int | None = None) -> float:
    """FLOP/s of an n x n x n product in `precision` (tf32 = fp32 inputs with tf32 matmuls)."""
    import torch

    size = size or MATMUL_SIZE[device]
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        seconds = _timer(device)(lambda: torch.matmul(a, b), REPEATS[device])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * size ** 3 / seconds


def copy_bandwidth(device: str) -> float:
    """Bytes per second of a device-to-device copy, counting bytes read plus bytes written."""
    import torch

    count = COPY_BYTES[device]
    source = torch.empty(count, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    seconds = _timer(device)(lambda: target.copy_(source), REPEATS[device])
    return 2 * count / seconds


# A precision so slow that the full-size product would take longer than this is measured at the probe
# size only (a CPU that emulates bf16 runs it ~100x slower than fp32; seconds per product add nothing).
SLOW_PRODUCT_S = 0.5
PROBE_SIZE = 256


def _products(device: str, precisions: list[str]) -> tuple[dict[str, float], dict[str, int]]:
    """FLOP/s and product size per precision; 0 for a dtype the device cannot multiply."""
    flops: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for precision in precisions:
        try:
            # Only a CPU emulates a precision that slowly. On a GPU a probe-sized product is bound by its
            # launch, not its arithmetic (an H200 ran fp32 at 1.9 TFLOP/s there): always the full size.
            probe = matmul_flops(device, precision, PROBE_SIZE) if device != "cuda" else math.inf
            full_seconds = 2 * MATMUL_SIZE[device] ** 3 / probe
            sizes[precision] = PROBE_SIZE if full_seconds > SLOW_PRODUCT_S else MATMUL_SIZE[device]
            flops[precision] = probe if sizes[precision] == PROBE_SIZE else matmul_flops(device, precision)
        except RuntimeError:  # a dtype this device cannot multiply
            flops[precision], sizes[precision] = 0.0, 0
    return flops, sizes


def fastest_product(device: str, precisions: list[str]) -> tuple[str, float]:
    """The fastest product this device runs now, in any of `precisions`, and that precision: a bound no
    step can beat, read again where a trial went over its recorded peak. That peak may have been taken
    while the shared cores were busy, or a CPU that emulates bf16 runs the model's own products (some
    kept in fp32) faster than its bf16 probe."""
    flops, _ = _products(device, precisions)
    precision = max(flops, key=lambda name: flops[name])
    return precision, flops[precision]


def measure(device: str, precisions: list[str]) -> Peaks:
    flops, sizes = _products(device, precisions)
    return {"fingerprint": fingerprint(device), "matmul_flops": flops, "matmul_size": sizes,
            "copy_bytes_per_s": copy_bandwidth(device),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


def cached_or_measured(device: str, precisions: list[str], cache: PeakCache) -> Peaks:
    """The cached peaks of this exact device and install, else a fresh measurement."""
    known = cache.get(fingerprint(device))
    if known and all(p in known["matmul_flops"] for p in precisions):
        return {**known, "cached": True}
    return {**measure(device, precisions), "cached": False}
