"""What this device and install can do: the facts that decide which knobs are tried.

Runs in the child process only; the parent never initialises CUDA.
"""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from typing import TypedDict

from ..config.types import DeviceFacts, PeakCache
from .hub_kernels import hub_flash_facts
from .peaks import cached_or_measured, cpu_name


def pick_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _fused_adamw_works(device: str) -> bool:
    import torch

    try:
        param = torch.nn.Parameter(torch.ones(4, device=device))
        optimizer = torch.optim.AdamW([param], fused=True)
        param.grad = torch.ones_like(param)
        optimizer.step()
        return True
    except (RuntimeError, TypeError, ValueError):
        return False


def _compile_support(device: str) -> tuple[bool, str]:
    import torch

    if not hasattr(torch, "compile"):
        return False, "this torch has no torch.compile"
    if device == "cpu" and not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        return False, "torch.compile on the CPU needs a C++ compiler (none on PATH)"
    if device == "cuda":  # CUDA-only
        try:
            import triton  # noqa: F401
        except ImportError:
            return False, "torch.compile on CUDA needs triton (not installed)"
    return True, ""


def memory_total(device: str) -> int:
    if device == "cuda":  # CUDA-only
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


class Kernels(TypedDict):
    """Which optional kernel packages are importable (DeviceFacts' keys of the same names)."""

    liger: bool
    bitsandbytes: bool
    torchao: bool
    flash_attn_3: bool


def installed_kernels() -> Kernels:
    """Which optional kernel packages are importable (the [gpu] extra); found, not imported: importing
    bitsandbytes or liger on a machine without CUDA prints warnings or fails."""
    import importlib.util

    def found(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    def has_part(package: str, part: str) -> bool:
        # find_spec("torchao.float8") would import torchao itself, and a torchao that fails to import with
        # anything but ImportError would then crash every frame: look for the folder instead.
        if not found(package):
            return False
        locations = importlib.util.find_spec(package).submodule_search_locations or ()
        return any((Path(where) / part).is_dir() or (Path(where) / f"{part}.py").is_file() for where in locations)

    return {"liger": found("liger_kernel"), "bitsandbytes": found("bitsandbytes"),
            "torchao": has_part("torchao", "float8"), "flash_attn_3": found("flash_attn_interface")}


def device_facts(device: str, peak_cache: PeakCache | None = None) -> DeviceFacts:
    # transformers' version is read, not imported: 3 s a plain PyTorch job's frame does not need.
    from importlib.metadata import version

    import torch

    compile_ok, compile_reason = _compile_support(device)
    kernels, hub = installed_kernels(), hub_flash_facts(device)
    facts: DeviceFacts = {
        "kind": device, "cpu_count": os.cpu_count() or 1, "compile": compile_ok, "compile_reason": compile_reason,
        "fused_adamw": _fused_adamw_works(device), "torch": torch.__version__,
        "transformers": version("transformers"), "python": platform.python_version(),
        "liger": kernels["liger"], "bitsandbytes": kernels["bitsandbytes"], "torchao": kernels["torchao"],
        "flash_attn_3": kernels["flash_attn_3"], "hub_flash": hub["hub_flash"],
        "hub_flash_reason": hub["hub_flash_reason"],
    }
    if device == "cuda":  # CUDA-only
        props = torch.cuda.get_device_properties(0)
        major, _ = torch.cuda.get_device_capability(0)
        try:
            import flash_attn  # noqa: F401
            flash = True
        except ImportError:
            flash = False
        facts.update({"name": props.name, "memory_bytes": int(props.total_memory),
                      "bf16": torch.cuda.is_bf16_supported(), "fp16": True, "tf32": major >= 8, "flash_attn": flash,
                      "cuda": torch.version.cuda,
                      "capability": ".".join(map(str, torch.cuda.get_device_capability(0)))})
    else:
        facts.update({"name": cpu_name(), "memory_bytes": memory_total(device), "bf16": True, "fp16": False,
                      "tf32": False, "flash_attn": False})

    precisions = ["fp32", "bf16"] + (["fp16", "tf32"] if device == "cuda" else [])
    peaks = cached_or_measured(device, precisions, peak_cache or {})
    facts["peaks"] = peaks
    speeds = {k: v / 1e12 for k, v in peaks["matmul_flops"].items()}
    facts["matmul_tflops"] = {k: round(v, 4) for k, v in speeds.items()}
    for half in ("bf16", "fp16"):
        if facts.get(half) and speeds.get(half, 0.0) < speeds["fp32"]:
            reason = (f"measured {half} matmuls at {speeds.get(half, 0.0):.3g} TFLOP/s, slower than "
                      f"fp32 at {speeds['fp32']:.3g}: this device emulates {half}")
            facts.update({"bf16": False, "bf16_reason": reason} if half == "bf16" else
                         {"fp16": False, "fp16_reason": reason})
    return facts
