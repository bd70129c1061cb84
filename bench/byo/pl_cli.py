"""Benchmark script: a `LightningCLI` job, settings in the config file its `fit` subcommand reads.

    python byo/pl_cli.py fit --config byo/pl_cli.yaml [--data.batch_size=4 --trainer.precision=bf16-mixed]
`trainer:` holds the precision and `accumulate_grad_batches`, `data:` the micro-batch, the loader's
workers and the `pad_to_max_length` switch, `model:` the tiny Mistral-architecture model and its attention
kernel. The YAML is a naive start: micro-batch 1 x accumulation 16, every row padded to max_len, eager
attention, fp32. The loss is the model's own (token mean of each micro-batch).
"""

from __future__ import annotations

import random

import lightning as L
import torch
from lightning.pytorch.cli import LightningCLI
from transformers import MistralConfig, MistralForCausalLM


class TokenRows(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, max_len: int = 128, pad_to_max_length: bool = False,
                 rows: int = 4000, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        rng = random.Random(self.hparams.seed)
        # Lengths of a chat-like mix: log-uniform from 6 tokens to max_len.
        self.rows = [[rng.randrange(1, 1024) for _ in range(int(6 * (self.hparams.max_len / 6) ** rng.random()))]
                     for _ in range(self.hparams.rows)]

    def pad(self, rows: list[list[int]]) -> dict[str, torch.Tensor]:
        width = self.hparams.max_len if self.hparams.pad_to_max_length else max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(self.rows, batch_size=self.hparams.batch_size, shuffle=True,
                                           num_workers=self.hparams.num_workers, collate_fn=self.pad,
                                           generator=torch.Generator().manual_seed(self.hparams.seed))


class Mistral(L.LightningModule):
    def __init__(self, hidden_size: int = 64, num_hidden_layers: int = 2, attn_implementation: str = "sdpa",
                 learning_rate: float = 3e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = MistralConfig(vocab_size=1024, hidden_size=hidden_size, intermediate_size=4 * hidden_size,
                               num_hidden_layers=num_hidden_layers, num_attention_heads=4, num_key_value_heads=1,
                               sliding_window=None, use_cache=False)
        self.net = MistralForCausalLM._from_config(config, attn_implementation=attn_implementation)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.net(**batch).loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.learning_rate)


def main() -> None:
    LightningCLI(Mistral, TokenRows, seed_everything_default=0, save_config_callback=None)


if __name__ == "__main__":
    main()
