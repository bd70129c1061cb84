"""The steps a script trial runs after its measured ones: where the time goes, and the memory ceiling.

- Profile steps (`profile_steps`): each boundary the hooks see is timed with the device synchronised,
  which serialises work, so these steps come after the measured window, as the built-in runner's do:
  data wait (the previous step's end, or the previous backward, to the model's forward), forward
  (the model's forward and the loss computed from its output), backward (`torch.autograd.backward`,
  which `loss.backward()`, `accelerator.backward` and Lightning all call), optimizer (the optimizer's
  step, less the forward and backward a closure runs inside it, as Lightning's does); the rest of the
  step is host time between them.
- Worst-case steps (`ceiling`): optimizer steps in which every batch out of the script's DataLoader
  holds rows of `max_len` real tokens (random ids, a full mask, labels the ids), as many rows as the
  script's own micro-batch, with the optimizer state already there and the accumulation as the script
  runs it: a config whose worst batch does not fit ends `oom` before it could fail hours into a real
  run. A script whose rows are max_len wide already (nanoGPT's windows) needs no widening.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, TypedDict

from ...config.messages import PeakReading
from ...config.types import JsonValue
from ...probes.profile import PhaseTimer

WORST_STEPS = 3   # a lead-in step (batches fetched ahead), then the two whose peak is read


class WorstCaseFields(TypedDict, total=False):
    """What the worst-case steps add to a script trial's measurement: the ceiling (the peak with its limit,
    whether it fits and the batch's shape, "4 x 256 tokens"), or why there is none."""

    ceiling: PeakReading
    ceiling_unchecked: str


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
    """Rows of max_len real tokens in every batch the script's DataLoader hands it, for the worst-case
    steps: widened where they come out of the loader, so the script's own labels, masks and loss see
    the same rows its model does. Frameworks fetch a batch or two ahead (accelerate, Lightning), so
    the first worst-case step is a lead-in: the peak is read over the two after it, and only where
    every call of the model in them was max_len wide."""

    def __init__(self, max_len: int) -> None:
        self.max_len = max_len
        self.handles: list[Any] = []
        self.rows = 0
        self.narrowest: int | None = None
        self.vocab = 2

    @property
    def active(self) -> bool:
        return bool(self.handles)

    def begin(self, root: Any) -> None:
        from torch.utils.data import dataloader

        self.vocab = max(2, _vocab(root) or 2)
        original = dataloader._BaseDataLoaderIter.__next__

        def widened(iterator: Any) -> Any:
            return self.widen(original(iterator))

        setattr(dataloader._BaseDataLoaderIter, "__next__", widened)
        self.handles = [lambda: setattr(dataloader._BaseDataLoaderIter, "__next__", original),
                        root.register_forward_pre_hook(self.seen, with_kwargs=True).remove]

    def restart(self) -> None:
        """The lead-in step is over: from here every call must be max_len wide."""
        self.narrowest, self.rows = None, 0

    def end(self) -> None:
        for undo in self.handles:
            undo()
        self.handles = []

    @property
    def complete(self) -> bool:
        return self.narrowest is not None and self.narrowest >= self.max_len

    def seen(self, module: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        # `kwargs`: the keyword arguments of the user's own model call, whatever its forward takes.
        import torch

        ids = kwargs.get("input_ids", args[0] if args and isinstance(args[0], torch.Tensor) else None)
        if isinstance(ids, torch.Tensor) and ids.dim() == 2:
            self.rows = max(self.rows, ids.shape[0])
            self.narrowest = ids.shape[1] if self.narrowest is None else min(self.narrowest, ids.shape[1])

    def widen(self, batch: Any) -> Any:
        """The batch with each 2-D integer tensor of the token ids' shape at max_len: random ids (the same
        in ids and labels), a full mask, positions counting up."""
        import torch

        tensors = _tensors(batch)
        ids = next((t for name, t in tensors if name in ("input_ids", None) and _token_like(t)), None)
        if ids is None or ids.shape[1] >= self.max_len:
            return batch
        worst = torch.randint(1, self.vocab, (ids.shape[0], self.max_len), dtype=ids.dtype, device=ids.device)

        def like(name: str | None, value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or value.shape != ids.shape or value.is_floating_point():
                return value
            if name and "mask" in name:
                return torch.ones(worst.shape, dtype=value.dtype, device=value.device)
            if name == "position_ids":
                return torch.arange(self.max_len, device=value.device, dtype=value.dtype).expand(ids.shape[0], -1)
            return worst.to(value.dtype).clone()
        if type(batch) is dict:
            return {k: like(k, v) for k, v in batch.items()}
        if isinstance(batch, dict) or hasattr(batch, "keys"):   # transformers' BatchEncoding, a UserDict
            return _set_items(batch, like)
        if isinstance(batch, (list, tuple)):
            return type(batch)(like(None, v) for v in batch)
        return like(None, batch)


def _set_items(batch: Any, like: Callable[[str | None, Any], Any]) -> Any:
    for key in list(batch.keys()):   # a BatchEncoding or another mapping that is not a plain dict
        batch[key] = like(key, batch[key])
    return batch


def _token_like(value: Any) -> bool:
    return value.dim() == 2 and not value.is_floating_point() and value.dtype.is_signed


def _tensors(batch: Any) -> list[tuple[str | None, Any]]:
    import torch

    if isinstance(batch, torch.Tensor):
        return [(None, batch)]
    if isinstance(batch, dict) or hasattr(batch, "keys"):
        return [(k, v) for k, v in batch.items() if isinstance(v, torch.Tensor)]
    if isinstance(batch, (list, tuple)):
        return [(None, v) for v in batch if isinstance(v, torch.Tensor)]
    return []


def _vocab(module: Any) -> int | None:
    config = getattr(module, "config", None)
    size = getattr(config, "vocab_size", None)
    if isinstance(size, int):
        return size
    embedding = next((m for m in module.modules() if type(m).__name__ == "Embedding"), None)
    return getattr(embedding, "num_embeddings", None)


def ceiling(reading: PeakReading, device: str, job: Mapping[str, JsonValue], rows: int) -> PeakReading:
    """The worst-case steps' peak against the limit, as the built-in runner records it; a TrialFault
    `oom` where it does not fit. `job`: the trial spec's job (job.json, checked against its schema)."""
    from ...engine.train import TrialFault
    from ...probes import memory
    from ...probes.device import memory_total

    mem_limit, margin, max_len = job.get("mem_limit"), job.get("mem_margin", memory.DEFAULT_MARGIN), job["max_len"]
    assert (mem_limit is None or isinstance(mem_limit, int)) and isinstance(margin, (int, float)), "job.json's types"
    limit = memory.limit_bytes(memory_total(device), mem_limit, margin)
    found: PeakReading = {**reading, "limit_bytes": limit, "fits": memory.fits(reading["bytes"], limit),
                             "shape": f"{rows} x {max_len} tokens"}
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


def worst_case(meter: Any, device: str, job: Mapping[str, JsonValue]) -> WorstCaseFields:
    """The measurement's `ceiling` after the worst-case steps (nothing where none ran), or why there is
    none: the rows never reached the model at max_len."""
    if meter.worst_peak is not None:
        return {"ceiling": ceiling(meter.worst_peak, device, job, meter.worst.rows)}
    if meter.end <= meter.profile_end:
        return {}
    return {"ceiling_unchecked": f"the worst-case rows did not reach the model (its narrowest call was "
                                 f"{meter.worst_narrowest} tokens wide): the script's batches do not come out "
                                 "of a torch DataLoader"}
