"""What a trial's steps are and what they measured, whatever trains them (autotune's own loop or
`trl.SFTTrainer`): the plan of steps, the step log, and the measurement built from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping

import torch

from ..config.messages import MeasurementDoc, PeakReading, TrialReply, TrialSpec
from ..config.types import JsonObject


class TrialFault(Exception):
    """An expected end of a trial: carries the state (oom, invalid) and the reason."""

    def __init__(self, state: str, reason: str, details: Mapping[str, object] | None = None) -> None:
        super().__init__(reason)
        # Keys the result adds beside the state (measurement_rejected, ceiling, remeasure): run_result.json's.
        self.state, self.reason, self.details = state, reason, dict(details or {})


@dataclass
class Plan:
    """Which micro-batches run, in order: two parity steps, warm-up until settled, measured steps."""

    parity: list[list[list[int]]]
    measured: list[list[list[int]]]
    warmup_max: int
    profile_steps: int = 0
    warm: bool = False
    warmup_run: int = 0
    # (kind, index, micro-batches) of each step as it was handed out, where a consumer needs to look back.
    record: list[tuple[str, int, list[list[int]]]] = field(default_factory=list)

    def steps(self) -> Iterator[tuple[str, int, list[list[int]]]]:
        """(kind, index, micro-batches of row ids) per optimizer step, decided lazily: warm-up ends when
        `warm` is set, which the consumer does between whole steps."""
        for index, step in enumerate(self.parity):
            yield "parity", index, step
        # Checked between whole steps: with loader workers prefetching (2 micro-batches each unless
        # dataloader_prefetch_factor says more), a few more warm-up steps may run than strictly needed,
        # never a partial one.
        # Warm-up repeats the last parity step: settling is judged on consecutive steps of the same rows,
        # which rows of other lengths or images (alternating steps) would never show.
        while not self.warm and self.warmup_run < self.warmup_max:
            yield "warmup", self.warmup_run, self.parity[-1]
            self.warmup_run += 1
        for index, step in enumerate(self.measured):
            yield "measured", index, step
        for index in range(self.profile_steps):
            yield "profile", index, self.parity[index % len(self.parity)]

    def items(self, targets_per_row: list[int]) -> Iterator[tuple]:
        """The steps' micro-batches: (kind, index, row ids, the step's loss targets)."""
        for kind, index, step in self.steps():
            targets = sum(targets_per_row[r] for micro in step for r in micro)
            for micro in step:
                yield (kind, index, tuple(micro), targets)

    def most_steps(self) -> int:
        """Steps if warm-up runs to its limit."""
        return len(self.parity) + self.warmup_max + len(self.measured) + self.profile_steps


@dataclass
class StepLog:
    times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    warmup_times: list[float] = field(default_factory=list)
    parity: dict[str, list[float]] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    measured_rows: int = 0
    padded_tokens: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    profile_steps: int = 0


def accepted(spec: TrialSpec, log: StepLog, measurement: MeasurementDoc) -> TrialReply:
    """The trial's result, unless its window is impossible (wrong rows, timings no clock gives, MFU over
    the measured peak) or the device slowed itself during it (then it is measured once more)."""
    from ..probes.stats import impossible

    expected_rows = spec.whole_job.effective_batch * spec.measure_steps
    mfu = measurement.get("mfu")
    problem = (f"the measured window trained {log.measured_rows} rows, not {expected_rows}"
               if log.measured_rows != expected_rows else impossible(log.times))
    if problem is None and mfu is not None and mfu > 1:
        problem = _against_fastest(spec, measurement)
    if problem:
        raise TrialFault("invalid", problem, {"measurement_rejected": measurement})
    throttled = (measurement.get("nvml") or {}).get("throttle_reasons")
    if throttled:
        raise TrialFault("invalid", f"the device slowed itself during the window ({', '.join(throttled)})",
                         {"measurement_rejected": measurement, "remeasure": True})
    return {"measurement": measurement}


def _against_fastest(spec: TrialSpec, measurement: MeasurementDoc) -> str | None:
    """An MFU over 1 is judged again against the device's fastest product now, of any precision: the
    recorded peak is a single reading, taken once per device and perhaps under load. Within that bound the
    measurement stands, its utilisation against it and `peak_remeasured` saying so; beyond it, the timing
    itself is wrong."""
    from ..probes import peaks

    recorded = {name: flops for name, flops in ((spec.peaks or {}).get("matmul_flops") or {}).items() if flops}
    precision, fresh = peaks.fastest_product(measurement["device"], sorted(set(recorded) | {"fp32"}))
    bound_name, bound = max([(precision, fresh), *recorded.items()], key=lambda pair: pair[1])
    scale = measurement["peak_flops"] / bound
    mfu = measurement["mfu"] * scale
    if mfu > 1:
        return (f"MFU {measurement['mfu']:.2f} exceeds the measured peak, and {mfu:.2f} the device's fastest "
                f"product now ({bound_name}): the timing is wrong")
    measurement["peak_remeasured"] = {"bound": bound_name, "flops": bound, "recorded_flops": measurement["peak_flops"],
                                      "recorded_mfu": measurement["mfu"]}
    hfu = measurement.get("hfu")
    measurement["peak_flops"], measurement["mfu"] = bound, mfu
    measurement["hfu"] = hfu * scale if hfu is not None else None
    return None


def measurement_of(device: str, log: StepLog, window_flops: dict[str, float], peak_flops: float | None,
                   peak_memory: PeakReading, nvml: JsonObject | None, ceiling: PeakReading | None) -> MeasurementDoc:
    """A trial's measurement from its step log: rows and real tokens over the measured seconds (every
    trial times the same rows, so totals compare fairly even where a knob reorders rows between steps),
    MFU/HFU against the measured peak, where the time went."""
    import os

    from ..probes import flops, profile
    from ..probes.timing import median

    seconds = sum(log.times)
    utilisation = {name: flops.mfu(window_flops[kind], seconds, peak_flops) if peak_flops and seconds > 0 else None
                   for name, kind in (("mfu", "model"), ("hfu", "hardware"))}
    measurement: MeasurementDoc = {
        "device": device,
        "samples_per_s": log.measured_rows / seconds if seconds > 0 else 0.0,
        "tokens_per_s": sum(log.tokens) / seconds if seconds > 0 else 0.0,
        "median_step_s": median(log.times), "step_times_s": [round(t, 6) for t in log.times],
        "warmup_times_s": [round(t, 6) for t in log.warmup_times], "real_tokens_per_step": log.tokens,
        "model_flops": window_flops["model"], "hardware_flops": window_flops["hardware"],
        **utilisation, "peak_flops": peak_flops, "peak_memory": peak_memory,
        "parity_losses": log.parity, "final_loss": log.losses[-1],
        "breakdown": profile.breakdown(log.phases, log.padded_tokens, sum(log.tokens)), "nvml": nvml,
        "env": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")},
    }
    if ceiling:
        measurement["ceiling"] = ceiling
    return measurement
