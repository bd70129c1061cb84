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

from .errors import JobError
from .inputs import check_digits

PADDING_MODES = ("max_length", "longest", "padding_free")
ATTENTION = ("eager", "sdpa", "flash_attention_2")
PRECISIONS = ("fp32", "bf16", "fp16", "tf32")
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused")


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str  # bool | int | choice
    choices: tuple = ()
    affects_memory: bool = False
    help: str = ""
    # Only image-text models have it (rank proposes it only where the frame found a vision tower).
    vision: bool = False
    # Changes what is trained, not only how fast: tried only where the user allowed it (a job key).
    changes_training: bool = False


# The one resolution cap tried, where the user allows one: 256 Qwen2-VL image tokens' worth of pixels
# (a longest edge of 448 px for a square image; for a tiling family, whole tiles within that).
IMAGE_PIXEL_CAP = 256 * 28 * 28

CATALOG: dict[str, Knob] = {k.name: k for k in (
    Knob("per_device_train_batch_size", "int", affects_memory=True,
         help="rows per micro-batch; accumulation makes up the rest of effective_batch"),
    Knob("padding", "choice", PADDING_MODES, affects_memory=True,
         help="pad every row to max_len, pad to the longest row of the batch, or pack rows without padding"),
    Knob("group_by_length", "bool", help="batch rows of similar length together (less padding)"),
    Knob("attn_implementation", "choice", ATTENTION, affects_memory=True, help="attention kernel"),
    Knob("precision", "choice", PRECISIONS, affects_memory=True,
         help="fp32, bf16 or fp16 autocast, or tf32 matmuls"),
    Knob("gradient_checkpointing", "bool", affects_memory=True, help="recompute activations in backward"),
    Knob("torch_compile", "bool", affects_memory=True, help="torch.compile the model"),
    Knob("dataloader_num_workers", "int", help="collation in worker processes"),
    Knob("dataloader_pin_memory", "bool", help="page-locked host batches (CUDA)"),
    Knob("optim", "choice", OPTIMIZERS, affects_memory=True,
         help="optimizer implementation (same AdamW math)"),
    Knob("max_image_pixels", "int", affects_memory=True, vision=True, changes_training=True,
         help="VLMs: cap each image at this many pixels before the processor (0: the processor's own); "
              "tried only with allow_image_resize=true"),
    Knob("freeze_vision_tower", "bool", affects_memory=True, vision=True,
         help="VLMs: run the vision tower without autograd (only where the method trains nothing in it)"),
)}

# The config many people start with: pad to max length, micro-batch 1, fp32, eager attention.
NAIVE_START: dict[str, Any] = {
    "per_device_train_batch_size": 1, "padding": "max_length", "group_by_length": False,
    "attn_implementation": "eager", "precision": "fp32", "gradient_checkpointing": False,
    "torch_compile": False, "dataloader_num_workers": 0, "dataloader_pin_memory": False,
    "optim": "adamw_torch", "max_image_pixels": 0, "freeze_vision_tower": False,
}


@dataclass(frozen=True)
class Knobs:
    """One configuration; validated on construction."""

    per_device_train_batch_size: int = 1
    padding: str = "max_length"
    group_by_length: bool = False
    attn_implementation: str = "eager"
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    torch_compile: bool = False
    dataloader_num_workers: int = 0
    dataloader_pin_memory: bool = False
    optim: str = "adamw_torch"
    max_image_pixels: int = 0
    freeze_vision_tower: bool = False

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            knob, value = CATALOG[field.name], getattr(self, field.name)
            if knob.kind == "bool" and not isinstance(value, bool):
                raise JobError(f"{knob.name}={value!r}: expected true or false")
            if knob.kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise JobError(f"{knob.name}={value!r}: expected a whole number >= 0")
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
        return int(text)
    if text not in knob.choices:
        raise JobError(f"{name}={text!r}: expected one of {', '.join(knob.choices)}")
    return text


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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
        if knobs.attn_implementation == "flash_attention_2" and value in ("fp32", "tf32"):
            return "flash_attention_2 runs only in bf16 or fp16"
    if name == "attn_implementation" and value == "flash_attention_2":
        if not cuda:
            return "flash_attention_2 needs a CUDA device"
        if not device.get("flash_attn"):
            return "the flash_attn package is not installed"
        if knobs.precision not in ("bf16", "fp16"):
            return "flash_attention_2 runs only in bf16 or fp16; try it once precision is bf16"
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
    return None
