"""A plain PyTorch training loop (argparse, no Trainer) on a tiny causal LM, runnable on a CPU.

    python examples/byo_script/plain_loop.py [--batch_size 1 --grad_accum 8 ...]
Its defaults are a naive start: every row padded to --max_len, micro-batch 1, activation
checkpointing on. Tune it without touching it:
    autotune tune loop script=examples/byo_script/plain_loop.py smoke
The loss of an optimizer step is the sum of its token losses over the step's token count, so any
micro-batch / accumulation split trains the same thing.
"""

from __future__ import annotations

import argparse
import math
import random

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def flag(text: str) -> bool:
    return text.lower() in ("1", "true", "yes")


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--grad_accum", type=int, default=8)
    parser.add_argument("--max_len", type=int, default=256)
    parser.add_argument("--padding", default="max_length", choices=["max_length", "longest"])
    parser.add_argument("--gradient_checkpointing", type=flag, default="true")
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--attn_implementation", default="eager", choices=["eager", "sdpa"])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    config = AutoConfig.for_model("qwen2", vocab_size=2048, hidden_size=128, intermediate_size=352,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  tie_word_embeddings=True, use_cache=False)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=args.attn_implementation)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = rows(4000, args.max_len, config.vocab_size, args.seed)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
                                         generator=torch.Generator().manual_seed(args.seed),
                                         collate_fn=lambda b: collate(b, args.padding, args.max_len))
    batches = iter(loader)
    for step in range(args.steps):
        micro = [next(batches) for _ in range(args.grad_accum)]
        tokens = sum(int((m["labels"][:, 1:] != -100).sum()) for m in micro)
        for batch in micro:
            logits = model(**batch).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), batch["labels"][:, 1:],
                                                     ignore_index=-100, reduction="sum") / tokens
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item() * tokens / max(1, int((batch['labels'][:, 1:] != -100).sum())):.3f}")


if __name__ == "__main__":
    main()
