"""Supervised fine-tuning with TRL's `SFTTrainer`, settings parsed by `TrlParser` as TRL's own sft.py does.

A tiny Qwen2-architecture model built from a config (random weights) on synthetic token rows, so it
runs on a CPU. Run it either way TRL's scripts are run:
    python examples/byo_script/trl_sft.py --config examples/byo_script/trl_sft.yaml
    python examples/byo_script/trl_sft.py --output_dir /tmp/out --per_device_train_batch_size 1 \
        --gradient_accumulation_steps 8 --max_length 512 --pad_to_multiple_of 512 --use_cpu true
Keys absent from the file or the flags take SFTConfig's own defaults (bf16 on where fp16 is off,
activation checkpointing on). Tune it without touching it:
    autotune tune sft script=examples/byo_script/trl_sft.py script_args='--config examples/byo_script/trl_sft.yaml' smoke
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast
from trl import ModelConfig, SFTConfig, SFTTrainer, TrlParser

VOCAB = 2048


@dataclass
class ScriptArguments:
    rows: int = 4000
    hidden_size: int = 128


def synthetic_rows(count: int, max_length: int, seed: int) -> list[list[int]]:
    """Token rows whose lengths follow a log-normal spread, like chat SFT data."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = min(max_length, max(8, int(math.exp(rng.gauss(math.log(max_length / 6), 0.8)))))
        out.append([rng.randrange(3, VOCAB) for _ in range(length)])
    return out


def tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer built in memory (nothing downloaded): the rows are token ids already."""
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                   pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def main() -> None:
    script_args, training_args, model_args = TrlParser((ScriptArguments, SFTConfig, ModelConfig)).parse_args_and_config()
    torch.manual_seed(training_args.seed)
    config = AutoConfig.for_model("qwen2", vocab_size=VOCAB, hidden_size=script_args.hidden_size,
                                  intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, tie_word_embeddings=True, use_cache=False,
                                  pad_token_id=0, eos_token_id=1)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=model_args.attn_implementation or "eager")
    rows = synthetic_rows(script_args.rows, training_args.max_length or 256, training_args.seed)
    SFTTrainer(model=model, args=training_args, processing_class=tokenizer(),
               train_dataset=Dataset.from_dict({"input_ids": rows})).train()


if __name__ == "__main__":
    main()
