"""The steps a script trial runs after its measured ones: where the time goes, and the memory ceiling.

- Profile steps (`profile_steps`): each boundary the hooks see is timed with the device synchronised,
  which serialises work, so these steps come after the measured window, as the built-in runner's do:
  data wait (the previous step's end, or the previous backward, to the model's forward), forward
  (the model's forward and the loss computed from its output), backward (`torch.autograd.backward`,
  which `loss.backward()`, `accelerator.backward` and Lightning all call), optimizer (the optimizer's
  step, less the forward and backward a closure runs inside it, as Lightning's does); the rest of the
  step is host time between them.
- Worst-case steps (`ceiling`): two optimizer steps in which every call of the model gets rows of
  `max_len` real tokens (random ids, a full mask, labels the ids), as many rows as the script's own
  micro-batch, with the optimizer state already there and the accumulation as the script runs it: a
  config whose worst batch does not fit ends `oom` before it could fail hours into a real run.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ...probes.profile import PhaseTimer

WORST_STEPS = 2


class Phases:
    """The profile steps' phase timer, driven by the trial hooks."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self.timer = PhaseTimer(synchronize)
        self.synchronize = synchronize
        self.active = False
        self.pre_at: float | None = None

    def begin(self) -> None:
        self.active = True
        self.timer.start()

    def stop(self) -> None:
        self.active = False

    def forward_start(self) -> None:
        if self.active:
            self.pre_at = None       # a closure inside the optimizer's step: its forward starts here
            self.timer.mark("data_wait")

    def forward_end(self) -> None:
        if self.active:
            self.timer.mark("forward")

    def backward_start(self) -> None:
        if self.active:
            self.timer.mark("forward")   # the loss, computed from the model's output, is the forward's

    def backward_end(self) -> None:
        if self.active:
            self.timer.mark("backward")

    def optimizer_start(self) -> None:
        if self.active:
            self.synchronize()
            self.pre_at = time.perf_counter()

    def optimizer_end(self, step_seconds: float) -> None:
        if not self.active:
            return
        if self.pre_at is not None:
            self.timer.start(at=self.pre_at)   # host time before the step (zero_grad, clipping) is other
            self.pre_at = None
        self.timer.mark("optimizer")
        self.timer.add_step(step_seconds)

    def totals(self) -> dict[str, float]:
        return self.timer.totals()


class WorstCase:
    """Rows of max_len real tokens into every call of the model, for the worst-case steps."""

    def __init__(self, max_len: int) -> None:
        self.max_len = max_len
        self.handle: Any = None
        self.rows = 0

    @property
    def active(self) -> bool:
        return self.handle is not None

    def begin(self, root: Any) -> None:
        self.handle = root.register_forward_pre_hook(self.widen, with_kwargs=True)

    def end(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    def widen(self, module: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        import torch

        ids = kwargs.get("input_ids", args[0] if args and isinstance(args[0], torch.Tensor) else None)
        if ids is None or ids.dim() != 2 or ids.is_floating_point():
            return args, kwargs
        rows = ids.shape[0]
        self.rows = max(self.rows, rows)
        vocab = _vocab(module) or int(ids.max()) + 1
        worst = torch.randint(1, max(2, vocab), (rows, self.max_len), dtype=ids.dtype, device=ids.device)

        def like(name: str | None, value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or value.shape != ids.shape:
                return value
            if name == "attention_mask":
                return torch.ones_like(worst, dtype=value.dtype)
            if name == "position_ids":
                return torch.arange(self.max_len, device=value.device, dtype=value.dtype).expand(rows, -1)
            return worst.clone() if not value.is_floating_point() else value
        return tuple(like(None, a) for a in args), {k: like(k, v) for k, v in kwargs.items()}


def _vocab(module: Any) -> int | None:
    config = getattr(module, "config", None)
    size = getattr(config, "vocab_size", None)
    if isinstance(size, int):
        return size
    embedding = next((m for m in module.modules() if type(m).__name__ == "Embedding"), None)
    return getattr(embedding, "num_embeddings", None)


def ceiling(reading: dict[str, Any], device: str, job: dict[str, Any], rows: int) -> dict[str, Any]:
    """The worst-case steps' peak against the limit, as the built-in runner records it; a TrialFault
    `oom` where it does not fit."""
    from ...engine.train import TrialFault
    from ...probes import memory
    from ...probes.device import memory_total

    limit = memory.limit_bytes(memory_total(device), job.get("mem_limit"), job.get("mem_margin", memory.DEFAULT_MARGIN))
    found = {**reading, "limit_bytes": limit, "fits": memory.fits(reading["bytes"], limit),
             "shape": f"{rows} x {job['max_len']} tokens"}
    if not found["fits"]:
        raise TrialFault("oom", f"the worst-case batch ({found['shape']}) peaks at {reading['bytes'] / 2**30:.2f} GiB, "
                         f"over the limit of {limit / 2**30:.2f} GiB", {"ceiling": found})
    return found


def synchronize() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():  # CUDA-only: timing needs the device idle
        torch.cuda.synchronize()


def autocast_dtype() -> str:
    """The autocast dtype in force ("" where none is), for either device kind."""
    import torch

    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            return str(torch.get_autocast_dtype(device)).removeprefix("torch.")
    return ""


def timed_backward(meter: Any) -> Any:
    """torch.autograd.backward, which loss.backward() and the frameworks' backward call, marked for the
    profile steps (`meter.phases`); returns the undo."""
    import types

    import torch

    original = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        meter.phases.backward_start()
        try:
            return original(*args, **kwargs)
        finally:
            meter.phases.backward_end()

    torch.autograd.backward = backward
    return types.SimpleNamespace(remove=lambda: setattr(torch.autograd, "backward", original))
