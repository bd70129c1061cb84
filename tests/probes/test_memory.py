"""Peak memory on the CPU: the RSS high-water mark, resettable so a window is measured on its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune.probes import memory


WINDOW = """
import json, torch
from autotune.probes import memory
memory.reset_peak("cpu")
before = memory.read_peak("cpu")["bytes"]
block = torch.ones(64 * 2**20 // 4)  # 64 MiB touched
del block
grown = memory.read_peak("cpu")["bytes"]
memory.reset_peak("cpu")
print(json.dumps([before, grown, memory.read_peak("cpu")["bytes"]]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM reset is Linux-only")
def test_peak_rss_sees_a_large_allocation_and_resets():
    # In a fresh process, as trials measure it: inside a long suite, memory that earlier tests free
    # during the window (garbage collection, other threads) can hide the block (seen once in CI).
    done = subprocess.run([sys.executable, "-c", WINDOW], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    before, grown, after = json.loads(done.stdout)
    assert grown - before >= 48 * 2**20
    assert after < grown


def test_the_limit_holds_back_the_margin_of_the_smaller_of_device_and_mem_limit():
    assert memory.limit_bytes(100, None, 0.1) == 90
    assert memory.limit_bytes(100, 50, 0.1) == 45
    assert memory.limit_bytes(100, 500, 0.0) == 100
    assert memory.fits(45, 45) and not memory.fits(46, 45)
