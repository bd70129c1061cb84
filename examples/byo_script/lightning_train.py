"""A PyTorch Lightning script with argparse flags and a `Trainer(...)` of its own, for a tiny causal LM on a CPU.

    python examples/byo_script/lightning_train.py [--batch_size 1 --num_workers 0 --pad_to_max_length true]
The accumulation and the precision are the Trainer's keywords in this file
(`Trainer(accumulate_grad_batches=8, precision="32-true")`); the micro-batch, the loader's workers
and the padding are flags. A naive start: every row padded to max_len, micro-batch 1 x accumulation 8,
fp32. Tune it without touching it (a trial edits the keywords in its copy of the script):
    autotune tune pl script=examples/byo_script/lightning_train.py smoke
Each micro-batch's token-loss sum is divided by its token budget (rows x max_len) and Lightning
divides by the accumulation: any micro-batch / accumulation split of a step trains the same thing.
"""

from __future__ import annotations

import argparse
import math
import random

import lightning as L
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


class CausalLM(L.LightningModule):
    def __init__(self, max_len: int, attn_implementation: str) -> None:
        super().__init__()
        config = AutoConfig.for_model("qwen2", vocab_size=2048, hidden_size=128, intermediate_size=352,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      tie_word_embeddings=True, use_cache=False)
        self.model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
        self.max_len = max_len

    def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        budget = batch["input_ids"].shape[0] * self.max_len
        return torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), batch["labels"][:, 1:],
                                                 ignore_index=-100, reduction="sum") / budget

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--max_len", type=int, default=256)
    parser.add_argument("--pad_to_max_length", type=flag, default="true")
    parser.add_argument("--attn_implementation", default="eager", choices=["eager", "sdpa"])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    L.seed_everything(args.seed)

    def collate(batch: list[list[int]]) -> dict[str, torch.Tensor]:
        width = args.max_len if args.pad_to_max_length else max(len(r) for r in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for i, row in enumerate(batch):
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    loader = torch.utils.data.DataLoader(rows(8000, args.max_len, 2048, args.seed), batch_size=args.batch_size,
                                         shuffle=True, num_workers=args.num_workers, collate_fn=collate,
                                         generator=torch.Generator().manual_seed(args.seed))
    trainer = L.Trainer(accumulate_grad_batches=8, precision="32-true", max_steps=args.steps, devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(CausalLM(args.max_len, args.attn_implementation), loader)


if __name__ == "__main__":
    main()
