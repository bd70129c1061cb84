"""A text trial inside the installed `trl.SFTTrainer`, configured by an `SFTConfig` built from the
trial's knobs (`trl_args.knob_fields`, the names the installed TRL takes) and the run's fixed settings.

The trainer gets the frame's pre-tokenised rows as a `datasets.Dataset` with an `input_ids` column
(`skip_prepare_dataset`: the rows are truncated to max_len already, and a trial maps nothing), its own
collator (built by TRL from the config: padding, padding-free, pad_to_multiple_of) and its own loss.
What autotune changes is which rows the sampler hands out, in which order: the plan's (two parity
steps, warm-up until settled, measured steps, profile steps), so every trial of a run trains the same
rows in the same order. `group_by_length` orders the measured rows with transformers'
`LengthGroupedSampler` (what `train_sampling_strategy="group_by_length"` uses), seeded, so every such
trial sees one order; the measured rows are the same set as without it (totals compare exactly), but
its steps hold other rows than the steps of a trial without it (per-step pairing holds only between
trials that both group).
"""

from __future__ import annotations

import tempfile
from typing import Any, Callable, Iterator

import datasets
import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import SFTConfig, SFTTrainer

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.messages import PeakReading, measured_ids as measured_row_ids, parity_ids
from ...probes import memory
from ...engine.batching import step_plan, worst_case_rows
from ...engine.common import loader_context
from ...engine.steps import Plan
from ...engine.train import LEARNING_RATE, MAX_GRAD_NORM, TrialFault, is_oom

# fp16 loss scaling may skip the first steps of the worst-case batch: this many tries for two real ones.
CEILING_TRIES = 8


class PlannedSFTTrainer(SFTTrainer):
    """`trl.SFTTrainer` with the plan's sampler: the one method replaced is the one that picks the
    sampler (`train_sampling_strategy` cannot express a plan whose warm-up ends when settled)."""

    plan_sampler: torch.utils.data.Sampler | None = None

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        if self.plan_sampler is not None:
            return self.plan_sampler
        return super()._get_train_sampler(train_dataset)


