"""Peak memory: CUDA allocator peaks, or the process's peak RSS on the CPU; the worst-case ceiling.

On Linux the RSS high-water mark can be reset (`/proc/self/clear_refs`), so the CPU path measures a
window the same way the CUDA path does, and the ceiling logic is testable without a GPU.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from pathlib import Path

from ..config.messages import PeakReading   # a measurement's `peak_memory` (schemas/measurement.json)

# Share of the memory limit held back by default: a long run must not OOM hours in on fragmentation
# or a rare long batch (Lightning's batch-size finder lesson: fixes were a margin and a max value).
DEFAULT_MARGIN = 0.10


def reset_peak(device: str) -> None:
    if device == "cuda":  # CUDA-only
        import torch

        torch.cuda.reset_peak_memory_stats()
        return
    # Elsewhere the peak stays process-wide: an over-estimate, never an under-estimate.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # "5" resets VmHWM (Linux >= 4.0)


def _rss_peak_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # macOS reports bytes, Linux KiB


def read_peak(device: str) -> PeakReading:
    if device == "cuda":  # CUDA-only
        import torch

        # Reserved is what the card really holds (close to nvidia-smi); allocated is what tensors use.
        return {"kind": "cuda_allocator", "allocated_bytes": int(torch.cuda.max_memory_allocated()),
                "bytes": int(torch.cuda.max_memory_reserved())}
    return {"kind": "cpu_peak_rss", "bytes": _rss_peak_bytes()}


def limit_bytes(device_total: int, mem_limit: int | None, margin: float) -> int:
    """What a worst-case batch may use: the device (or the user's `mem_limit`) less the margin."""
    total = min(device_total, mem_limit) if mem_limit else device_total
    return int(total * (1 - margin))


def fits(peak_bytes: int, limit: int) -> bool:
    return peak_bytes <= limit
