"""Benchmark script: a hand-written plain PyTorch loop whose settings are a YAML file it loads itself.

    python bench/byo/plain_yaml.py bench/byo/plain_yaml.yaml
Its YAML is the naive start of issue 30's first script: micro-batch 2 x accumulation 8, every row padded
to max_len, eager attention, a `sort_by_length` switch off. Each micro-batch's loss is its own token mean
divided by the accumulation (as most loops write it), so another split reweighs the rows; sorting
sorts each optimizer step's rows by length, so the step holds the same rows in other micro-batches.
"""

from __future__ import annotations

import math
import random
import sys

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM


def rows(count: int, max_len: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = min(max_len, max(8, int(math.exp(rng.gauss(math.log(max_len / 6), 0.8)))))
        out.append([rng.randrange(1, vocab) for _ in range(length)])
    return out


def collate(batch: list[list[int]], padding: str, max_len: int) -> dict[str, torch.Tensor]:
    width = max_len if padding == "max_length" else max(len(r) for r in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, row in enumerate(batch):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def main() -> None:
    cfg = yaml.safe_load(open(sys.argv[1]))
    model_cfg, data_cfg, train = cfg["model"], cfg["data"], cfg["train"]
    torch.manual_seed(train["seed"])
    config = AutoConfig.for_model("qwen2", vocab_size=1024, hidden_size=model_cfg["hidden_size"],
                                  intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, tie_word_embeddings=True, use_cache=False)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=model_cfg["attn_implementation"])
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=train["lr"])
    data = rows(4000, data_cfg["max_len"], 1024, train["seed"])
    order = random.Random(train["seed"]).sample(range(len(data)), len(data))
    step_rows = train["batch_size"] * train["grad_accum"]
    for step in range(train["steps"]):
        chunk = [data[i] for i in order[step * step_rows:(step + 1) * step_rows]]
        if data_cfg["sort_by_length"]:
            chunk.sort(key=len, reverse=True)
        for start in range(0, step_rows, train["batch_size"]):
            batch = collate(chunk[start:start + train["batch_size"]], data_cfg["padding"], data_cfg["max_len"])
            loss = model(**batch).loss / train["grad_accum"]
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item() * train['grad_accum']:.3f}")


if __name__ == "__main__":
    main()
