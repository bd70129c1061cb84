"""autotune's instruments on `transformers.Trainer`'s extension points: a `TrainerCallback` and two
forward hooks on the module the trainer calls. They observe the steps and never change what a step
computes, except for what the plan asks of the parity steps (dropout off, see `DropoutOff`).

Per step (the callback): a lap of a synchronised clock from one `on_step_end` to the next (so a
step's time includes fetching its batches and the trainer's own per-step work: clipping, scheduler,
logging), warm-up ended when settled, the NVML window over exactly the measured steps, the step's
loss, fp16 skipped steps and injected faults. Per micro-batch (the hooks, on the trainer's called
module, outside a `torch.compile` region): the summed token losses TRL's fused LM head returns, per-row
losses on the parity steps, and on the profile steps the phase marks.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from transformers import TrainerCallback

from ..probes.profile import PhaseTimer
from ..probes.timing import StepTimer, warmed_up
from .steps import Plan, StepLog
from .train import TrialFault

IGNORE = -100


class DropoutOff:
    """Every dropout probability of a model at 0 until `restore()`: `nn.Dropout` modules' `p` and the
    float `*dropout*` attributes attention modules read at call time (Qwen2's `attention_dropout`).
    `Trainer.training_step` calls `model.train()` on every micro-batch, so eval mode would not stay."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.saved: list[tuple[Any, str, float]] = []
        for module in model.modules():
            for name, value in vars(module).items():
                dropout = (name == "p" and isinstance(module, torch.nn.modules.dropout._DropoutNd)) or "dropout" in name
                if dropout and isinstance(value, float) and value > 0:
                    self.saved.append((module, name, value))
                    setattr(module, name, 0.0)

    def restore(self) -> None:
        for module, name, value in self.saved:
            setattr(module, name, value)
        self.saved = []


def row_losses(token_losses: torch.Tensor, labels: torch.Tensor, position_ids: torch.Tensor | None,
               row_ids: list[int], into: dict[int, float]) -> None:
    """Each row's mean token loss. `token_losses` are per next-token label (labels[:, 1:]), zero where
    ignored. A padded micro-batch holds one row per batch row; a padding-free one packs them in one
    sequence, told apart by where `position_ids` restart."""
    targets = labels[:, 1:]
    valid = targets != IGNORE
    if token_losses.shape[0] == len(row_ids):
        for slot, row in enumerate(row_ids):
            chosen = valid[slot]
            into[row] = float(token_losses[slot][chosen].mean()) if chosen.any() else 0.0
        return
    segment = (torch.cumsum(position_ids[0] == 0, 0) - 1)[1:].to(token_losses.device)
    for slot, row in enumerate(row_ids):
        chosen = valid[0] & (segment == slot)
        into[row] = float(token_losses[0][chosen].mean()) if chosen.any() else 0.0


class Instruments(TrainerCallback):
    """Reads a trial's plan off a training run; `log` holds what it measured.

    `plan.record` (filled by the sampler as it hands out each step's rows) says which step is which;
    `shape(step)` gives a step's (real tokens, padding tokens, loss targets)."""

    def __init__(self, plan: Plan, shape: Any, synchronize: Any, inject: str | None = None,
                 window: Any = None, leak_packed_rows: bool = False) -> None:
        self.plan, self.shape, self.inject, self.window, self.leak = plan, shape, inject, window, leak_packed_rows
        self.log, self.timer, self.phases = StepLog(), StepTimer(synchronize), PhaseTimer(synchronize)
        self.synchronize = synchronize
        self.parity: dict[str, dict[int, float]] = {"step1": {}, "step2": {}}
        self.trainer: Any = None
        self.handles: list[Any] = []
        self.dropout: DropoutOff | None = None
        self.in_window = False
        self.step: tuple[str, int, list[list[int]]] = ("parity", 0, [])
        self.micro, self.loss_sum, self.last_lap = 0, None, 0.0
        self.profiling = False
        self.positions: torch.Tensor | None = None

    # -- the callback --------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The module compute_loss calls: the compiled wrapper where torch.compile is on, so the hooks run
        # eagerly around the compiled region instead of being traced into it.
        called = self.trainer.model_wrapped
        self.handles = [called.register_forward_pre_hook(self._before, with_kwargs=True),
                        called.register_forward_hook(self._after, with_kwargs=True)]
        self.timer.start()
        self.last_lap = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.step = self.plan.record[state.global_step]
        kind = self.step[0]
        self.micro, self.loss_sum = 0, None
        if self.inject == "oom" and state.global_step == 0:
            torch.empty(1 << 50, dtype=torch.uint8, device=args.device)  # a real allocation failure
        if kind == "parity" and self.dropout is None:
            self.dropout = DropoutOff(self.trainer.model)
        elif kind != "parity" and self.dropout is not None:
            self.dropout.restore()  # the timed steps train with the model's own dropout
        if kind == "measured" and not self.in_window and self.window is not None:
            self.window.__enter__()
            self.in_window = True
        if kind == "profile":
            self._close_window()
            self.profiling = True
            self.phases.start(at=self.last_lap)
            self.phases.mark("data_wait")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiling:
            self.phases.mark("backward")  # the last micro-batch's backward and gradient clipping

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiling:
            self.phases.mark("optimizer")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        elapsed = self.timer.lap()
        self.last_lap = time.perf_counter()
        kind, index, step = self.step
        real, padded, targets = self.shape(step)
        if kind == "measured" and self.trainer.accelerator.optimizer_step_was_skipped:
            # A skipped step does less work: the timing would flatter fp16. (A skip in the parity
            # steps shows up as different step-2 losses, which parity judges.)
            raise TrialFault("invalid", "fp16 loss scaling skipped a measured step (inf/NaN gradients)")
        value = float(self.loss_sum) / max(1, targets) if self.loss_sum is not None else float("nan")
        if self.inject == "nan" and kind == "measured":
            value = float("nan")
        self.log.losses.append(value)
        if not math.isfinite(value):
            raise TrialFault("invalid", f"loss is {value} at step {len(self.log.losses)}")
        if kind == "measured":
            self.log.times.append(elapsed)
            self.log.tokens.append(real)
            self.log.measured_rows += sum(len(micro) for micro in step)
            self.log.padded_tokens += padded
        elif kind == "profile":
            self.log.profile_steps += 1
            self.phases.add_step(elapsed)
            self.profiling = False
        else:
            self.log.warmup_times.append(elapsed)
            self.plan.warm = kind == "warmup" and warmed_up(self.log.warmup_times)
        last = ("profile", self.plan.profile_steps - 1) if self.plan.profile_steps else ("measured", len(self.plan.measured) - 1)
        if (kind, index) == last:
            control.should_training_stop = True

    def close(self) -> StepLog:
        """Hooks off, window closed; the step log with the parity losses and the phase totals."""
        for handle in self.handles:
            handle.remove()
        self._close_window()
        if self.dropout is not None:
            self.dropout.restore()
        self.log.parity = {key: [values[r] for r in sorted(values)] for key, values in self.parity.items()}
        self.log.phases = self.phases.totals()
        return self.log

    def _close_window(self) -> None:
        if self.in_window:
            self.window.__exit__(None, None, None)
            self.in_window = False

    # -- the hooks -----------------------------------------------------------------------------------------
    def _before(self, module: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if self.profiling:
            # Before the first micro-batch: moving it to the device (data); later: the previous one's backward.
            self.phases.mark("backward" if self.micro else "data_wait")
        self.positions = kwargs.get("position_ids")  # the rows' own, before a test's leak replaces them
        if self.leak and "position_ids" in kwargs:
            # Tests only: positions that never restart, as a collator that packs without them would give,
            # so packed rows attend to each other; parity must catch it.
            positions = kwargs["position_ids"]
            kwargs = {**kwargs, "position_ids": torch.arange(positions.shape[-1], device=positions.device)[None]}
            return args, kwargs
        return None

    def _after(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if self.profiling:
            self.phases.mark("forward")
        log_probs = getattr(output, "log_probs", None)
        if log_probs is None:
            return  # not TRL's fused LM head forward (a forward of the trainer's own, outside the plan)
        token_losses = -log_probs.detach().float()
        total = token_losses.sum()  # stays on the device: read once per step, after its time is taken
        self.loss_sum = total if self.loss_sum is None else self.loss_sum + total
        kind, index, step = self.step
        if kind == "parity" and self.micro < len(step):
            row_losses(token_losses, kwargs["labels"], self.positions, step[self.micro],
                       self.parity[f"step{index + 1}"])
        self.micro += 1
