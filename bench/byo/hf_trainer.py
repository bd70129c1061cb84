"""Benchmark script: a hand-written Hugging Face `Trainer` job whose settings are one YAML file.

    python byo/hf_trainer.py byo/hf_trainer.yaml
The YAML's `args:` section goes to `TrainingArguments` as it is; `model:` builds a tiny Llama-architecture
model from a config (random weights) and `data:` says how rows are generated and collated. Its naive
start: micro-batch 1 x accumulation 16, every row padded to `max_length` (`pad_to_max_length: true`),
eager attention, random sampling (`train_sampling_strategy: random`). The Trainer takes the mean over
each micro-batch's tokens, so another micro-batch split weighs the rows of a step otherwise.
"""

from __future__ import annotations

import random
import sys
import tempfile

import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Rows(torch.utils.data.Dataset):
    """Token rows, most short and a few long: a Pareto spread of lengths cut at max_length."""

    def __init__(self, count: int, max_length: int, vocab: int, seed: int) -> None:
        rng = random.Random(seed)
        self.rows = [[rng.randrange(2, vocab) for _ in range(min(max_length, int(12 * rng.paretovariate(1.6))))]
                     for _ in range(count)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {"input_ids": self.rows[index]}


def pad(features: list[dict[str, list[int]]], width: int | None) -> dict[str, torch.Tensor]:
    """Right-pads with 0 to `width` (or the batch's longest row); pads are masked and ignored by the loss."""
    longest = width or max(len(f["input_ids"]) for f in features)
    ids = torch.tensor([f["input_ids"] + [0] * (longest - len(f["input_ids"])) for f in features])
    mask = torch.tensor([[1] * len(f["input_ids"]) + [0] * (longest - len(f["input_ids"])) for f in features])
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def main() -> None:
    settings = yaml.safe_load(open(sys.argv[1]))
    model_cfg, data_cfg, args = settings["model"], settings["data"], settings["args"]
    torch.manual_seed(args["seed"])
    config = LlamaConfig(vocab_size=data_cfg["vocab"], hidden_size=model_cfg["hidden"], intermediate_size=4 * model_cfg["hidden"],
                         num_hidden_layers=model_cfg["layers"], num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=data_cfg["max_length"], use_cache=False)
    config._attn_implementation = model_cfg["attn_implementation"]
    model = LlamaForCausalLM(config)
    width = data_cfg["max_length"] if data_cfg["pad_to_max_length"] else None
    training = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="hf_trainer_"), report_to="none",
                                 save_strategy="no", **args)
    trainer = Trainer(model=model, args=training, train_dataset=Rows(data_cfg["rows"], data_cfg["max_length"],
                                                                     data_cfg["vocab"], args["seed"]),
                      data_collator=lambda features: pad(features, width))
    trainer.train()


if __name__ == "__main__":
    main()
