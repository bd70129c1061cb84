"""The knowledge-base folder keeps measured device peaks between runs."""

from __future__ import annotations

import pytest

from autotune.util.errors import RecordError
from autotune.kb import kb_folder, read_peak_cache, remember_peaks


def test_folder_comes_from_the_key_then_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOTUNE_KB", str(tmp_path / "env"))
    assert kb_folder("") == tmp_path / "env"
    assert kb_folder(str(tmp_path / "key")) == tmp_path / "key"


def test_peaks_are_remembered_per_fingerprint(tmp_path):
    remember_peaks(tmp_path, {"fingerprint": "card A", "matmul_flops": {"bf16": 7.9e14}, "cached": False})
    remember_peaks(tmp_path, {"fingerprint": "card B", "matmul_flops": {"bf16": 2.7e14}, "cached": False})
    cache = read_peak_cache(tmp_path)
    assert set(cache) == {"card A", "card B"} and "cached" not in cache["card A"]


def test_a_corrupt_cache_names_the_file_and_the_fix(tmp_path):
    (tmp_path / "device_peaks.json").write_text("{not json")
    with pytest.raises(RecordError, match="device_peaks.json.*delete it"):
        read_peak_cache(tmp_path)
