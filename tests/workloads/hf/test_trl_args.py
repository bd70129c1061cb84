"""Knobs in the names the installed TRL / transformers take: every value the catalog can emit on a CPU
builds an `SFTConfig` and an `SFTTrainer`, and trains a step there (compile: built, not trained)."""

from __future__ import annotations


import pytest

from autotune.config.knobs import NAIVE_START, Knobs, not_applicable
from autotune.reasoner.rank import CATALOG_ORDER
from autotune.workloads.hf.trl_args import knob_fields, lora_fields, lora_kwargs, sft_fields

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

MAX_LEN, EFFECTIVE_BATCH = 32, 4
CPU = {"kind": "cpu", "bf16": True, "tf32": False, "flash_attn": False, "compile": True, "cpu_count": 4,
       "fused_adamw": True}
TEXT_KNOBS = [(name, values) for name, values in CATALOG_ORDER if name not in ("max_image_pixels", "freeze_vision_tower")]


def cpu_variants() -> list[Knobs]:
    """One change at a time from the naive start (group_by_length from padding=longest, where it applies),
    every value the ranking lists or a batch size the effective batch allows, kept where the CPU takes it."""
    start = Knobs(**NAIVE_START)
    variants = []
    for name, values in TEXT_KNOBS:
        base = start.with_change("padding", "longest") if name == "group_by_length" else start
        for value in values or (1, 2, 4):
            variant = base.with_change(name, value)
            if not_applicable(name, value, base, CPU, EFFECTIVE_BATCH) is None and variant not in variants:
                variants.append(variant)
    return variants


def test_the_variants_cover_every_text_knob():
    changed = {name for knobs in cpu_variants() for name in knobs.diff(Knobs(**NAIVE_START))}
    assert changed >= {"padding", "per_device_train_batch_size", "attn_implementation", "precision",
                       "group_by_length", "optim", "dataloader_num_workers", "gradient_checkpointing", "torch_compile"}


@pytest.fixture(scope="module")
def tiny_model_and_rows():
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("qwen2", vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    rows = Dataset.from_dict({"input_ids": [[3 + (i * 7 + j) % 290 for j in range(8 + 3 * i)] for i in range(8)]})
    return config, rows, AutoModelForCausalLM


def _tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"<t{i}>": i for i in range(3, 300)}}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<pad>")),
                                   pad_token="<pad>", bos_token="<s>", eos_token="</s>")


@pytest.mark.parametrize("knobs", cpu_variants(), ids=lambda k: ",".join(f"{n}={v[1]}" for n, v in
                                                                          Knobs(**NAIVE_START).diff(k).items()) or "naive")
def test_every_cpu_value_of_every_knob_runs_in_sft_trainer(knobs, tiny_model_and_rows, tmp_path):
    config, rows, auto = tiny_model_and_rows
    fields = knob_fields(knobs, MAX_LEN, EFFECTIVE_BATCH, cpu=True)
    args = trl.SFTConfig(output_dir=str(tmp_path), max_steps=1, report_to="none", save_strategy="no",
                         logging_steps=1, **fields)
    # What was set is what the trainer holds (TRL defaults bf16 and checkpointing on).
    assert args.bf16 is (knobs.precision == "bf16") and args.per_device_train_batch_size == knobs.per_device_train_batch_size
    assert getattr(args, "activation_checkpointing", args.gradient_checkpointing) is knobs.gradient_checkpointing
    torch.manual_seed(0)
    model = auto.from_config(config, attn_implementation=knobs.attn_implementation, dtype=torch.float32)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=_tokenizer())
    if not knobs.torch_compile:  # compiling a step costs tens of seconds on a CPU; building it checks the config
        assert trainer.train().training_loss > 0


def test_names_follow_the_installed_sft_config():
    installed = sft_fields()
    fields = knob_fields(Knobs(gradient_checkpointing=True, padding="longest", group_by_length=True), 64, 4)
    assert set(fields) <= installed
    assert ("activation_checkpointing" in fields) == ("activation_checkpointing" in installed)
    # A transformers before 5.2 / 5.23: the old names, by the same call.
    old = frozenset(installed - {"activation_checkpointing", "train_sampling_strategy"} | {"group_by_length",
                                                                                         "gradient_checkpointing"})
    legacy = knob_fields(Knobs(gradient_checkpointing=True, padding="longest", group_by_length=True), 64, 4,
                         fields=old)
    assert legacy["gradient_checkpointing"] is True and legacy["group_by_length"] is True
    assert "activation_checkpointing" not in legacy and "train_sampling_strategy" not in legacy


def test_padding_free_passes_no_max_length_and_pinned_defaults_are_explicit():
    fields = knob_fields(Knobs(padding="padding_free"), 512, 16)
    assert fields["padding_free"] is True and fields["max_length"] is None and fields["pad_to_multiple_of"] is None
    naive = knob_fields(Knobs(), 512, 16)
    assert naive["bf16"] is False and naive["dataloader_pin_memory"] is False and naive["pad_to_multiple_of"] == 512
    assert naive["gradient_accumulation_steps"] == 16


def test_the_lora_fields_are_the_trials_adapter_not_peft_defaults():
    model = trl.ModelConfig(**lora_fields(["q_proj", "v_proj", "down_proj"]))
    peft_config = trl.get_peft_config(model)
    assert (peft_config.r, peft_config.lora_alpha, peft_config.lora_dropout) == (16, 32, 0.0)
    assert set(peft_config.target_modules) == {"q_proj", "v_proj", "down_proj"}
    assert lora_kwargs(["q_proj"])["target_modules"] == ["q_proj"] and lora_kwargs()["target_modules"] == "all-linear"


@pytest.mark.parametrize("factor", [0, 4])
def test_a_prefetch_factor_means_the_same_in_autotunes_own_loop_as_in_sft_trainer(factor):
    """0 is torch's default (2 per worker) in both: a ranked change to 4 is a real change on a VLM too."""
    from torch.utils.data import DataLoader

    from autotune.engine.common import loader_prefetch

    knobs = Knobs(dataloader_num_workers=2, dataloader_prefetch_factor=factor)
    trl_value = knob_fields(knobs, MAX_LEN, EFFECTIVE_BATCH, cpu=True)["dataloader_prefetch_factor"]
    own = DataLoader(range(8), num_workers=2, prefetch_factor=loader_prefetch(knobs)).prefetch_factor
    assert own == DataLoader(range(8), num_workers=2, prefetch_factor=trl_value).prefetch_factor == (factor or 2)
    assert loader_prefetch(Knobs(dataloader_num_workers=0, dataloader_prefetch_factor=factor)) is None
