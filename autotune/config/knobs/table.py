"""THE knob table: one entry per knob, each owning its facts (see entry.py for what each field means).

Names follow `TrainingArguments` / TRL `SFTConfig` where one exists, so the best config pastes
straight into a user's trainer. The order here is the config's field order (records keep it); the
ranking's tie order is each entry's `rank`. Adding a knob is one entry here plus its runner code
(docs/development/architecture.md shows the diff).
"""

from __future__ import annotations

from . import mapping as to
from . import requires as needs
from .entry import Knob, field
from .values import (ATTENTION, BASE_DTYPES, COMPILE_MODES, HUB_FLASH, IMAGE_PIXEL_CAP, OPTIMIZERS, PADDING_MODES,
                     PRECISIONS)

TABLE: tuple[Knob, ...] = (
    Knob("per_device_train_batch_size", "int", naive=1, minimum=1, maximum=2**16, affects_memory=True,
         help="rows per micro-batch; accumulation makes up the rest of effective_batch",
         climb="divisors", rank=1, requires=needs.micro_batch,
         interacts=("padding", "gradient_checkpointing", "torch_compile", "optim"), numerics_class="precision",
         sft=to.micro_batch, script_role="micro_batch",
         script_names=("per_device_train_batch_size", "batch_size", "micro_batch_size", "train_batch_size",
                       "train_micro_batch_size_per_gpu", "micro_batch", "per_device_batch_size")),
    Knob("padding", "choice", PADDING_MODES, naive="max_length", affects_memory=True,
         help="pad every row to max_len, pad to the longest row of the batch, or pack rows without padding",
         tries=("padding_free", "longest"), rank=0, numerics_class="precision", sft=to.padding,
         script_role="padding", script_names=("padding", "pad_to")),
    Knob("group_by_length", "bool", naive=False, help="batch rows of similar length together (less padding)",
         tries=(True, False), rank=4, requires=needs.group_by_length,
         interacts=("padding", "per_device_train_batch_size"), numerics_class="precision", sft=to.grouping,
         script_names=("train_sampling_strategy", "group_by_length")),
    Knob("attn_implementation", "choice", ATTENTION, naive="eager", affects_memory=True,
         help=f"attention kernel; {HUB_FLASH} is FlashAttention-2 from the Hugging Face Hub (CUDA, pip install "
              "kernels; the kernel cached or the Hub reachable)",
         tries=("sdpa", "flash_attention_2", "flash_attention_3", "eager", HUB_FLASH), rank=2,
         requires=needs.attention,
         # Attention kernels differ in how they scale with the batch (sdpa lost x0.85 at micro-batch 1 on
         # cpu-long-tail and wins at 2): a loss at one micro-batch says little at another.
         interacts=("padding", "per_device_train_batch_size", "precision"), numerics_class="precision",
         load=to.attention_load, script_names=("attn_implementation", "attention_implementation", "attention")),
    Knob("precision", "choice", PRECISIONS, naive="fp32", affects_memory=True,
         # fp32 last: back from a half precision this device only emulates (TRL's bf16 default on a CPU).
         help="fp32, bf16 or fp16 autocast, or tf32 matmuls", tries=("bf16", "tf32", "fp16", "fp32"), rank=3,
         requires=needs.precision, numerics_class="precision", sft=to.precision, script_role="precision",
         script_names=("precision", "mixed_precision", "dtype", "torch_dtype")),
    # Both ways: a user who starts with checkpointing or compile on should learn what they cost.
    Knob("gradient_checkpointing", "bool", naive=False, affects_memory=True, help="recompute activations in backward",
         tries=(False, True), rank=8, sft=to.checkpointing,
         script_names=("gradient_checkpointing", "activation_checkpointing", "grad_checkpointing", "checkpointing")),
    Knob("torch_compile", "bool", naive=False, affects_memory=True, help="torch.compile the model",
         tries=(False, True), rank=9, requires=needs.compile_, measure_cost=2.0, numerics_class="precision",
         sft=field("torch_compile", bool), script_names=("torch_compile", "compile", "use_compile")),
    Knob("dataloader_num_workers", "int", naive=0, maximum=256, help="collation in worker processes", tries=(2, 0),
         rank=6, step=2,
         requires=needs.workers, sft=field("dataloader_num_workers", int),
         script_names=("dataloader_num_workers", "num_workers", "workers")),
    Knob("dataloader_pin_memory", "bool", naive=False, help="page-locked host batches (CUDA)", tries=(True, False),
         rank=7, requires=needs.pin_memory, sft=field("dataloader_pin_memory", bool),
         script_names=("dataloader_pin_memory", "pin_memory")),
    Knob("optim", "choice", OPTIMIZERS, naive="adamw_torch", affects_memory=True,
         help="optimizer implementation (same AdamW math)",
         tries=("adamw_torch_fused", "adamw_torch", "adamw_bnb_8bit", "paged_adamw_8bit"), rank=5,
         requires=needs.optim, numerics_class="changes", sft=field("optim"),
         numerics=(("adamw_bnb_8bit", 3e-2, "8-bit block-wise Adam states (about 1% relative error per state, "
                    "Dettmers et al. 2022) reach the losses only through the first update"),
                   ("paged_adamw_8bit", 3e-2, "8-bit block-wise Adam states, paged (the same numbers as "
                    "adamw_bnb_8bit)")),
         script_names=("optim", "optimizer", "optimizer_name")),
    # Image-text models only (features say so): a resolution cap where the user allowed one, and a vision
    # tower run without autograd where nothing in it trains.
    Knob("max_image_pixels", "int", naive=0, maximum=2**30, affects_memory=True, vision=True, changes_training=True,
         help="VLMs: cap each image at this many pixels before the processor (0: the processor's own); "
              "tried only with allow_image_resize=true",
         tries=(IMAGE_PIXEL_CAP, 0), rank=10, numerics_class="changes"),
    Knob("freeze_vision_tower", "bool", naive=False, affects_memory=True, vision=True,
         help="VLMs: run the vision tower without autograd (only where the method trains nothing in it)",
         tries=(True, False), rank=11),
    # Added later, after the older knobs in the tie order so theirs stays; claims (kb/priors.json) rank them.
    Knob("chunked_cross_entropy", "bool", naive=False, affects_memory=True,
         help="the loss from the hidden states, chunk by chunk: the [rows, seq, vocab] logits never exist "
              "(autotune's own loop; trl.SFTTrainer's fused LM head always does this)",
         tries=(True, False), rank=13, numerics_class="precision"),
    Knob("use_liger_kernel", "bool", naive=False, affects_memory=True,
         help="liger-kernel's fused RMSNorm, RoPE and SwiGLU (CUDA, pip install liger-kernel); TRL 1.16 "
              "deprecates it for Hub kernels (a FutureWarning) and keeps Liger's fused loss off",
         tries=(True, False), rank=14, requires=needs.liger, numerics_class="precision",
         sft=field("use_liger_kernel", bool), sft_later=True),
    Knob("activation_offloading", "bool", naive=False, affects_memory=True,
         help="TRL: keep activations in host memory until backward (CUDA)", tries=(True, False), rank=16,
         requires=needs.offloading, sft=field("activation_offloading", bool), sft_later=True),
    Knob("expandable_segments", "bool", naive=False, affects_memory=True,
         help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the trial's environment (less fragmentation)",
         tries=(True, False), rank=15, requires=needs.expandable, env=to.allocator_env),
    Knob("torch_compile_mode", "choice", COMPILE_MODES, naive="default", affects_memory=True,
         help="torch.compile's mode, with torch_compile on; compile time stays in the warm-up, out of the timing",
         tries=("max-autotune", "reduce-overhead", "default"), rank=17, requires=needs.compile_mode,
         measure_cost=2.0, numerics_class="precision", sft=to.compile_mode, sft_later=True),
    Knob("dtype", "choice", BASE_DTYPES, naive="float32", affects_memory=True,
         help="LoRA: the frozen base's weights as loaded (bfloat16 halves them; no master weights to keep)",
         tries=("bfloat16", "float32"), rank=12, requires=needs.base_dtype, numerics_class="precision",
         load=to.dtype_load),
    Knob("load_in_4bit", "bool", naive=False, affects_memory=True,
         help="LoRA: a 4-bit NF4 base (QLoRA, bitsandbytes); changes the numbers, tried only with "
              "allow_numerics_change=true",
         tries=(True, False), rank=21, requires=needs.four_bit, numerics_class="changes", trl_model=to.four_bit_model,
         numerics=((True, 1e-1, "NF4 weights move every logit (QLoRA keeps the quality after training, "
                    "not the step-one losses): a loose 1e-1 only catches a broken load"),)),
    Knob("float8_training", "bool", naive=False, affects_memory=True,
         help="torchao float8 matmuls in the linear layers (compute capability >= 8.9); changes the numbers, "
              "tried only with allow_numerics_change=true",
         tries=(True, False), rank=20, requires=needs.float8, numerics_class="changes", outside=to.float8_outside,
         numerics=((True, 6e-2, "e4m3 inputs carry 3 mantissa bits (bf16 carries 7): about twice bf16's "
                    "3e-2 on per-row losses, as torchao reports loss curves within bf16's noise"),)),
    Knob("dataloader_persistent_workers", "bool", naive=False, help="loader workers live across epochs (with workers)",
         tries=(True, False), rank=18, requires=needs.with_workers("dataloader_persistent_workers"),
         sft=field("dataloader_persistent_workers", bool), sft_later=True),
    Knob("dataloader_prefetch_factor", "int", maximum=1024,
         naive=0, help="batches each loader worker prepares ahead (0: torch's default, 2; with workers)",
         tries=(4, 0), rank=19, requires=needs.with_workers("dataloader_prefetch_factor"), sft=to.prefetch,
         sft_later=True),
)
