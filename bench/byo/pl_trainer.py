"""Benchmark script: a PyTorch Lightning job whose `Trainer(...)` keywords are written in the script and
whose data and model settings are a YAML file.

    python byo/pl_trainer.py byo/pl_trainer.yaml
`Trainer(precision="32-true", accumulate_grad_batches=8)` holds the precision and the accumulation; the
YAML's `loader:` section the micro-batch, the workers and the padding mode, `net:` the model. A naive
start: micro-batch 1 x accumulation 8, every row padded to max_len, eager attention, fp32. The loss
is the token mean of each micro-batch, taken in `training_step` from the logits.
"""

from __future__ import annotations

import random
import sys

import lightning as L
import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM


class Lengths(torch.utils.data.Dataset):
    """Generated rows: a third short prompts (8-24 tokens), the rest a geometric spread up to max_len."""

    def __init__(self, count: int, max_len: int, seed: int) -> None:
        rng = random.Random(seed)
        lengths = [rng.randint(8, 24) if rng.random() < 1 / 3 else min(max_len, 16 + int(rng.expovariate(1 / 30)))
                   for _ in range(count)]
        self.rows = [[rng.randrange(1, 1024) for _ in range(n)] for n in lengths]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> list[int]:
        return self.rows[index]


class Collate:
    def __init__(self, padding: str, max_len: int) -> None:
        self.padding, self.max_len = padding, max_len

    def __call__(self, rows: list[list[int]]) -> dict[str, torch.Tensor]:
        width = self.max_len if self.padding == "max_length" else max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
        return {"input_ids": ids, "attention_mask": (ids != 0).long()}


class TinyLM(L.LightningModule):
    def __init__(self, net: dict) -> None:
        super().__init__()
        config = AutoConfig.for_model("llama", vocab_size=1024, hidden_size=net["width"], intermediate_size=3 * net["width"],
                                      num_hidden_layers=net["depth"], num_attention_heads=4, num_key_value_heads=2,
                                      use_cache=False)
        self.lm = AutoModelForCausalLM.from_config(config, attn_implementation=net["attn_implementation"])

    def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        logits = self.lm(**batch).logits[:, :-1]
        targets = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


def main() -> None:
    cfg = yaml.safe_load(open(sys.argv[1]))
    loader_cfg = cfg["loader"]
    L.seed_everything(cfg["seed"])
    loader = torch.utils.data.DataLoader(Lengths(5000, loader_cfg["max_len"], cfg["seed"]),
                                         batch_size=loader_cfg["batch_size"], shuffle=True,
                                         num_workers=loader_cfg["num_workers"],
                                         collate_fn=Collate(loader_cfg["padding"], loader_cfg["max_len"]))
    trainer = L.Trainer(precision="32-true", accumulate_grad_batches=8, max_steps=cfg["steps"], accelerator="cpu",
                        devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(TinyLM(cfg["net"]), loader)


if __name__ == "__main__":
    main()
