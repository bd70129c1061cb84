"""Measured device peaks: real numbers, and a known device is not measured twice."""

from __future__ import annotations

import torch

from autotune.probes import peaks


def test_cpu_peaks_are_measured(monkeypatch):
    monkeypatch.setitem(peaks.MATMUL_SIZE, "cpu", 256)
    monkeypatch.setitem(peaks.COPY_BYTES, "cpu", 16 * 2**20)
    measured = peaks.measure("cpu", ["fp32"])
    assert measured["matmul_flops"]["fp32"] > 1e8  # any CPU of this decade does 0.1 GFLOP/s
    assert measured["copy_bytes_per_s"] > 1e8
    assert measured["fingerprint"] == peaks.fingerprint("cpu")
    assert f"{torch.get_num_threads()} threads" in measured["fingerprint"]


def test_a_cached_fingerprint_is_not_measured_again(monkeypatch):
    known = {"fingerprint": peaks.fingerprint("cpu"), "matmul_flops": {"fp32": 123.0}, "copy_bytes_per_s": 4.0}

    def fail(*_args, **_kwargs):
        raise AssertionError("measured although cached")

    monkeypatch.setattr(peaks, "measure", fail)
    got = peaks.cached_or_measured("cpu", ["fp32"], {known["fingerprint"]: known})
    assert got["cached"] is True and got["matmul_flops"]["fp32"] == 123.0


def test_another_device_in_the_cache_does_not_count(monkeypatch):
    monkeypatch.setattr(peaks, "measure", lambda device, precisions: {"fingerprint": "here", "matmul_flops": {}})
    got = peaks.cached_or_measured("cpu", ["fp32"], {"some other card": {"matmul_flops": {"fp32": 1.0}}})
    assert got["cached"] is False


def test_a_gpu_is_measured_at_the_full_size_never_at_the_launch_bound_probe(monkeypatch):
    """A small product on a GPU is launch-bound: extrapolating from it put an H200's fp32 at 1.9 TFLOP/s
    and every fp32 MFU above 1."""
    sizes = []

    def product(device, precision, size=None):
        sizes.append(size or peaks.MATMUL_SIZE[device])
        return 2.0 * sizes[-1] ** 3 / (1e-5 if sizes[-1] == peaks.PROBE_SIZE else 0.02)  # launch-bound probe

    monkeypatch.setattr(peaks, "matmul_flops", product)
    monkeypatch.setattr(peaks, "copy_bandwidth", lambda device: 1e12)
    monkeypatch.setattr(peaks, "fingerprint", lambda device: "a gpu")
    measured = peaks.measure("cuda", ["fp32", "bf16"])
    assert sizes == [peaks.MATMUL_SIZE["cuda"]] * 2
    assert measured["matmul_size"] == {"fp32": peaks.MATMUL_SIZE["cuda"], "bf16": peaks.MATMUL_SIZE["cuda"]}
