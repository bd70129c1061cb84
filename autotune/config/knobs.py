"""The knob catalog and one configuration (`Knobs`).

Names follow `TrainingArguments` / TRL `SFTConfig` where one exists, so the best config pastes
straight into a user's trainer. `max_len` and `effective_batch` are the user's and are not knobs;
the micro-batch / accumulation split is, and their product always equals `effective_batch`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from ..util.errors import JobError
from .inputs import check_digits

PADDING_MODES = ("max_length", "longest", "padding_free")
# FlashAttention-2 prebuilt on the Hugging Face Hub, loaded by the `kernels` package: transformers takes
# the repository as the attn_implementation (and falls back to it for flash_attention_2 without flash_attn).
HUB_FLASH = "kernels-community/flash-attn2"
ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", HUB_FLASH)
# Those autotune's own loop hands packed rows' bounds to as keyword arguments (transformers'
# flash_attention_forward takes them): FlashAttention-2, built or from the Hub, the same kernel.
VARLEN_BOUNDS = ("flash_attention_2", HUB_FLASH)
PRECISIONS = ("fp32", "bf16", "fp16", "tf32")
# The two bitsandbytes ones keep Adam's moments in 8 bits: they change the numbers (opt-in, see NUMERICS).
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_bnb_8bit", "paged_adamw_8bit")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# The frozen base of a LoRA job as loaded (`from_pretrained(dtype=...)`).
BASE_DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str  # bool | int | choice
    choices: tuple = ()
    # Its value in the config many people start with (NAIVE_START), and in records from before it existed.
    naive: Any = None
    affects_memory: bool = False
    help: str = ""
    # Only image-text models have it (rank proposes it only where the frame found a vision tower).
    vision: bool = False
    # Changes what is trained, not only how fast: tried only where the user allowed it (a job key).
    changes_training: bool = False
    # An int knob's range, checked where a value is read (the user's words, a config, a record): a loader
    # of 10**17 workers would spawn processes until the budget ends. Shown on docs/reference/knobs.md.
    minimum: int = 0
    maximum: int = 0


# The one resolution cap tried, where the user allows one: 256 Qwen2-VL image tokens' worth of pixels
# (a longest edge of 448 px for a square image; for a tiling family, whole tiles within that).
IMAGE_PIXEL_CAP = 256 * 28 * 28

CATALOG: dict[str, Knob] = {k.name: k for k in (
    Knob("per_device_train_batch_size", "int", naive=1, affects_memory=True, minimum=1, maximum=2**16,
         help="rows per micro-batch; accumulation makes up the rest of effective_batch"),
    Knob("padding", "choice", PADDING_MODES, naive="max_length", affects_memory=True,
         help="pad every row to max_len, pad to the longest row of the batch, or pack rows without padding"),
    Knob("group_by_length", "bool", naive=False, help="batch rows of similar length together (less padding)"),
    Knob("attn_implementation", "choice", ATTENTION, naive="eager", affects_memory=True,
         help=f"attention kernel; {HUB_FLASH} is FlashAttention-2 from the Hugging Face Hub (CUDA, pip install "
              "kernels; the kernel cached or the Hub reachable)"),
    Knob("precision", "choice", PRECISIONS, naive="fp32", affects_memory=True,
         help="fp32, bf16 or fp16 autocast, or tf32 matmuls"),
    Knob("gradient_checkpointing", "bool", naive=False, affects_memory=True, help="recompute activations in backward"),
    Knob("torch_compile", "bool", naive=False, affects_memory=True, help="torch.compile the model"),
    Knob("dataloader_num_workers", "int", naive=0, maximum=256, help="collation in worker processes"),
    Knob("dataloader_pin_memory", "bool", naive=False, help="page-locked host batches (CUDA)"),
    Knob("optim", "choice", OPTIMIZERS, naive="adamw_torch", affects_memory=True,
         help="optimizer implementation (same AdamW math)"),
    Knob("max_image_pixels", "int", naive=0, affects_memory=True, vision=True, changes_training=True, maximum=2**30,
         help="VLMs: cap each image at this many pixels before the processor (0: the processor's own); "
              "tried only with allow_image_resize=true"),
    Knob("freeze_vision_tower", "bool", naive=False, affects_memory=True, vision=True,
         help="VLMs: run the vision tower without autograd (only where the method trains nothing in it)"),
    Knob("chunked_cross_entropy", "bool", naive=False, affects_memory=True,
         help="the loss from the hidden states, chunk by chunk: the [rows, seq, vocab] logits never exist "
              "(autotune's own loop; trl.SFTTrainer's fused LM head always does this)"),
    Knob("use_liger_kernel", "bool", naive=False, affects_memory=True,
         help="liger-kernel's fused RMSNorm, RoPE and SwiGLU (CUDA, pip install liger-kernel); TRL 1.16 "
              "deprecates it for Hub kernels (a FutureWarning) and keeps Liger's fused loss off"),
    Knob("activation_offloading", "bool", naive=False, affects_memory=True,
         help="TRL: keep activations in host memory until backward (CUDA)"),
    Knob("expandable_segments", "bool", naive=False, affects_memory=True,
         help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the trial's environment (less fragmentation)"),
    Knob("torch_compile_mode", "choice", COMPILE_MODES, naive="default", affects_memory=True,
         help="torch.compile's mode, with torch_compile on; compile time stays in the warm-up, out of the timing"),
    Knob("dtype", "choice", BASE_DTYPES, naive="float32", affects_memory=True,
         help="LoRA: the frozen base's weights as loaded (bfloat16 halves them; no master weights to keep)"),
    Knob("load_in_4bit", "bool", naive=False, affects_memory=True,
         help="LoRA: a 4-bit NF4 base (QLoRA, bitsandbytes); changes the numbers, tried only with "
              "allow_numerics_change=true"),
    Knob("float8_training", "bool", naive=False, affects_memory=True,
         help="torchao float8 matmuls in the linear layers (compute capability >= 8.9); changes the numbers, "
              "tried only with allow_numerics_change=true"),
    Knob("dataloader_persistent_workers", "bool", naive=False, help="loader workers live across epochs (with workers)"),
    Knob("dataloader_prefetch_factor", "int", maximum=1024,
         naive=0, help="batches each loader worker prepares ahead (0: torch's default, 2; with workers)"),
)}

# Settings that change what is trained beyond precision noise: tried only with allow_numerics_change=true,
# and their parity is held to this tolerance (relative, per-row loss), with the reason the report gives.
NUMERICS: dict[tuple[str, Any], tuple[float, str]] = {
    ("optim", "adamw_bnb_8bit"): (3e-2, "8-bit block-wise Adam states (about 1% relative error per state, "
                                  "Dettmers et al. 2022) reach the losses only through the first update"),
    ("optim", "paged_adamw_8bit"): (3e-2, "8-bit block-wise Adam states, paged (the same numbers as adamw_bnb_8bit)"),
    ("float8_training", True): (6e-2, "e4m3 inputs carry 3 mantissa bits (bf16 carries 7): about twice bf16's "
                                "3e-2 on per-row losses, as torchao reports loss curves within bf16's noise"),
    ("load_in_4bit", True): (1e-1, "NF4 weights move every logit (QLoRA keeps the quality after training, "
                             "not the step-one losses): a loose 1e-1 only catches a broken load"),
}


def numerics_changes(knobs: "Knobs") -> list[tuple[str, Any]]:
    """The settings of `knobs` that change the numbers (see NUMERICS)."""
    return [(name, value) for name, value in knobs.to_dict().items() if (name, value) in NUMERICS]


def numerics_limits(allowed: bool) -> list[dict[str, Any]]:
    """The frame limits that keep numerics-changing settings untried unless the user allowed them."""
    if allowed:
        return []
    return [{"knob": name, "value": value, "silent": False,
             "reason": "changes the numbers beyond precision noise; allow it with allow_numerics_change=true"}
            for name, value in NUMERICS]

# The config many people start with: pad to max length, micro-batch 1, fp32, eager attention.
NAIVE_START: dict[str, Any] = {knob.name: knob.naive for knob in CATALOG.values()}
_PYTHON_TYPE = {"bool": bool, "int": int, "choice": str}


class _KnobsMethods:
    """What a Knobs does; its fields come from CATALOG (below), the one table of knobs."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            knob, value = CATALOG[field.name], getattr(self, field.name)
            if knob.kind == "bool" and not isinstance(value, bool):
                raise JobError(f"{knob.name}={value!r}: expected true or false")
            if knob.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)
                                       or not knob.minimum <= value <= knob.maximum):
                raise JobError(f"{knob.name}={value!r}: expected a whole number from {knob.minimum:,} to "
                               f"{knob.maximum:,}")
            if knob.kind == "choice" and value not in knob.choices:
                raise JobError(f"{knob.name}={value!r}: expected one of {', '.join(knob.choices)}")
        if self.per_device_train_batch_size < 1:
            raise JobError("per_device_train_batch_size must be >= 1")

    def with_change(self, name: str, value: Any) -> "Knobs":
        return dataclasses.replace(self, **{name: value})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Knobs":
        return cls(**{k: v for k, v in data.items() if k in CATALOG})

    def accumulation(self, effective_batch: int) -> int:
        return effective_batch // self.per_device_train_batch_size

    def diff(self, other: "Knobs") -> dict[str, tuple[Any, Any]]:
        """Knobs whose value differs: name -> (self's, other's)."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}


# One configuration, validated on construction: a frozen dataclass with one field per CATALOG entry, in
# its order, defaulting to the naive value (records written before a knob existed load with it so).
Knobs = dataclasses.make_dataclass(
    "Knobs", [(knob.name, _PYTHON_TYPE[knob.kind], dataclasses.field(default=knob.naive)) for knob in CATALOG.values()],
    bases=(_KnobsMethods,), frozen=True, namespace={"__module__": __name__})
Knobs.__doc__ = "One configuration; validated on construction."


def parse_knob_value(name: str, text: str) -> Any:
    """A knob's value from its command-line text; one clear line when it does not parse."""
    knob = CATALOG[name]
    if knob.kind == "bool":
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise JobError(f"{name}={text!r}: expected true or false")
    if knob.kind == "int":
        check_digits(name, text)
        if not re.fullmatch(r"[0-9]+", text.strip()):
            raise JobError(f"{name}={text!r}: expected a whole number, for example {name}=2")
        if not knob.minimum <= int(text) <= knob.maximum:
            raise JobError(f"{name}={text}: expected a whole number from {knob.minimum:,} to {knob.maximum:,}")
        return int(text)
    if text not in knob.choices:
        raise JobError(f"{name}={text!r}: expected one of {', '.join(knob.choices)}")
    return text


