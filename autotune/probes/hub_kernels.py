"""Whether transformers can load the Hub's FlashAttention-2 kernel here, and if not, the one reason why.

`attn_implementation="kernels-community/flash-attn2"` makes transformers call the `kernels` package,
which resolves the kernel's version against the Hub (a network call) unless Hugging Face is offline,
where it reads the local cache only. The GPU machines autotune is tested on have no network, so a
kernel is usable when the package is at a version this transformers takes and either the Hub answers
or the kernel is cached with HF_HUB_OFFLINE=1 (or named in LOCAL_KERNELS). Nothing here imports
`kernels` itself: its import probes the device. Runs in the child process, on CUDA only.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TypedDict
from urllib.parse import urlparse

from ..config.knobs import HUB_FLASH


def _package_reason() -> str:
    """Why transformers would refuse the kernels package, or "" where it takes it."""
    import transformers
    from transformers.utils import import_utils

    if import_utils.is_kernels_available():
        return ""
    low, high = import_utils.KERNELS_MIN_VERSION, import_utils.KERNELS_MAX_VERSION
    return (f"the kernels package is not installed at a version transformers {transformers.__version__} takes "
            f"(pip install \"kernels>={low},<{high}\")")


def kernel_version(repo: str) -> int:
    """The major version of `repo` this transformers loads (it pins one per flash kernel)."""
    from transformers.modeling_flash_attention_utils import FLASH_ATTN_KERNEL_VERSIONS

    return int(FLASH_ATTN_KERNEL_VERSIONS.get(repo, 1))


def cached(repo: str, version: int, cache: str) -> bool:
    """The kernels package's offline lookup: a `v<version>` ref of `repo` in the cache, in the kernel
    repository layout or the older model one."""
    owner, _, name = repo.partition("/")
    return any((Path(cache) / f"{kind}--{owner}--{name}" / "refs" / f"v{version}").is_file()
               for kind in ("kernels", "models"))


def local_override(repo: str) -> bool:
    """LOCAL_KERNELS=repo=path:... loads `repo` from a folder, no Hub needed."""
    entries = os.environ.get("LOCAL_KERNELS", "")
    return any(entry.partition("=")[0] == repo for entry in entries.split(":") if "=" in entry)


def hub_reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    """A TCP connection to the Hub's host opens (no request is sent)."""
    url = urlparse(endpoint)
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


class HubFlash(TypedDict):
    """The frame's facts on the Hub's flash-attention kernel (config/types.py DeviceFacts)."""

    hub_flash: bool
    hub_flash_reason: str


def hub_flash_facts(device: str) -> HubFlash:
    """`hub_flash` (can transformers load HUB_FLASH here) and `hub_flash_reason` (why not) for the frame."""
    if device != "cuda":
        return {"hub_flash": False, "hub_flash_reason": ""}  # not_applicable says CUDA first
    reason = _package_reason()
    if reason:
        return {"hub_flash": False, "hub_flash_reason": reason}
    from huggingface_hub import constants

    version = kernel_version(HUB_FLASH)
    in_cache = cached(HUB_FLASH, version, os.environ.get("KERNELS_CACHE") or constants.HF_HUB_CACHE)
    offline = bool(constants.HF_HUB_OFFLINE)
    if local_override(HUB_FLASH) or (in_cache and offline) or (not offline and hub_reachable(constants.ENDPOINT)):
        return {"hub_flash": True, "hub_flash_reason": ""}
    if in_cache:
        reason = (f"{HUB_FLASH} is in the Hugging Face cache but the Hub cannot be reached: set HF_HUB_OFFLINE=1 "
                  "so the kernels package loads it from the cache")
    else:
        reason = (f"{HUB_FLASH} (version {version}) is not in the Hugging Face cache and the Hub "
                  f"{'is off (HF_HUB_OFFLINE=1)' if offline else 'cannot be reached'}: download it once where it can "
                  f"(python -c \"from kernels import install_kernel; install_kernel('{HUB_FLASH}', version={version})\")"
                  " and copy the cache")
    return {"hub_flash": False, "hub_flash_reason": reason}
