"""Instruments. Most run inside the trial's child process and import torch there; `parity`,
`stats`, `timing`, `memory`, `nvml` and `profile` are torch-free and also serve the parent.
Import the module you need (`from autotune.probes import stats`): importing this package loads none.
"""

__all__ = ["device", "flops", "memory", "nvml", "parity", "peaks", "profile", "stats", "timing"]