def is_flash(attn: str) -> bool:
    """A flash kernel, built in or from the Hub (transformers' own test: "flash" in the name): bf16 or fp16
    only, and it takes variable lengths (padding-free rows need no block-diagonal mask)."""
    return "flash" in attn


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending: pairs up to its square root, so a huge n costs microseconds, not hours."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def not_applicable(name: str, value: Any, knobs: Knobs, device: dict, effective_batch: int) -> str | None:
    """Why `name=value` cannot be tried on top of `knobs` on this device and install; None if it can.

    `device` holds the facts the frame measured in the child process (kind, bf16, tf32, flash_attn,
    compile, cpu_count).
    """
    cuda = device.get("kind") == "cuda"
    if name == "per_device_train_batch_size" and effective_batch % value:
        return f"{value} does not divide effective_batch={effective_batch}"
    if name == "precision":
        if value == "bf16" and not device.get("bf16"):
            return device.get("bf16_reason") or "this device has no bf16 support"
        if value == "fp16" and not cuda:
            return "fp16 mixed precision needs a CUDA device (loss scaling)"
        if value == "tf32" and not device.get("tf32"):
            return "tf32 needs an NVIDIA GPU of compute capability 8.0 or newer"
        if is_flash(knobs.attn_implementation) and value in ("fp32", "tf32"):
            return f"{knobs.attn_implementation} runs only in bf16 or fp16"
        half_only = [n for n in ("dtype", "load_in_4bit", "float8_training")
                     if getattr(knobs, n) not in ("float32", False)]
        if value != "bf16" and half_only:
            return f"{half_only[0]} computes in bf16: precision stays bf16 with it"
    if name == "attn_implementation" and value in ("flash_attention_2", "flash_attention_3"):
        if not cuda:
            return f"{value} needs a CUDA device"
        if value == "flash_attention_3" and not str(device.get("capability", "")).startswith("9."):
            return "FlashAttention-3 runs on Hopper GPUs (compute capability 9.0) only"
        if not device.get("flash_attn" if value == "flash_attention_2" else "flash_attn_3"):
            return ("the flash_attn package is not installed" if value == "flash_attention_2" else
                    "the flash_attn_interface package (FlashAttention-3, flash-attention's hopper/ build) is not installed")
        if knobs.precision not in ("bf16", "fp16"):
            return f"{value} runs only in bf16 or fp16; try it once precision is bf16"
    if name == "group_by_length" and value and knobs.padding != "longest":
        return f"group_by_length only changes padding with padding=longest (now {knobs.padding})"
    if name == "dataloader_pin_memory" and value and not cuda:
        return "pinned memory only helps copies to a CUDA device"
    if name == "dataloader_num_workers" and value > max(1, int(device.get("cpu_count", 1)) - 1):
        return f"{value} workers exceed this machine's spare cores"
    if name == "torch_compile" and value and not device.get("compile"):
        return device.get("compile_reason") or "torch.compile is not available here"
    if name == "optim" and value == "adamw_torch_fused" and not device.get("fused_adamw", True):
        return "fused AdamW is not supported on this device by this torch"
    return _new_knob_limit(name, value, knobs, device, cuda)


