"""The Hub attention kernel's probe: the kernels package at a version transformers takes, and the kernel
cached (read offline) or the Hub reachable; otherwise the one reason the frame limit gives."""

from __future__ import annotations

import pytest

from autotune.config.knobs import HUB_FLASH, Knobs, not_applicable
from autotune.probes import hub_kernels
from autotune.probes.hub_kernels import cached, hub_flash_facts, kernel_version

BF16 = Knobs(precision="bf16", attn_implementation="sdpa")
AMPERE = {"kind": "cuda", "bf16": True, "capability": "8.0"}


def test_here_the_hub_kernel_is_not_applicable_and_the_reason_says_what_to_install():
    on_this_cpu = {"kind": "cpu", "bf16": True, **hub_flash_facts("cpu")}
    assert "CUDA" in not_applicable("attn_implementation", HUB_FLASH, BF16, on_this_cpu, 16)
    # On a card, the reason names what this install lacks. transformers 5.25 installs a kernels package it
    # takes (5.24 did not, and the registry had none it took): then the kernel itself, not in the cache
    # here, with no Hub to fetch it from.
    facts = hub_flash_facts("cuda")
    from transformers.utils import import_utils

    lacking = ("the kernel", "not in the Hugging Face cache") if import_utils.is_kernels_available() \
        else ("the package", 'pip install "kernels>=')
    assert facts["hub_flash"] is False and lacking[1] in facts["hub_flash_reason"], (lacking[0], facts)
    assert facts["hub_flash_reason"] in not_applicable("attn_implementation", HUB_FLASH, BF16, {**AMPERE, **facts}, 16)


@pytest.fixture
def kernels_installed(monkeypatch, tmp_path):
    """A kernels package transformers takes, an empty cache, and a Hub that does not answer."""
    from huggingface_hub import constants

    monkeypatch.setattr(hub_kernels, "_package_reason", lambda: "")
    monkeypatch.setattr(hub_kernels, "hub_reachable", lambda endpoint: False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return tmp_path


def _cache(folder, version: int, kind: str = "kernels") -> None:
    owner, _, name = HUB_FLASH.partition("/")
    refs = folder / f"{kind}--{owner}--{name}" / "refs"
    refs.mkdir(parents=True)
    (refs / f"v{version}").write_text("0" * 40)


def test_without_network_the_kernel_needs_the_cache_and_the_offline_switch(kernels_installed, monkeypatch):
    from huggingface_hub import constants

    facts = hub_flash_facts("cuda")
    assert facts["hub_flash"] is False and "not in the Hugging Face cache" in facts["hub_flash_reason"]
    assert "install_kernel" in facts["hub_flash_reason"]
    version = kernel_version(HUB_FLASH)
    _cache(kernels_installed, version)
    assert cached(HUB_FLASH, version, str(kernels_installed)) and not cached(HUB_FLASH, version + 1, str(kernels_installed))
    # Cached but online: the kernels package would ask the Hub first, and fail.
    assert "HF_HUB_OFFLINE=1" in hub_flash_facts("cuda")["hub_flash_reason"]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hub_flash_facts("cuda") == {"hub_flash": True, "hub_flash_reason": ""}


def test_an_older_model_layout_cache_a_local_folder_or_a_reachable_hub_each_does(kernels_installed, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    _cache(kernels_installed, kernel_version(HUB_FLASH), kind="models")
    assert hub_flash_facts("cuda")["hub_flash"] is True
    monkeypatch.setenv("KERNELS_CACHE", str(kernels_installed / "empty"))
    assert "not in the Hugging Face cache and the Hub is off" in hub_flash_facts("cuda")["hub_flash_reason"]
    monkeypatch.setenv("LOCAL_KERNELS", f"{HUB_FLASH}=/opt/flash-attn2")
    assert hub_flash_facts("cuda")["hub_flash"] is True
    monkeypatch.delenv("LOCAL_KERNELS")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_kernels, "hub_reachable", lambda endpoint: True)
    assert hub_flash_facts("cuda")["hub_flash"] is True


def test_an_unreachable_host_is_told_apart_without_a_request():
    # Port 9 on the loopback: nothing listens there, so the connection is refused at once.
    assert hub_kernels.hub_reachable("http://127.0.0.1:9", timeout_s=1.0) is False
