"""Causal-LM training in the style of transformers' run_clm.py: `HfArgumentParser` over the script's
own dataclasses and `TrainingArguments`, run with flags or with one JSON file.

A tiny Qwen2-architecture model built from a config (random weights) on synthetic rows, on a CPU:
    python examples/byo_script/hf_clm.py examples/byo_script/hf_clm.json
    python examples/byo_script/hf_clm.py --output_dir /tmp/clm --per_device_train_batch_size 1 \
        --gradient_accumulation_steps 8 --gradient_checkpointing --max_steps 400
Keys absent from the file or the flags take TrainingArguments' defaults.
Tune it without touching it:
    autotune tune clm script=examples/byo_script/hf_clm.py script_args='examples/byo_script/hf_clm.json' smoke
"""

from __future__ import annotations

import math
import os
import random
import sys
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    hidden_size: int = 128
    attn_implementation: str = field(default="eager", metadata={"help": "eager or sdpa"})


@dataclass
class DataArguments:
    rows: int = 4000
    max_length: int = 256
    pad_to_max_length: bool = True


def synthetic_rows(count: int, max_length: int, seed: int) -> list[dict]:
    """Token rows whose lengths follow a log-normal spread, like chat SFT data."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = min(max_length, max(8, int(math.exp(rng.gauss(math.log(max_length / 6), 0.8)))))
        out.append({"input_ids": [rng.randrange(1, 2048) for _ in range(length)]})
    return out


def collate(batch: list[dict], to_max: bool, max_length: int) -> dict[str, torch.Tensor]:
    width = max_length if to_max else max(len(b["input_ids"]) for b in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, row in enumerate(batch):
        ids[i, :len(row["input_ids"])] = torch.tensor(row["input_ids"])
        mask[i, :len(row["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    torch.manual_seed(training_args.seed)
    config = AutoConfig.for_model("qwen2", vocab_size=2048, hidden_size=model_args.hidden_size, intermediate_size=352,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  tie_word_embeddings=True, use_cache=False)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=model_args.attn_implementation)
    Trainer(model=model, args=training_args, train_dataset=synthetic_rows(data_args.rows, data_args.max_length,
                                                                          training_args.seed),
            data_collator=lambda b: collate(b, data_args.pad_to_max_length, data_args.max_length)).train()


if __name__ == "__main__":
    main()
