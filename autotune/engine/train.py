"""The training engine of a trial: batches by the knobs, timed optimizer steps, parity losses.

Loss normalisation: each micro-batch's summed token losses are divided by the target tokens of the
whole optimizer step, so the gradient does not depend on the micro-batch / accumulation split
(transformers PR #34191 is what goes wrong otherwise).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torch.nn.functional as F

from ..config.job import Job
from ..config.knobs import Knobs
from ..config.messages import PeakReading, measured_ids as measured_row_ids, parity_ids
from ..probes import memory
from ..probes.profile import PhaseTimer
from ..probes.timing import StepTimer, warmed_up
from .batching import IGNORE, Batch, collate, group_by_length, row_targets, step_plan, worst_case_rows
from .common import as_is, is_oom, loader_context, loader_prefetch  # noqa: F401 - is_oom re-exported for the runners
from .steps import Plan, StepLog, TrialFault, accepted, measurement_of  # noqa: F401 - re-exported for the runners

LEARNING_RATE = 1e-4
MAX_GRAD_NORM = 1.0


class MicroBatches(torch.utils.data.Dataset):
    """Collation happens here, so `dataloader_num_workers` moves it off the training process."""

    def __init__(self, rows: list[list[int]], knobs: Knobs, max_len: int, pad_id: int,
                 leak_packed_rows: bool = False, vision: Any = None) -> None:
        self.rows, self.knobs, self.max_len, self.pad_id = rows, knobs, max_len, pad_id
        self.leak, self.vision = leak_packed_rows, vision

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: tuple) -> tuple:
        kind, index, row_ids, targets = item
        return kind, index, row_ids, targets, self.batch(row_ids, [self.rows[r] for r in row_ids])

    def batch(self, row_ids: tuple, rows: list[list[int]]) -> Batch:
        """Text tensors by the padding knob; for a VLM also its images through the image processor."""
        pixels: dict[str, torch.Tensor] = {}
        if self.vision is not None:
            rows, pixels = self.vision.micro_batch(row_ids, rows)
        batch = collate(rows, self.knobs.padding, self.max_len, self.pad_id, self.knobs.attn_implementation,
                        self.leak, self.vision.ignore if self.vision is not None else frozenset())
        if self.vision is not None:
            batch["vision"] = {**pixels, **self.vision.vision.extra_inputs(batch["input_ids"])}
            if self.knobs.padding == "padding_free":
                from .vision_pack import pack_vision

                pack_vision(batch, self.vision.vision, rows, pixels)
        return batch


class Engine:
    def __init__(self, model: torch.nn.Module, knobs: Knobs, device: str) -> None:
        self.model, self.knobs, self.device = model, knobs, device
        precision = knobs.precision
        if device == "cuda":  # CUDA-only: tf32 is a matmul mode, not an autocast dtype
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
        self._scale = self.scaler.get_scale() if self.scaler else None
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(params, knobs.optim)
        # The chunked loss projects the hidden states itself: the head passes them through (before compile).
        self.head = None
        if knobs.chunked_cross_entropy:
            from .chunked_loss import hidden_states_out

            self.head = hidden_states_out(model)
        mode = knobs.torch_compile_mode
        self.forward = (torch.compile(model, **({"mode": mode} if mode != "default" else {}))
                        if knobs.torch_compile else model)

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device, dtype=self.autocast_dtype)

    def micro_step(self, batch: Batch, step_targets: int,
                   phases: PhaseTimer | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward and backward of one micro-batch; returns its loss share (a tensor: reading it
        would stall the device every micro-batch) and per-token losses."""
        pin = self.knobs.dataloader_pin_memory and self.device == "cuda"
        inputs = {k: batch[k].to(self.device, non_blocking=pin)
                  for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
        for name, value in batch.get("vision", {}).items():
            inputs[name] = value.to(self.device, non_blocking=pin)
        for name, value in batch.get("flash", {}).items():
            inputs[name] = value.to(self.device, non_blocking=pin) if torch.is_tensor(value) else value
        labels = batch["labels"].to(self.device, non_blocking=pin)
        with self._autocast():
            logits = self.forward(**inputs).logits
        if self.head is not None:
            from .chunked_loss import token_losses as chunked

            # `logits` are the hidden states here (see chunked_loss.hidden_states_out).
            token_losses = chunked(logits.flatten(0, 1), self.head, labels.flatten(), self.autocast_dtype or torch.float32)
        else:
            token_losses = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none",
                                           ignore_index=IGNORE)
        return self.backward(token_losses, step_targets, phases), token_losses.detach(), labels

    def backward(self, target_losses: torch.Tensor, step_targets: int,
                 phases: PhaseTimer | None = None) -> torch.Tensor:
        """Backward of a micro-batch's summed losses over the whole step's targets (so the gradient does
        not depend on the micro-batch split); returns its loss share, still on the device."""
        loss = target_losses.sum() / step_targets
        if phases:
            phases.mark("forward")
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        if phases:
            phases.mark("backward")
        return loss.detach()

    def optimizer_step(self, phases: PhaseTimer | None = None) -> None:
        self._optimizer_step()
        if phases:
            phases.mark("optimizer")

    def skipped_step(self) -> bool:
        """Whether fp16 loss scaling skipped the last step (inf/NaN gradients lower the scale).

        Reading the scale syncs the device, so callers ask only after a step's time is taken."""
        if not self.scaler:
            return False
        scale = self.scaler.get_scale()
        skipped = self._scale is not None and scale < self._scale
        self._scale = scale
        return skipped

    def _optimizer_step(self) -> None:
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), MAX_GRAD_NORM)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def synchronize(self) -> None:
        if self.device == "cuda":  # CUDA-only
            torch.cuda.synchronize()

    @staticmethod
    def row_losses(token_losses: torch.Tensor, labels: torch.Tensor, batch: Batch,
                   row_ids: tuple) -> dict[int, float]:
        """Each row's mean token loss (reads the device: parity steps only)."""
        losses: dict[int, float] = {}
        _row_losses(token_losses, labels, batch["slots"], row_ids, losses)
        return losses

    @staticmethod
    def batch_tokens(batch: Batch) -> tuple[int, int]:
        """(real tokens, padding tokens) of a micro-batch."""
        return batch["real_tokens"], batch["input_ids"].numel() - batch["real_tokens"]


