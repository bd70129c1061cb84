"""Fine-tune a tiny Qwen2-architecture model with the Hugging Face Trainer, settings from train.yaml.

Runs on a CPU in seconds per step (random weights, synthetic rows with a long-tailed length spread):
    python examples/byo_script/trainer_yaml.py [--config examples/byo_script/train.yaml]
Tune it without touching either file:
    autotune tune byo script=examples/byo_script/trainer_yaml.py script_configs=examples/byo_script/train.yaml smoke
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
from pathlib import Path

import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments


def synthetic_rows(count: int, max_length: int, vocab: int, seed: int) -> list[list[int]]:
    """Token rows whose lengths follow a log-normal spread, like chat SFT data."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        length = min(max_length, max(8, int(math.exp(rng.gauss(math.log(max_length / 6), 0.8)))))
        rows.append([rng.randrange(1, vocab) for _ in range(length)])
    return rows


class Collator:
    """Pads to max_length or to the longest row of the batch; padding is masked out of the loss."""

    def __init__(self, padding: str, max_length: int) -> None:
        self.padding, self.max_length = padding, max_length

    def __call__(self, batch: list[dict]) -> dict[str, torch.Tensor]:
        width = self.max_length if self.padding == "max_length" else max(len(b["input_ids"]) for b in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for i, row in enumerate(batch):
            ids[i, :len(row["input_ids"])] = torch.tensor(row["input_ids"])
            mask[i, :len(row["input_ids"])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(Path(__file__).with_name("train.yaml")))
    settings = yaml.safe_load(Path(parser.parse_args().config).read_text())
    model_settings, data, training = dict(settings["model"]), settings["data"], settings["training"]
    attention = model_settings.pop("attn_implementation")
    torch.manual_seed(training["seed"])
    config = AutoConfig.for_model("qwen2", tie_word_embeddings=True, **model_settings)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    rows = [{"input_ids": r} for r in synthetic_rows(data["rows"], data["max_length"], config.vocab_size,
                                                       training["seed"])]
    arguments = TrainingArguments(output_dir=tempfile.mkdtemp(prefix="trainer_yaml_"), report_to="none",
                                  save_strategy="no", logging_steps=50, **training)
    Trainer(model=model, args=arguments, train_dataset=rows,
            data_collator=Collator(data["padding"], data["max_length"])).train()


if __name__ == "__main__":
    main()
