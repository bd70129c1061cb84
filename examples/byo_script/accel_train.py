"""A training loop on Hugging Face Accelerate (argparse flags) for a tiny causal LM, runnable on a CPU.

    python examples/byo_script/accel_train.py [--batch_size 1 --grad_accum 8 ...]
    accelerate launch --mixed_precision no examples/byo_script/accel_train.py
The accumulation is the Accelerator's (`Accelerator(gradient_accumulation_steps=...)`), the
precision accelerate's own: `accelerate launch --mixed_precision` or ACCELERATE_MIXED_PRECISION.
Its defaults are a naive start: every row padded to --max_len, micro-batch 1, eager attention.
Tune it, launched as you launch it, without touching it:
    autotune tune accel script=examples/byo_script/accel_train.py script_launcher="accelerate launch" smoke
Each micro-batch's token-loss sum is divided by its token budget (rows x max_len), and
`accelerator.backward` divides by the accumulation: any micro-batch / accumulation split of one
optimizer step trains the same thing.
"""

from __future__ import annotations

import argparse
import math
import random

import torch
from accelerate import Accelerator
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--grad_accum", type=int, default=8)
    parser.add_argument("--max_len", type=int, default=256)
    parser.add_argument("--padding", default="max_length", choices=["max_length", "longest"])
    parser.add_argument("--attn_implementation", default="eager", choices=["eager", "sdpa"])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum)
    torch.manual_seed(args.seed)
    config = AutoConfig.for_model("qwen2", vocab_size=2048, hidden_size=128, intermediate_size=352,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  tie_word_embeddings=True, use_cache=False)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=args.attn_implementation)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = rows(8000, args.max_len, config.vocab_size, args.seed)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                         generator=torch.Generator().manual_seed(args.seed),
                                         collate_fn=lambda b: collate(b, args.padding, args.max_len))
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    budget = args.batch_size * args.max_len
    done = 0
    for batch in loader:
        with accelerator.accumulate(model):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), batch["labels"][:, 1:],
                                                     ignore_index=-100, reduction="sum") / budget
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            done += 1
            if done % 50 == 0:
                accelerator.print(f"step {done} loss {loss.item():.4f}")
            if done >= args.steps:
                break


if __name__ == "__main__":
    main()