def make_optimizer(params: list[torch.nn.Parameter], optim: str) -> torch.optim.Optimizer:
    """AdamW as the `optim` knob names it (the names TrainingArguments takes), autotune's engine settings."""
    if optim in ("adamw_bnb_8bit", "paged_adamw_8bit"):  # CUDA-only
        import bitsandbytes

        cls = bitsandbytes.optim.AdamW8bit if optim == "adamw_bnb_8bit" else bitsandbytes.optim.PagedAdamW8bit
        return cls(params, lr=LEARNING_RATE, weight_decay=0.0)
    return torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0,
                             **({"fused": True} if optim == "adamw_torch_fused" else {}))


def _row_losses(token_losses: torch.Tensor, labels: torch.Tensor, slots: torch.Tensor, row_ids: tuple,
                into: dict[int, float]) -> None:
    flat_slots = slots.flatten().to(token_losses.device)
    valid = labels.flatten() != IGNORE
    for slot, row in enumerate(row_ids):
        chosen = valid & (flat_slots == slot)
        into[row] = float(token_losses[chosen].mean()) if chosen.any() else 0.0


def run_steps(engine: Engine, rows: list[list[int]], knobs: Knobs, job: Job, pad_id: int,
              measure_steps: int, warmup_max: int, inject: str | None = None, leak_packed_rows: bool = False,
              profile_steps: int = 0, window: Any = None, vision: Any = None) -> StepLog:
    """Parity steps, detected warm-up, the measured steps, then `profile_steps` steps timed phase by
    phase (synchronising inside a step would distort the measured ones, so the breakdown has its own).

    `window` (optional) is entered for the measured steps: the NVML sampler watches exactly them.
    `vision` (images.VisionRows) gives a VLM's rows their images.
    """
    effective_batch, micro = job.effective_batch, knobs.per_device_train_batch_size
    lengths = [len(r) for r in rows]
    parity, measured_ids = parity_ids(effective_batch), measured_row_ids(effective_batch, measure_steps)
    if knobs.group_by_length:
        # Within each optimizer step: every step keeps its rows (paired statistics and the loss stay
        # exact), and its micro-batches hold rows of similar length (less padding).
        measured_ids = [r for start in range(0, len(measured_ids), effective_batch)
                        for r in group_by_length(measured_ids[start:start + effective_batch], lengths, micro)]
    plan = Plan(step_plan(parity, effective_batch, micro), step_plan(measured_ids, effective_batch, micro),
                warmup_max, profile_steps)
    ignore = vision.ignore if vision is not None else frozenset()
    return train_loop(engine, MicroBatches(rows, knobs, job.max_len, pad_id, leak_packed_rows, vision), plan,
                      [row_targets(r, ignore) for r in rows], knobs, effective_batch, inject, window)