# The package each optional kernel comes from, as `pip install` names it (all in the [gpu] extra).
PACKAGES = {"liger": "liger-kernel", "bitsandbytes": "bitsandbytes", "torchao": "torchao"}


def _missing(device: dict, fact: str) -> str | None:
    if device.get(fact):
        return None
    return f"the {PACKAGES[fact]} package is not installed (pip install {PACKAGES[fact]}, or pip install -e \".[gpu]\")"


def _new_knob_limit(name: str, value: Any, knobs: Knobs, device: dict, cuda: bool) -> str | None:
    """Fused kernels, the Hub attention kernel, memory placement, compile modes, 8-bit optimizers, the LoRA
    base, fp8, the loader."""
    if value in (False, "default", "float32", 0) or name in ("chunked_cross_entropy",):
        return None  # off is always possible; the chunked loss is plain PyTorch (the frame limits it by runner)
    if name == "optim" and value in ("adamw_bnb_8bit", "paged_adamw_8bit"):
        return "bitsandbytes' 8-bit optimizers need a CUDA device" if not cuda else _missing(device, "bitsandbytes")
    if name == "attn_implementation" and value == HUB_FLASH:
        if not cuda:
            return f"{HUB_FLASH} is a CUDA kernel: it needs a CUDA device"
        if int(str(device.get("capability", "0")).partition(".")[0] or 0) < 8:
            return "FlashAttention-2 needs compute capability 8.0 or newer (Ampere)"
        if not device.get("hub_flash"):  # the probe's reason: the kernels package, the cache, the network
            return device.get("hub_flash_reason") or ("the kernels package is not installed (pip install kernels, "
                                                         "at a version the installed transformers takes)")
        if knobs.precision not in ("bf16", "fp16"):
            return f"{HUB_FLASH} runs only in bf16 or fp16; try it once precision is bf16"
    if name == "use_liger_kernel":
        return "liger-kernel's kernels are Triton kernels: CUDA only" if not cuda else _missing(device, "liger")
    if name == "activation_offloading" and not cuda:
        return "activation offloading moves activations off a CUDA device; on the CPU they are in host memory already"
    if name == "expandable_segments" and not cuda:
        return "expandable segments are a setting of PyTorch's CUDA allocator"
    if name == "torch_compile_mode":
        if not knobs.torch_compile:
            return "torch_compile_mode only matters with torch_compile=true"
        if value == "reduce-overhead" and not cuda:
            return "reduce-overhead captures CUDA graphs: CUDA only"
    if name in ("dtype", "load_in_4bit", "float8_training") and knobs.precision != "bf16":
        return f"{name} computes in bf16; try it once precision is bf16"
    if name == "load_in_4bit":
        return "bitsandbytes' 4-bit weights need a CUDA device" if not cuda else _missing(device, "bitsandbytes")
    if name == "float8_training":
        if not cuda:
            return "float8 matmuls need a CUDA device"
        major, _, minor = str(device.get("capability", "0.0")).partition(".")
        if (int(major or 0), int(minor or 0)) < (8, 9):
            return "float8 matmuls need compute capability 8.9 or newer (Ada, Hopper)"
        return _missing(device, "torchao")
    if name in ("dataloader_persistent_workers", "dataloader_prefetch_factor") and not knobs.dataloader_num_workers:
        return f"{name} only matters with loader workers (dataloader_num_workers > 0)"
    return None


def job_limits(method: str, numerics_allowed: bool) -> list[dict[str, Any]]:
    """Frame limits that follow from the job rather than the device: what only a LoRA base can change,
    and the numerics-changing settings the user did not allow."""
    limits = numerics_limits(numerics_allowed)
    if method != "lora":
        limits += [{"knob": name, "silent": False, "reason": "a full fine-tune trains these weights: they keep fp32 "
                    "master weights (only a LoRA job's frozen base can load in bf16 or 4 bits)"}
                   for name in ("dtype", "load_in_4bit")]
    return limits
