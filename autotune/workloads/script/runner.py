"""Runs a user's training script as it is and measures it: `python -m autotune.workloads.script.runner SPEC RESULT`.

The script runs in a per-trial copy of the user's folder (workloads/script/tree.py: a reflink where the
file system allows, else a plain copy), with its configs edited to say this trial's knobs, so the script
finds its files at the paths it expects and nothing it writes, truncates or deletes reaches the user's.

Process-wide hooks are installed before the script starts:
- an optimizer step post-hook (every optimizer) times each step, with the device synchronised;
- forward hooks on every module find the outermost model (the largest module called from the top)
  and read rows and real tokens from its inputs and, for the first two optimizer steps (dropout off),
  per-row losses from the loss the script computes (parity, script_losses.py), keyed by each row's
  tokens so batching order does not matter;
- an optimizer step pre-hook and a wrapper of torch.autograd.backward mark the phases of the profile
  steps (workloads/script/stages.py);
- the memory probe and the NVML sampler run as for the built-in runner.
After two parity steps, `warmup_max` warm-up steps and `measure_steps` measured ones come the
`profile_steps` timed phase by phase and, where the spec asks for the ceiling, two steps on
worst-case rows (stages.py); then the hook ends the script by raising `MeasurementDone` through it.
A trial with a launcher (`accelerate launch`, `torchrun`) runs inside it (workloads/script/launch.py).
"""

from __future__ import annotations

import os
import random
import runpy
import shutil
import sys
import time
import types
from pathlib import Path
from typing import Any

from ...config.messages import PARITY_STEPS, FrameReply, PeakReading, TrialSpec, thawed
from ...engine import common
from ...engine.common import Reply
from .losses import LossReader, patch_cross_entropy
from .rows import Census, ParityRows, row_keys, watch_loaders
from .stages import autocast_dtype, synchronize, timed_backward
from .workdir import _edited, as_main, build_workdir  # noqa: F401 - _edited: the tests' handle on a config's edit


_is_compiling: Any = None   # torch.compiler.is_compiling, bound once the hooks are installed


def _compiling() -> bool:
    return _is_compiling is not None and _is_compiling()


class MeasurementDone(BaseException):
    """Ends the user's script once the measured steps are in (BaseException: scripts catch Exception)."""


