"""The values knobs take, and small facts about them that several entries share."""

from __future__ import annotations

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
# The one resolution cap tried, where the user allows one: 256 Qwen2-VL image tokens' worth of pixels
# (a longest edge of 448 px for a square image; for a tiling family, whole tiles within that).
IMAGE_PIXEL_CAP = 256 * 28 * 28


def is_flash(attn: str) -> bool:
    """A flash kernel, built in or from the Hub (transformers' own test: "flash" in the name): bf16 or fp16
    only, and it takes variable lengths (padding-free rows need no block-diagonal mask)."""
    return "flash" in attn


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending: pairs up to its square root, so a huge n costs microseconds, not hours."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]