class PlanSampler(torch.utils.data.Sampler):
    """Row indices step by step from the plan, in the main process (loader workers only collate), and
    a record of which step was which, which the instruments read."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        plan.record.clear()

    def __len__(self) -> int:
        return sum(len(micro) for _, _, step in self._all_steps() for micro in step)

    def _all_steps(self) -> list[tuple[str, int, list[list[int]]]]:
        parity, measured = self.plan.parity, self.plan.measured
        return ([("parity", i, s) for i, s in enumerate(parity)] + [("warmup", i, parity[-1]) for i in range(self.plan.warmup_max)]
                + [("measured", i, s) for i, s in enumerate(measured)]
                + [("profile", i, parity[i % len(parity)]) for i in range(self.plan.profile_steps)])

    def __iter__(self) -> Iterator[int]:
        for kind, index, step in self.plan.steps():
            self.plan.record.append((kind, index, step))
            for micro in step:
                yield from micro


def text_plan(rows: list[list[int]], knobs: Knobs, job: Job, measure_steps: int,
              warmup_max: int, profile_steps: int) -> Plan:
    effective_batch, micro = job.effective_batch, knobs.per_device_train_batch_size
    parity, measured_ids = parity_ids(effective_batch), measured_row_ids(effective_batch, measure_steps)
    if knobs.group_by_length:
        from transformers.trainer_pt_utils import LengthGroupedSampler

        # The trainer passes the rows of one optimizer step as the sampler's batch size.
        grouped = LengthGroupedSampler(effective_batch, lengths=[len(rows[r]) for r in measured_ids],
                                       generator=torch.Generator().manual_seed(job.seed))
        measured_ids = [measured_ids[i] for i in grouped]
    return Plan(step_plan(parity, effective_batch, micro), step_plan(measured_ids, effective_batch, micro),
                warmup_max, profile_steps)


def step_shape(rows: list[list[int]], padding: str, max_len: int) -> Callable[[list[list[int]]], tuple[int, int, int]]:
    """(real tokens, padding tokens, loss targets) of a step, as TRL's collator batches its rows: padded to
    max_len (pad_to_multiple_of), to the longest row, or packed without padding; each row has one target
    fewer than its tokens (labels shift inside the row; packing masks each row's first label)."""
    def shape(step: list[list[int]]) -> tuple[int, int, int]:
        real = padded = targets = 0
        for micro in step:
            lengths = [len(rows[r]) for r in micro]
            real += sum(lengths)
            targets += sum(length - 1 for length in lengths)
            if padding != "padding_free":
                width = max_len if padding == "max_length" else max(lengths)
                padded += width * len(lengths) - sum(lengths)
        return real, padded, targets
    return shape


def tokenizer_for(job: Job, pad_id: int) -> Any:
    """What SFTTrainer takes as its processing class. The rows are token ids already, so it only names the
    pad token: the model's own tokenizer where the run has one, else one built in memory whose pad
    token has the rows' pad id."""
    from ...config.presets import PRESETS

    if not (job.model in PRESETS or job.smoke or job.dataset == "synthetic"):
        from .models import load_tokenizer

        return load_tokenizer(job)
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": pad_id, "<unk>": pad_id + 1}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                   pad_token="<pad>", unk_token="<unk>")


def sft_config(knobs: Knobs, job: Job, device: str, output_dir: str, max_steps: int,
               effective_batch: int | None = None) -> SFTConfig:
    """The knobs by the installed names, and what every trial of a run shares: autotune's engine
    settings (constant learning rate, clipping), its seed, nothing saved, logged or reported."""
    from .trl_args import knob_fields

    fields = knob_fields(knobs, job.max_len, effective_batch or job.effective_batch, cpu=device == "cpu",
                         sampling="sequential")
    return SFTConfig(output_dir=output_dir, max_steps=max_steps, learning_rate=LEARNING_RATE,
                     lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=MAX_GRAD_NORM,
                     seed=job.seed, save_strategy="no", report_to="none", logging_strategy="no",
                     disable_tqdm=True, dataset_kwargs={"skip_prepare_dataset": True}, **fields)


def make_trainer(model: torch.nn.Module, rows: list[list[int]], config: SFTConfig, job: Job,
                 pad_id: int, callbacks: list[Any], sampler: torch.utils.data.Sampler | None = None) -> PlannedSFTTrainer:
    if loader_context(config.dataloader_num_workers) == "fork":
        import multiprocessing

        # Loader workers forked, as a user's DataLoader starts them on Linux: this trial is a forkserver
        # child, whose default would start each worker by re-importing torch (seconds per worker).
        multiprocessing.set_start_method("fork", force=True)
    peft_config = None
    if job.method == "lora":
        from peft import LoraConfig

        from .trl_args import lora_kwargs

        peft_config = LoraConfig(**lora_kwargs())
    trainer = PlannedSFTTrainer(model=model, args=config, train_dataset=datasets.Dataset.from_dict({"input_ids": rows}),
                                processing_class=tokenizer_for(job, pad_id), callbacks=callbacks,
                                peft_config=peft_config)
    trainer.plan_sampler = sampler
    # With tqdm off the trainer prints its logs; a trial's stdout is its one summary line.
    trainer.remove_callback(PrinterCallback)
    for callback in callbacks:
        callback.trainer = trainer
    return trainer


class CeilingSteps(TrainerCallback):
    """Stops after two optimizer steps that really ran (fp16 loss scaling may skip the first: no Adam
    state yet) and reads the memory peak over both; the first creates the optimizer state, the second's
    activations coexist with it."""

    def __init__(self, device: str) -> None:
        self.device, self.trainer, self.real, self.peak = device, None, 0, None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        memory.reset_peak(self.device)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.real += not self.trainer.accelerator.optimizer_step_was_skipped
        if self.real == 2:
            if self.device == "cuda":  # CUDA-only
                torch.cuda.synchronize()
            self.peak = memory.read_peak(self.device)
            control.should_training_stop = True


def worst_case_peak(job: Job, knobs: Knobs, device: str, model: torch.nn.Module,
                    vocab_size: int, pad_id: int) -> PeakReading:
    """Peak memory of two real optimizer steps on micro-batches of max_len rows, in the trainer the
    trial uses (its own instance, on the model given): up to two micro-batches a step, as many as the
    config accumulates (more add no activations)."""
    micro, max_len = knobs.per_device_train_batch_size, job.max_len
    accumulated = min(2, job.effective_batch // micro)
    rows = worst_case_rows(micro, max_len, vocab_size) * (accumulated * CEILING_TRIES)
    steps = CeilingSteps(device)
    try:
        with tempfile.TemporaryDirectory(prefix="autotune-ceiling-") as out:
            config = sft_config(knobs, job, device, out, CEILING_TRIES, effective_batch=accumulated * micro)
            make_trainer(model, rows, config, job, pad_id, [steps]).train()
    except Exception as error:  # noqa: BLE001 - only OOM is an expected outcome here
        if not is_oom(error):
            raise
        return {"fits": False, "reason": f"out of memory at the worst-case batch ({micro} x {max_len} tokens)"}
    if steps.peak is None:
        raise TrialFault("invalid", "fp16 loss scaling skipped every worst-case step; the ceiling is unknown")
    return steps.peak


def train_planned(model: torch.nn.Module, rows: list[list[int]], knobs: Knobs, job: Job,
                  device: str, plan: Plan, instruments: Any, pad_id: int) -> Any:
    """The plan's steps through the trainer; returns the trainer (its model is what trained)."""
    used = 1 + max(r for _, _, step in PlanSampler(plan)._all_steps() for micro in step for r in micro)
    with tempfile.TemporaryDirectory(prefix="autotune-sft-") as out:
        config = sft_config(knobs, job, device, out, plan.most_steps())
        trainer = make_trainer(model, rows[:used], config, job, pad_id, [instruments], PlanSampler(plan))
        trainer.train()
    return trainer