class Meter:
    def __init__(self, warmup: int, measure: int, device: str = "cpu", profile_steps: int = 0, max_len: int = 0,
                 worst_steps: bool = False) -> None:
        """`warmup`, `measure`, `profile_steps`: the spec's step budget; `worst_steps`: the worst-case steps
        at `max_len` run after the profiled ones (a trial asked for its ceiling)."""
        from .stages import WORST_STEPS, Phases, WorstCase

        self.warmup, self.measure = warmup, measure
        self.device = device
        # After the measured steps: the profile steps, then (a memory knob moved) the worst-case ones.
        self.measured_end = PARITY_STEPS + self.warmup + self.measure
        self.profile_end = self.measured_end + profile_steps
        self.end = self.profile_end + (WORST_STEPS if worst_steps and max_len else 0)
        self.phases = Phases(synchronize)
        self.worst = WorstCase(max_len)
        self.measured_peak: PeakReading | None = None
        self.worst_peak: PeakReading | None = None
        self.worst_narrowest: int | None = None   # the narrowest model call of the worst-case steps
        self.root: Any = None
        self.depth = 0
        self.rows = self.tokens = self.padded = 0
        self.step_rows: list[int] = []
        self.step_tokens: list[int] = []
        self.step_padded: list[int] = []
        self.ends: list[float] = []
        self.reader = LossReader()   # per-row losses for parity (script_losses.py)
        self.census = Census()       # which rows each step trained, by content (rows.py)
        self.trainable = self.frozen = self.params = 0
        self.optimizer: Any = None
        # What the step was seen to do (script_checks.py): per model call and per optimizer step.
        self.calls = 0
        self.step_calls: list[int] = []
        self.micro_rows: list[int] = []
        self.widths: list[int] = []
        self.row_lengths: list[float] = []   # mean real tokens per row, per call: the row order's trace
        self.dtypes: set[str] = set()
        self.inner_dtype: str | None = None
        self.packed = False

    @classmethod
    def of(cls, spec: TrialSpec, device: str) -> "Meter":
        """The meter of a trial (or a probe) of this spec."""
        max_len = spec.job.max_len or 0
        return cls(spec.warmup_max, spec.measure_steps, device, spec.profile_steps, max_len,
                   spec.ceiling and spec.kind == "trial")

    # forward hooks --------------------------------------------------------------------------------
    def before(self, module: Any, args: Any) -> None:
        if _compiling():
            return  # inside a graph dynamo traces: the hook is a no-op there, so compile runs as without it
        if self.depth == 0:
            size = sum(p.numel() for p in module.parameters())
            if self.root is None or (module is not self.root and size > self._size):
                self.root, self._size = module, size
                self.params = size
                # FLOPs come from matmul weights only: an embedding lookup is not a matmul (a tied
                # output head is, and is counted through its Linear).
                weights = {id(m.weight): m.weight for m in module.modules()
                           if type(m).__name__ in ("Linear", "Conv1D") and getattr(m, "weight", None) is not None}
                self.trainable = sum(w.numel() for w in weights.values() if w.requires_grad)
                self.frozen = sum(w.numel() for w in weights.values() if not w.requires_grad)
                if len(self.ends) < PARITY_STEPS:
                    self.reader.quiet(module)
            if module is self.root:
                self.reader.begin()
                self.inner_dtype = None
                self.phases.forward_start()
        elif self.depth == 1 and self.inner_dtype is None:
            # accelerate's prepare() puts autocast inside the model's forward, where the hooks on the
            # model itself never see it: its first submodule does.
            self.inner_dtype = autocast_dtype()
        self.depth += 1

    def after(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if _compiling():
            return
        self.depth = max(0, self.depth - 1)
        if module is not self.root:
            return
        self.reader.in_model = False
        self.phases.forward_end()
        if not module.training or self.worst.active:
            return   # the worst-case rows are autotune's, not the script's: nothing of them is observed
        import torch

        ids = kwargs.get("input_ids", args[0] if args and isinstance(args[0], torch.Tensor) else None)
        if ids is None or ids.dim() != 2:
            return
        mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
        keyed = row_keys(ids, mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None, positions)
        self.rows += len(keyed)
        self._observe(module, ids, len(keyed))
        real = sum(span.stop - span.start for _, span, _ in keyed)
        self.tokens += real
        if keyed:
            self.row_lengths.append(real / len(keyed))
        self.padded += ids.numel()
        self.census.add(len(self.ends) + 1, keyed, ids)
        self.reader.end(len(self.ends) + 1, keyed, ids, args, kwargs, output)

    def _observe(self, module: Any, ids: Any, rows: int) -> None:
        import torch

        self.calls += 1
        self.micro_rows.append(rows)
        self.widths.append(int(ids.shape[1]))
        self.packed = self.packed or (ids.shape[0] == 1 and rows > 1)
        device = ids.device.type
        if torch.is_autocast_enabled(device):
            self.dtypes.add(str(torch.get_autocast_dtype(device)).removeprefix("torch."))
        elif self.inner_dtype:
            self.dtypes.add(self.inner_dtype)
        else:
            weight = next((p for p in module.parameters() if p.is_floating_point()), None)
            if weight is not None:
                self.dtypes.add(str(weight.dtype).removeprefix("torch."))

    # optimizer hook -------------------------------------------------------------------------------
    def stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:

        # A wrapper (accelerate's AcceleratedOptimizer) is an Optimizer whose step calls the inner
        # one's: both hooks fire for one real step, so only the first optimizer seen counts.
        if self.optimizer is None:
            self.optimizer = optimizer
        elif optimizer is not self.optimizer:
            return

        synchronize()
        self.ends.append(time.perf_counter())
        if len(self.ends) > self.profile_end:
            return self._worst_step()
        if self.measured_end < len(self.ends) <= self.profile_end:
            self.phases.optimizer_end(self.ends[-1] - self.ends[-2])
        self.step_rows.append(self.rows)
        self.step_tokens.append(self.tokens)
        self.step_padded.append(self.padded)
        self.step_calls.append(self.calls)
        self.rows = self.tokens = self.padded = self.calls = 0
        if len(self.ends) == PARITY_STEPS:
            self.reader.restore()   # the timed steps run with the script's own dropout
        if len(self.ends) == self.measured_end:
            from ...probes import memory

            self.measured_peak = memory.read_peak(self.device)
            if self.profile_end > self.measured_end:
                self.phases.begin()
        if len(self.ends) == self.profile_end:
            self.phases.stop()
            self._worst_step()

    def _worst_step(self) -> None:
        """Past the profile steps: start the worst-case steps, or read their peak and end the script."""
        from ...probes import memory

        if len(self.ends) >= self.end:
            if self.worst.active:
                self.worst_peak = memory.read_peak(self.device) if self.worst.complete else None
                self.worst_narrowest = self.worst.narrowest
            self.worst.end()
            raise MeasurementDone()
        if not self.worst.active and self.root is not None:
            self.worst.begin(self.root)
        elif len(self.ends) == self.profile_end + 1:
            self.worst.restart()               # the lead-in is over; the optimizer state is there
            memory.reset_peak(self.device)

    def optimizer_starts(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.optimizer is None or optimizer is self.optimizer:
            self.phases.optimizer_start()

    @property
    def parity(self) -> dict[str, list[float]] | None:
        return self.reader.parity

    @property
    def parity_rows(self) -> ParityRows | None:
        """The per-row losses by row key with the rows every step trained (rows.py), for parity by row."""
        # The worst-case steps run autotune's rows, not the script's: they are not among the steps compared.
        steps = min(len(self.ends), self.profile_end)
        return self.census.summary(self.reader.losses, steps) if self.parity is not None else None

    def reading(self) -> LossReader | None:
        """The loss reader while parity steps run outside a graph dynamo traces, else None."""
        return None if _compiling() or len(self.ends) >= PARITY_STEPS else self.reader


def _install(meter: Meter) -> list[Any]:
    import torch
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optimizer_hooks

    global _is_compiling
    _is_compiling = torch.compiler.is_compiling
    return [nn_module.register_module_forward_pre_hook(meter.before),
            nn_module.register_module_forward_hook(meter.after, with_kwargs=True, always_call=True),
            optimizer_hooks.register_optimizer_step_pre_hook(meter.optimizer_starts),
            optimizer_hooks.register_optimizer_step_post_hook(meter.stepped),
            types.SimpleNamespace(remove=patch_cross_entropy(meter.reading)), timed_backward(meter),
            watch_loaders(meter.census)]


def trial(spec: TrialSpec) -> Reply:
    import torch

    from ...probes import memory, nvml
    from ...probes.stats import impossible
    from ...probes.timing import median
    from ...engine.train import TrialFault
    from ...probes.profile import breakdown
    from .stages import worst_case

    common.inject_early_fault(spec.inject_fault)
    own = thawed(spec.script or {})
    os.environ.update(own.get("env", {}))   # accelerate's precision, where the script reads it there
    mirror, script, argv, copied = build_workdir(spec)
    seed = spec.job.seed
    random.seed(seed)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() and not spec.job.smoke else "cpu"
    if device == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    meter = Meter.of(spec, device)
    handles = _install(meter)
    memory.reset_peak(device)
    sampler = nvml.Sampler(device).start()
    try:
        with as_main(script, argv, mirror):
            runpy.run_path(str(script), run_name="__main__")
    except MeasurementDone:
        pass
    except Exception as error:  # noqa: BLE001 - an OOM on the worst-case rows is the ceiling's answer
        from ...engine.train import is_oom

        if not (meter.worst.active and is_oom(error)):
            raise
        raise TrialFault("oom", f"out of memory at the worst-case batch ({meter.worst.rows} x "
                         f"{spec.job.max_len} tokens)") from None
    finally:
        sampler.stop()
        for handle in handles:
            handle.remove()
    needed, steps = meter.measured_end, len(meter.ends)
    if steps < meter.end:
        what = "measuring needs" if steps < needed else "the steps after the measured ones need"
        raise TrialFault("invalid", f"the script ended after {steps} optimizer steps; {what} {meter.end} "
                         f"({PARITY_STEPS} parity, {spec.warmup_max} warm-up, {spec.measure_steps} measured, "
                         f"{meter.profile_end - needed} profiled, {meter.end - meter.profile_end} at the worst-case batch)")
    window = slice(needed - spec.measure_steps, needed)
    times = [b - a for a, b in zip(meter.ends[:needed], meter.ends[1:needed])]
    measured, warmup = times[-spec.measure_steps:], times[:-spec.measure_steps]
    rows = sum(meter.step_rows[window])
    tokens = meter.step_tokens[window]
    seconds = sum(measured)
    problem = impossible(measured)
    if problem or rows == 0:
        raise TrialFault("invalid", problem or "no rows reached the model in the measured steps")
    flops = sum(tokens) * (6 * meter.trainable + 4 * meter.frozen)
    precision = spec.knobs.precision
    if meter.dtypes == {"float32"} and precision in ("bf16", "fp16"):
        # The hooks saw every forward in fp32 (a script whose bf16 flag gives no autocast here): MFU is
        # against the peak of what ran, not of what the settings say (the bf16 peak of a CPU can be 20x lower).
        precision = "fp32"
    peak = spec.peak_flops(precision)
    mfu = flops / seconds / peak if peak else None
    config = getattr(meter.root, "config", None)
    padded = sum(meter.step_padded[window])
    measurement = {
        "device": device, "samples_per_s": rows / seconds, "tokens_per_s": sum(tokens) / seconds,
        "median_step_s": median(measured), "step_times_s": [round(t, 6) for t in measured],
        "warmup_times_s": [round(t, 6) for t in warmup], "real_tokens_per_step": tokens,
        "model_flops": flops, "hardware_flops": flops, "mfu": mfu, "hfu": mfu, "peak_flops": peak,
        "peak_memory": meter.measured_peak or memory.read_peak(device), "parity_losses": meter.parity,
        "parity_rows": meter.parity_rows, "parity_note": meter.reader.why_not,
        "nvml": sampler.summary(),
        "env": {"torch": torch.__version__, "threads": torch.get_num_threads()},
        "model": {"params": meter.params, "matmul_params": meter.trainable + meter.frozen,
                  "trainable_params": sum(p.numel() for p in meter.root.parameters() if p.requires_grad),
                  "model_type": getattr(config, "model_type", None) or type(meter.root).__name__},
        "data": {"padding_share": round(1 - sum(tokens) / padded, 4) if padded else None},
        "tree": copied,
        "breakdown": breakdown(meter.phases.totals(), padded - sum(tokens), sum(tokens)),
    }
    # stages.py reads the job's stored form (its mem_limit, mem_margin and max_len).
    measurement.update(worst_case(meter, device, spec.job.to_dict()))
    from .checks import mismatch, observed

    seen = observed(meter)
    measurement["observed"] = seen
    wrong = mismatch(own.get("expect", {}), seen, spec.job.max_len)
    if wrong:
        raise TrialFault("invalid", wrong, {"measurement_rejected": measurement})
    if mfu is not None and mfu > 1:
        raise TrialFault("invalid", f"MFU {mfu:.2f} exceeds the measured peak", {"measurement_rejected": measurement})
    return {"measurement": measurement}


def frame(spec: TrialSpec) -> FrameReply:
    from ...probes.device import device_facts, pick_device

    device = "cpu" if spec.job.smoke else pick_device()
    if device == "cpu":
        import torch

        # As the built-in runner does: one core stays free, or OpenMP spin-waits make timings swing.
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    return {"frame": {"device": device_facts(device, thawed(spec.peak_cache)), "model": {}, "data": {},
                      "script": list((spec.script or {}).get("listing", []))}}


def body(spec: TrialSpec) -> Reply:
    if spec.kind == "frame":
        return frame(spec)
    if spec.kind == "parse":
        from .parsed import parse

        try:
            return parse(spec)
        finally:
            shutil.rmtree(spec.work_folder / "tree", ignore_errors=True)
    from . import launch

    if (spec.script or {}).get("launcher") and not launch.launched():
        return launch.relay(spec)   # the launched runner runs the trial (and cleans its tree)
    try:
        return trial(spec)
    finally:
        # The trial's own copy: the user's folder is not under it.
        shutil.rmtree(spec.work_folder / "tree", ignore_errors=True)


def entry(spec_path: Path, result_path: Path) -> int:
    from ...engine.train import TrialFault, is_oom

    return common.execute(body, is_oom, TrialFault, spec_path, result_path)


if __name__ == "__main__":
    sys.exit(entry(Path(sys.argv[1]), Path(sys.argv[2])))
