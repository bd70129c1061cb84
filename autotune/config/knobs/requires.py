"""What each knob requires: the device, installed packages, other knobs. One function per knob, named
by its entry in `table.py`; each returns why `value` cannot be tried on top of `knobs`, or None.

`device` holds the facts the frame measured in the child process (kind, bf16, tf32, flash_attn,
compile, cpu_count, capability, the optional packages).
"""

from __future__ import annotations

from typing import Any

from ..types import Device
from .values import HUB_FLASH, is_flash

# The package each optional kernel comes from, as `pip install` names it (all in the [gpu] extra).
PACKAGES = {"liger": "liger-kernel", "bitsandbytes": "bitsandbytes", "torchao": "torchao"}
# bf16 compute: a setting of these keeps precision at bf16.
HALF_ONLY = ("dtype", "load_in_4bit", "float8_training")


def _cuda(device: Device) -> bool:
    return device.get("kind") == "cuda"


def _missing(device: Device, fact: str) -> str | None:
    if device.get(fact):
        return None
    return f"the {PACKAGES[fact]} package is not installed (pip install {PACKAGES[fact]}, or pip install -e \".[gpu]\")"


def _capability(device: Device, default: str = "0") -> tuple[int, int]:
    major, _, minor = str(device.get("capability", default)).partition(".")
    return int(major or 0), int(minor or 0)


def micro_batch(value: int, knobs: Any, device: Device, effective_batch: int) -> str | None:
    return f"{value} does not divide effective_batch={effective_batch}" if effective_batch % value else None


def precision(value: str, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if value == "bf16" and not device.get("bf16"):
        return device.get("bf16_reason") or "this device has no bf16 support"
    if value == "fp16" and not _cuda(device):
        return "fp16 mixed precision needs a CUDA device (loss scaling)"
    if value == "tf32" and not device.get("tf32"):
        return "tf32 needs an NVIDIA GPU of compute capability 8.0 or newer"
    if is_flash(knobs.attn_implementation) and value in ("fp32", "tf32"):
        return f"{knobs.attn_implementation} runs only in bf16 or fp16"
    half_only = [n for n in HALF_ONLY if getattr(knobs, n) not in ("float32", False)]
    if value != "bf16" and half_only:
        return f"{half_only[0]} computes in bf16: precision stays bf16 with it"
    if value == "fp32" and knobs.precision in ("bf16", "fp16") and device.get(knobs.precision):
        return f"this device runs {knobs.precision} natively: fp32 is tried only where it emulates {knobs.precision}"
    return None


def attention(value: str, knobs: Any, device: Device, effective_batch: int) -> str | None:
    cuda = _cuda(device)
    if value in ("flash_attention_2", "flash_attention_3"):
        if not cuda:
            return f"{value} needs a CUDA device"
        if value == "flash_attention_3" and not str(device.get("capability", "")).startswith("9."):
            return "FlashAttention-3 runs on Hopper GPUs (compute capability 9.0) only"
        if not device.get("flash_attn" if value == "flash_attention_2" else "flash_attn_3"):
            return ("the flash_attn package is not installed" if value == "flash_attention_2" else
                    "the flash_attn_interface package (FlashAttention-3, flash-attention's hopper/ build) is not installed")
        if knobs.precision not in ("bf16", "fp16"):
            return f"{value} runs only in bf16 or fp16; try it once precision is bf16"
    if value == HUB_FLASH:
        if not cuda:
            return f"{HUB_FLASH} is a CUDA kernel: it needs a CUDA device"
        if _capability(device)[0] < 8:
            return "FlashAttention-2 needs compute capability 8.0 or newer (Ampere)"
        if not device.get("hub_flash"):  # the probe's reason: the kernels package, the cache, the network
            return device.get("hub_flash_reason") or ("the kernels package is not installed (pip install kernels, "
                                                         "at a version the installed transformers takes)")
        if knobs.precision not in ("bf16", "fp16"):
            return f"{HUB_FLASH} runs only in bf16 or fp16; try it once precision is bf16"
    return None


def group_by_length(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if value and knobs.padding != "longest":
        return f"group_by_length only changes padding with padding=longest (now {knobs.padding})"
    return None


def pin_memory(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    return "pinned memory only helps copies to a CUDA device" if value and not _cuda(device) else None


def workers(value: int, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if value > max(1, int(device.get("cpu_count", 1)) - 1):
        return f"{value} workers exceed this machine's spare cores"
    return None


def compile_(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if value and not device.get("compile"):
        return device.get("compile_reason") or "torch.compile is not available here"
    return None


def optim(value: str, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if value == "adamw_torch_fused" and not device.get("fused_adamw", True):
        return "fused AdamW is not supported on this device by this torch"
    if value in ("adamw_bnb_8bit", "paged_adamw_8bit"):
        return "bitsandbytes' 8-bit optimizers need a CUDA device" if not _cuda(device) else _missing(device, "bitsandbytes")
    return None


def liger(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if not value:
        return None
    return "liger-kernel's kernels are Triton kernels: CUDA only" if not _cuda(device) else _missing(device, "liger")


def offloading(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if value and not _cuda(device):
        return "activation offloading moves activations off a CUDA device; on the CPU they are in host memory already"
    return None


def expandable(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    return "expandable segments are a setting of PyTorch's CUDA allocator" if value and not _cuda(device) else None


def compile_mode(value: str, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if value == "default":
        return None
    if not knobs.torch_compile:
        return "torch_compile_mode only matters with torch_compile=true"
    if value == "reduce-overhead" and not _cuda(device):
        return "reduce-overhead captures CUDA graphs: CUDA only"
    return None


def _bf16_first(name: str, knobs: Any) -> str | None:
    return f"{name} computes in bf16; try it once precision is bf16" if knobs.precision != "bf16" else None


def base_dtype(value: str, knobs: Any, device: Device, effective_batch: int) -> str | None:
    return None if value == "float32" else _bf16_first("dtype", knobs)


def four_bit(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if not value:
        return None
    return _bf16_first("load_in_4bit", knobs) or (
        "bitsandbytes' 4-bit weights need a CUDA device" if not _cuda(device) else _missing(device, "bitsandbytes"))


def float8(value: bool, knobs: Any, device: Device, effective_batch: int) -> str | None:
    if not value:
        return None
    if why := _bf16_first("float8_training", knobs):
        return why
    if not _cuda(device):
        return "float8 matmuls need a CUDA device"
    if _capability(device, "0.0") < (8, 9):
        return "float8 matmuls need compute capability 8.9 or newer (Ada, Hopper)"
    return _missing(device, "torchao")


def with_workers(name: str) -> Any:
    """A loader setting that only matters with loader workers."""
    def requires(value: Any, knobs: Any, device: Device, effective_batch: int) -> str | None:
        if value and not knobs.dataloader_num_workers:
            return f"{name} only matters with loader workers (dataloader_num_workers > 0)"
        return None
    return requires
