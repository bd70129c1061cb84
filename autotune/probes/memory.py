"""Peak memory of the measured window: CUDA allocator peaks, or the process's peak RSS on the CPU."""

from __future__ import annotations

import resource
import sys
from typing import Any

# The largest share of device memory a config may use at its worst-case batch: a margin so that a
# long run does not OOM hours in on fragmentation (Lightning's batch-size finder lesson).
CEILING_SHARE = 0.95


def reset_peak(device: str) -> None:
    if device == "cuda":  # CUDA-only
        import torch

        torch.cuda.reset_peak_memory_stats()


def read_peak(device: str) -> dict[str, Any]:
    if device == "cuda":  # CUDA-only
        import torch

        return {"kind": "cuda_allocator", "allocated_bytes": int(torch.cuda.max_memory_allocated()),
                "bytes": int(torch.cuda.max_memory_reserved())}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return {"kind": "cpu_peak_rss", "bytes": int(rss if sys.platform == "darwin" else rss * 1024)}


def fits(peak_bytes: int, total_bytes: int) -> bool:
    return peak_bytes <= CEILING_SHARE * total_bytes
