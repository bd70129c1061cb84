"""Benchmark script: nanoGPT's loop and model interface (model(X, Y) -> logits, loss) on fresh random
windows drawn on every call, settings from a YAML file. Naive start: micro-batch 1 x accumulation 16.

    python bench/byo/nano_windows.py   (reads nano_windows.yaml in the working folder's byo/)
"""

import torch
import yaml

cfg = yaml.safe_load(open("byo/nano_windows.yaml"))
torch.manual_seed(0)
data = torch.randint(0, 512, (50000,), generator=torch.Generator().manual_seed(1))


def get_batch(batch_size, block_size):
    ix = torch.randperm(len(data) - block_size - 1)[:batch_size]
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class TinyGPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(512, 64)
        self.mix = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
        self.head = torch.nn.Linear(64, 512)

    def forward(self, idx, targets=None):
        hidden = self.embed(idx)
        hidden = hidden + self.mix(torch.cumsum(hidden, 1) / torch.arange(1, idx.shape[1] + 1)[None, :, None])
        logits = self.head(hidden)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 512), targets.view(-1)) if targets is not None else None
        return logits, loss


model = TinyGPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(cfg["max_iters"]):
    for _ in range(cfg["gradient_accumulation_steps"]):
        X, Y = get_batch(cfg["batch_size"], cfg["block_size"])
        _, loss = model(X, Y)
        (loss / cfg["gradient_accumulation_steps"]).backward()
    optimizer.step()
    optimizer.zero_grad()
