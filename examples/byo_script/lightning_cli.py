"""A LightningCLI script (model and data classes, settings in a YAML file) for a tiny causal LM on a CPU.

    python examples/byo_script/lightning_cli.py fit --config examples/byo_script/lightning_cli.yaml
    python examples/byo_script/lightning_cli.py fit --config ... --data.batch_size=2 --trainer.accumulate_grad_batches=4
The precision and accumulation are the Trainer's (`trainer:` section), the micro-batch, the loader's
workers and the padding switch the data module's (`data:` section). Its YAML is a naive start: every
row padded to max_len, micro-batch 1 x accumulation 8, fp32. Tune it without touching either file:
    autotune tune cli script=examples/byo_script/lightning_cli.py \\
        script_args='fit --config examples/byo_script/lightning_cli.yaml' smoke
Each micro-batch's token-loss sum is divided by its token budget (rows x max_len) and Lightning
divides by the accumulation: any micro-batch / accumulation split of a step trains the same thing.
"""

from __future__ import annotations

import math
import random

import lightning as L
import torch
from lightning.pytorch.cli import LightningCLI
from transformers import AutoConfig, AutoModelForCausalLM


def rows(count: int, max_len: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = min(max_len, max(8, int(math.exp(rng.gauss(math.log(max_len / 6), 0.8)))))
        out.append([rng.randrange(1, vocab) for _ in range(length)])
    return out


class Rows(L.LightningDataModule):
    def __init__(self, batch_size: int = 1, num_workers: int = 0, max_len: int = 256, pad_to_max_length: bool = True,
                 count: int = 8000, vocab: int = 2048, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()

    def collate(self, batch: list[list[int]]) -> dict[str, torch.Tensor]:
        width = self.hparams.max_len if self.hparams.pad_to_max_length else max(len(r) for r in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for i, row in enumerate(batch):
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        data = rows(self.hparams.count, self.hparams.max_len, self.hparams.vocab, self.hparams.seed)
        return torch.utils.data.DataLoader(data, batch_size=self.hparams.batch_size, shuffle=True,
                                           num_workers=self.hparams.num_workers, collate_fn=self.collate,
                                           generator=torch.Generator().manual_seed(self.hparams.seed))


class CausalLM(L.LightningModule):
    def __init__(self, vocab: int = 2048, hidden: int = 128, layers: int = 2, lr: float = 1e-4,
                 attn_implementation: str = "eager") -> None:
        super().__init__()
        self.save_hyperparameters()
        config = AutoConfig.for_model("qwen2", vocab_size=vocab, hidden_size=hidden, intermediate_size=352,
                                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                      tie_word_embeddings=True, use_cache=False)
        self.model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)

    def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        budget = batch["input_ids"].shape[0] * self.trainer.datamodule.hparams.max_len
        return torch.nn.functional.cross_entropy(logits[:, :-1].float().transpose(1, 2), batch["labels"][:, 1:],
                                                 ignore_index=-100, reduction="sum") / budget

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


if __name__ == "__main__":
    LightningCLI(CausalLM, Rows, seed_everything_default=0, save_config_callback=None)
