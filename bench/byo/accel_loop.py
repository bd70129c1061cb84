"""Benchmark script: a GPT-2-architecture causal LM trained by a loop on Hugging Face Accelerate.

    python byo/accel_loop.py --micro_batch_size 2 --gradient_accumulation_steps 8
    accelerate launch --mixed_precision no byo/accel_loop.py ...
Flags hold the micro-batch, the attention kernel and the padding switch; the accumulation is the
Accelerator's (`Accelerator(gradient_accumulation_steps=...)`), the precision accelerate's own (the
launcher's `--mixed_precision` or ACCELERATE_MIXED_PRECISION). Its defaults are a naive start: micro-batch
2 x accumulation 8, every row padded to --seq_len, eager attention, no mixed precision. The loss is each
micro-batch's token mean, which `accelerator.backward` divides by the accumulation.
"""

from __future__ import annotations

import argparse
import random

import torch
from accelerate import Accelerator
from transformers import GPT2Config, GPT2LMHeadModel


def flag(text: str) -> bool:
    return text.lower() in ("1", "true", "yes", "on")


class Windows(torch.utils.data.Dataset):
    """Rows cut from one generated token stream at lengths from 8 to seq_len, short ones most often."""

    def __init__(self, count: int, seq_len: int, seed: int) -> None:
        rng = random.Random(seed)
        stream = [rng.randrange(1, 1024) for _ in range(count * 8)]
        starts = [rng.randrange(len(stream) - seq_len) for _ in range(count)]
        self.rows = [stream[s:s + min(seq_len, 8 + int(rng.expovariate(1 / 24)))] for s in starts]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> list[int]:
        return self.rows[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro_batch_size", type=int, default=2)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--pad_to_max_length", type=flag, default=True)
    parser.add_argument("--attention", default="eager", choices=("eager", "sdpa"))
    parser.add_argument("--train_steps", type=int, default=150)
    args = parser.parse_args()

    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=1024, n_positions=args.seq_len, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0,
                                       attn_implementation=args.attention))

    def collate(rows: list[list[int]]) -> dict[str, torch.Tensor]:
        width = args.seq_len if args.pad_to_max_length else max(map(len, rows))
        ids = torch.full((len(rows), width), 0)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)], mask[i, :len(row)] = torch.tensor(row), 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    loader = torch.utils.data.DataLoader(Windows(6000, args.seq_len, 1), batch_size=args.micro_batch_size,
                                         shuffle=True, collate_fn=collate, generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    steps = 0
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        steps += accelerator.sync_gradients
        if accelerator.sync_gradients and steps % 50 == 0:
            accelerator.print(f"step {steps}: loss {loss.item():.3f}")
        if steps == args.train_steps:
            break


if __name__ == "__main__":
    main()
