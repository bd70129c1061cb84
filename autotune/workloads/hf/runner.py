"""Built-in Hugging Face runner: `python -m autotune.workloads.hf.runner SPEC RESULT`.

`kind=frame` sizes up the job (device, model, data) and writes the run's rows file;
`kind=trial` trains parity + warm-up + measured steps with one config and reports the measurement:
a text model inside the installed `trl.SFTTrainer` (workloads/hf/sft.py, read by engine/instruments.py),
an image-text model in autotune's own loop (engine/train.py), whose collator packs images with rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.messages import PARITY_STEPS, FrameReply, PeakReading, TrialReply, TrialSpec, thawed
from ...config.types import JsonObject
from ...engine import common
from ...engine.data import StoredRows

# Rows the frame samples for the length spread of a real dataset.
FRAME_SAMPLE_ROWS = 2000
# Image-text examples cost an image decode and a token count each: a smaller sample for the spread.
VLM_FRAME_SAMPLE_ROWS = 256


def frame(spec: TrialSpec) -> FrameReply:
    from ...probes.device import device_facts
    from ...engine.data import length_facts, load_examples, synthetic_rows, tokenize_rows, write_rows
    from .models import build_model, load_tokenizer, model_facts, resolve_config, save_config

    from ..vlm.vision import is_vlm
    from ..vlm.frame import frame_vlm, text_limits

    job, device = spec.whole_job, common.setup_device(spec)
    config, source = resolve_config(job)
    save_config(config, spec.model_config_file)
    model = build_model(job, spec.whole_knobs, device, config)
    needed = int(spec.rows_needed or 0)
    if is_vlm(config):
        data, limits = frame_vlm(spec, job, config, model, needed, VLM_FRAME_SAMPLE_ROWS)
        return {"frame": {"device": device_facts(device, thawed(spec.peak_cache)),
                          "model": {**model_facts(model, config), "source": source}, "data": data,
                          "limits": limits + loop_limits(job, config)}}
    if job.dataset == "synthetic":
        vocab = config.vocab_size
        sample = synthetic_rows(max(needed, FRAME_SAMPLE_ROWS), job.max_len, vocab, job.seed)
        pad_id = 0
    else:
        tokenizer = load_tokenizer(job)
        examples = load_examples(job.dataset, job.seed, max(needed, FRAME_SAMPLE_ROWS))
        sample = tokenize_rows(examples, tokenizer, job.max_len)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        vocab = config.vocab_size
    # Small datasets repeat, so every trial still has the rows it needs in one seeded order.
    rows = [sample[i % len(sample)] for i in range(needed)]
    write_rows(spec.rows_file, rows, pad_id, vocab)
    return {"frame": {"device": device_facts(device, thawed(spec.peak_cache)), "model": {**model_facts(model, config), "source": source},
                      "data": {**length_facts(sample, job.max_len), "rows_available": len(sample),
                               "dataset": job.dataset},
                      "limits": text_limits() + _sft_limits(job.method, job.allow_numerics_change)}}


def sft_limits(job: Job | Mapping[str, object]) -> list[JsonObject]:
    """What a text trial inside trl.SFTTrainer cannot be asked to change, and the job's own limits
    (`job`: a Job, or its `method` and `allow_numerics_change` alone, as `autotune suggest` has them)."""
    if isinstance(job, Job):
        return _sft_limits(job.method, job.allow_numerics_change)
    return _sft_limits(str(job.get("method", "sft")), bool(job.get("allow_numerics_change")))


def _sft_limits(method: str, numerics_allowed: bool) -> list[JsonObject]:
    from ...config.knobs import job_limits

    own: list[JsonObject] = [{"knob": "chunked_cross_entropy", "value": True, "silent": False,
                              "reason": "trl.SFTTrainer computes the loss chunk by chunk already (its fused LM "
                                        "head): the full logits never exist there"}]
    return own + job_limits(method, numerics_allowed)


def loop_limits(job: Job, config: Any) -> list[JsonObject]:
    """What autotune's own loop (image-text models) does not do, and the job's own limits."""
    from ...config.knobs import job_limits

    limits: list[JsonObject] = [
        {"knob": name, "value": True, "silent": False,
         "reason": f"{why}: autotune's own loop (image-text models) trains without trl.SFTTrainer"}
        for name, why in (("use_liger_kernel", "liger-kernel is applied by trl.SFTTrainer"),
                          ("activation_offloading", "activation offloading is TRL's"))]
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "final_logit_softcapping", None) or getattr(text, "logit_scale", None):
        limits.append({"knob": "chunked_cross_entropy", "value": True, "silent": False,
                       "reason": "this model scales or soft-caps its logits, which the chunked loss does not"})
    return limits + job_limits(job.method, job.allow_numerics_change)


def _ceiling(spec: TrialSpec, job: Job, device: str, stored: StoredRows, vision: Any = None) -> PeakReading:
    """Two full optimizer steps on micro-batches of max_len rows, in a model (and, for text, a trainer) of
    its own, before anything is timed: a config that cannot survive its worst batch is `oom` without
    spending a measurement."""
    import gc

    import torch

    from ...probes import memory
    from ...probes.device import memory_total
    from .models import build_model, load_config
    from ...engine.train import Engine, TrialFault, worst_case_peak

    knobs = spec.whole_knobs
    limit = memory.limit_bytes(memory_total(device), job.mem_limit, job.mem_margin)
    config = load_config(spec.model_config_file)
    if vision is None:
        from .sft import worst_case_peak as sft_peak

        model = build_model(job, knobs, device, config, for_trainer=True)
        reading = sft_peak(job, knobs, device, model, stored["vocab_size"], stored["pad_id"])
        del model
    else:
        engine = Engine(build_model(job, knobs, device, config), knobs, device)
        reading = worst_case_peak(engine, knobs, job, stored["vocab_size"], stored["pad_id"], vision, stored["rows"])
        del engine
    gc.collect()
    if device == "cuda":  # CUDA-only
        torch.cuda.empty_cache()
    shape = f"{knobs.per_device_train_batch_size} x {job.max_len} tokens"
    if reading.get("fits") is False:
        raise TrialFault("oom", reading["reason"], {"ceiling": {**reading, "limit_bytes": limit}})
    ceiling: PeakReading = {**reading, "limit_bytes": limit, "fits": memory.fits(reading["bytes"], limit)}
    if not ceiling["fits"]:
        raise TrialFault("oom", f"the worst-case batch ({shape}) peaks at {reading['bytes'] / 2**30:.2f} GiB, over "
                         f"the limit of {limit / 2**30:.2f} GiB", {"ceiling": ceiling})
    return ceiling


def trial(spec: TrialSpec) -> TrialReply:
    from ...probes import memory, nvml
    from ...engine.data import read_rows
    from .models import build_model, load_config
    from ...engine.train import Engine, accepted, measurement_of, run_steps
    from ..vlm.frame import vision_rows

    import os

    from .trl_args import environment

    # The config's allocator settings, before anything starts CUDA in this child.
    os.environ.update(environment(spec.whole_knobs))
    job, knobs, device = spec.whole_job, spec.whole_knobs, common.setup_device(spec)
    common.inject_early_fault(spec.inject_fault)
    rows_path = spec.rows_file
    stored = read_rows(rows_path)
    config = load_config(spec.model_config_file)
    vision = vision_rows(job, knobs, config, stored, rows_path)
    ceiling = _ceiling(spec, job, device, stored, vision) if spec.ceiling else None
    if vision is None:
        return _text_trial(spec, job, knobs, device, stored, config, ceiling)
    model = build_model(job, knobs, device, config)
    if spec.leak_packed_rows:
        # What Trainer + DataCollatorWithFlattening run: the model's default config, cache on, so the
        # mask is built without packed-row detection. Only tests ask for this, to show parity catches it.
        model.config.use_cache = True
    engine = Engine(model, knobs, device)
    memory.reset_peak(device)
    sampler = nvml.Sampler(device).start()
    try:
        log = run_steps(engine, stored["rows"], knobs, job, stored["pad_id"], spec.measure_steps, spec.warmup_max,
                        inject=spec.inject_fault, leak_packed_rows=bool(spec.leak_packed_rows),
                        profile_steps=spec.profile_steps, window=sampler, vision=vision)
    finally:
        sampler.stop()
    peak = memory.read_peak(device)
    first = PARITY_STEPS * job.effective_batch  # the measured rows follow the parity steps' rows
    measured = range(first, first + log.measured_rows)
    from ..vlm.frame import vlm_flops

    window_flops = vlm_flops(model, config, vision, stored["rows"], measured, knobs.gradient_checkpointing)
    measurement = measurement_of(device, log, window_flops, spec.peak_flops(knobs.precision), peak, sampler.summary(),
                                 ceiling)
    return accepted(spec, log, measurement)


def _text_trial(spec: TrialSpec, job: Job, knobs: Knobs, device: str, stored: StoredRows, config: Any,
                ceiling: PeakReading | None) -> TrialReply:
    """A text model's trial: the plan's steps inside `trl.SFTTrainer`, read by autotune's instruments."""
    import trl

    from ...probes import flops, memory, nvml
    from ...engine.instruments import Instruments
    from .models import build_model
    from .sft import step_shape, text_plan, train_planned
    from ...engine.train import accepted, measurement_of

    rows = stored["rows"]
    plan = text_plan(rows, knobs, job, spec.measure_steps, spec.warmup_max, spec.profile_steps)
    model = build_model(job, knobs, device, config, for_trainer=True)
    synchronize = torch_synchronize(device)
    memory.reset_peak(device)
    sampler = nvml.Sampler(device).start()
    instruments = Instruments(plan, step_shape(rows, knobs.padding, job.max_len), synchronize,
                              spec.inject_fault, sampler, bool(spec.leak_packed_rows))
    try:
        trainer = train_planned(model, rows, knobs, job, device, plan, instruments, stored["pad_id"])
    finally:
        log = instruments.close()
        sampler.stop()
    peak = memory.read_peak(device)
    first = PARITY_STEPS * job.effective_batch  # the measured rows follow the parity steps' rows
    window_flops = flops.step_flops(flops.matmul_params(trainer.model), flops.attention_shape(config),
                                    [len(rows[r]) for r in range(first, first + log.measured_rows)],
                                    knobs.gradient_checkpointing)
    measurement = measurement_of(device, log, window_flops, spec.peak_flops(knobs.precision), peak, sampler.summary(),
                                 ceiling)
    import os

    measurement["env"].update(trainer=f"trl.SFTTrainer {trl.__version__}",
                              alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    return accepted(spec, log, measurement)


def torch_synchronize(device: str) -> Any:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)  # CUDA-only


def entry(spec_path: Path, result_path: Path) -> int:
    return common.run_body(frame, trial, spec_path, result_path)


if __name__ == "__main__":
    import sys

    sys.exit(entry(Path(sys.argv[1]), Path(sys.argv[2])))