def train_loop(engine: Any, dataset: Any, plan: Plan, targets_per_row: list[int], knobs: Knobs,
               effective_batch: int, inject: str | None = None, window: Any = None) -> StepLog:
    """The steps of `plan` over `dataset`'s micro-batches, whatever the model: the engine says how a
    micro-batch trains (`micro_step`), which per-row losses it had (`row_losses`) and how many of its
    tokens were real and padding (`batch_tokens`)."""
    micro, measure_steps, profile_steps = knobs.per_device_train_batch_size, len(plan.measured), plan.profile_steps
    workers = knobs.dataloader_num_workers
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, sampler=plan.items(targets_per_row), num_workers=workers, collate_fn=as_is,
        multiprocessing_context=loader_context(workers),
        pin_memory=knobs.dataloader_pin_memory and engine.device == "cuda",
        persistent_workers=bool(workers and knobs.dataloader_persistent_workers),
        prefetch_factor=loader_prefetch(knobs))
    log, timer = StepLog(), StepTimer(engine.synchronize)
    accumulation = effective_batch // micro
    parity_losses: dict[str, dict[int, float]] = {"step1": {}, "step2": {}}
    done_micro, step_loss, step_tokens = 0, 0.0, 0
    phases = PhaseTimer(engine.synchronize)
    in_window = False
    timer.start()
    batches = iter(loader)
    while True:
        profiling = phases if log.profile_steps < profile_steps and len(log.times) == measure_steps else None
        if profiling:
            profiling.start()
        item = next(batches, None)
        if item is None:
            break
        kind, index, row_ids, targets, batch = item
        if kind == "measured" and not in_window and window is not None:
            window.__enter__()
            in_window = True
        if kind == "profile" and in_window:
            window.__exit__(None, None, None)
            in_window = False
        if profiling:
            profiling.mark("data_wait")
        if inject == "oom" and not log.losses:
            torch.empty(1 << 50, dtype=torch.uint8, device=engine.device)  # a real allocation failure
        loss, token_losses, labels = engine.micro_step(batch, targets, profiling if kind == "profile" else None)
        if kind == "parity":
            parity_losses[f"step{index + 1}"].update(engine.row_losses(token_losses, labels, batch, row_ids))
        step_loss = step_loss + loss
        real, padded = engine.batch_tokens(batch)
        step_tokens += real
        if kind == "measured":
            log.measured_rows += len(row_ids)
            log.padded_tokens += padded
        done_micro += 1
        if done_micro < accumulation:
            continue
        engine.optimizer_step(profiling if kind == "profile" else None)
        elapsed = timer.lap()
        if engine.skipped_step() and kind == "measured":
            # A skipped step does less work: the timing would flatter fp16. (A skip in the parity
            # steps shows up as different step-2 losses, which parity judges.)
            raise TrialFault("invalid", "fp16 loss scaling skipped a measured step (inf/NaN gradients)")
        step_value = float(step_loss)
        if inject == "nan" and kind == "measured":
            step_value = float("nan")
        log.losses.append(step_value)
        if not math.isfinite(step_value):
            raise TrialFault("invalid", f"loss is {step_value} at step {len(log.losses)}")
        if kind == "measured":
            log.times.append(elapsed)
            log.tokens.append(step_tokens)
        elif kind == "profile":
            log.profile_steps += 1
            phases.add_step(elapsed)
        else:
            log.warmup_times.append(elapsed)
            plan.warm = kind == "warmup" and warmed_up(log.warmup_times)
        done_micro, step_loss, step_tokens = 0, 0.0, 0
    if in_window:
        window.__exit__(None, None, None)
    log.parity = {key: [values[r] for r in sorted(values)] for key, values in parity_losses.items()}
    log.phases = phases.totals()
    return log


def worst_case_peak(engine: Engine, knobs: Knobs, job: Job, vocab_size: int, pad_id: int,
                    vision: Any = None, stored_rows: list[list[int]] | None = None) -> PeakReading:
    """Peak memory of full optimizer steps on micro-batches of max_len rows.

    The first step creates the optimizer state (Adam: two tensors per parameter); the peak is read
    over a second step, whose activations then coexist with that state and, when accumulating, with
    the gradients of the step's earlier micro-batches. A VLM's worst row holds the run's largest images.
    """
    micro, max_len = knobs.per_device_train_batch_size, job.max_len
    if vision is not None:
        row_ids, rows = vision.worst_case(micro, max_len, stored_rows)
        batch = MicroBatches(rows, knobs, max_len, pad_id, vision=vision).batch(row_ids, rows)
    else:
        rows = worst_case_rows(micro, max_len, vocab_size)
        batch = collate(rows, knobs.padding, max_len, pad_id, knobs.attn_implementation)
    accumulated = min(2, job.effective_batch // micro)
    try:
        two_full_steps(engine, batch, accumulated, accumulated * micro * (max_len - 1))
    except Exception as error:  # noqa: BLE001 - only OOM is an expected outcome here
        if not is_oom(error):
            raise
        return {"fits": False, "reason": f"out of memory at the worst-case batch ({micro} x {max_len} tokens)"}
    return memory.read_peak(engine.device)


def two_full_steps(engine: Any, batch: Any, accumulated: int, targets: int) -> None:
    """Peak memory reset, then two optimizer steps of `accumulated` micro-batches that really ran: fp16
    loss scaling may skip the first steps (no optimizer state yet), and a skipped step holds no Adam state."""
    memory.reset_peak(engine.device)
    real_steps, tries = 0, 0
    while real_steps < 2 and tries < 8:
        for _ in range(accumulated):
            engine.micro_step(batch, targets)
        engine.optimizer_step()
        real_steps += not engine.skipped_step()
        tries += 1
    engine.synchronize()
    if real_steps < 2:
        raise TrialFault("invalid", "fp16 loss scaling skipped every worst-case step; the ceiling is unknown")
