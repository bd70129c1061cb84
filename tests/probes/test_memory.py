"""Peak memory on the CPU: the RSS high-water mark, resettable so a window is measured on its own."""

from __future__ import annotations

import sys

import pytest
import torch

from autotune.probes import memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM reset is Linux-only")
def test_peak_rss_sees_a_large_allocation_and_resets():
    memory.reset_peak("cpu")
    before = memory.read_peak("cpu")["bytes"]
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB touched
    del block
    grown = memory.read_peak("cpu")["bytes"]
    assert grown - before >= 48 * 2**20
    memory.reset_peak("cpu")
    assert memory.read_peak("cpu")["bytes"] < grown


def test_the_limit_holds_back_the_margin_of_the_smaller_of_device_and_mem_limit():
    assert memory.limit_bytes(100, None, 0.1) == 90
    assert memory.limit_bytes(100, 50, 0.1) == 45
    assert memory.limit_bytes(100, 500, 0.0) == 100
    assert memory.fits(45, 45) and not memory.fits(46, 45)
