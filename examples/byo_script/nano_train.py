"""A nanoGPT-style script: its settings are module globals, overridden by a Python config file and
`--key=value` flags through configurator.py (exec'd, as nanoGPT's train.py does).

A tiny GPT-2-architecture model built from a config (random weights) on a synthetic token stream,
so it runs on a CPU:
    python examples/byo_script/nano_train.py examples/byo_script/config/train_tiny.py --batch_size=2
The model is called as nanoGPT calls it, `model(X, Y)`, and returns (logits, loss).
Tune it without touching it:
    autotune tune nano script=examples/byo_script/nano_train.py script_args='examples/byo_script/config/train_tiny.py' smoke
"""

import os
from contextlib import nullcontext

import torch
from transformers import AutoConfig, AutoModelForCausalLM

# default config values -------------------------------------------------------------------------
batch_size = 1
gradient_accumulation_steps = 8
block_size = 256
max_iters = 400
learning_rate = 1e-4
n_layer = 2
n_embd = 128
dropout = 0.0
compile = False
dtype = "float32"
seed = 0
# -----------------------------------------------------------------------------------------------
config_keys = [k for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, float, bool, str))]
exec(open(os.path.join(os.path.dirname(__file__), "configurator.py")).read())  # overrides from the command line
# -----------------------------------------------------------------------------------------------


class GPT(torch.nn.Module):
    """nanoGPT's interface: forward(idx, targets) -> (logits, loss)."""

    def __init__(self) -> None:
        super().__init__()
        config = AutoConfig.for_model("gpt2", vocab_size=2048, n_positions=block_size, n_embd=n_embd, n_layer=n_layer,
                                      n_head=4, bos_token_id=0, eos_token_id=0, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
        self.transformer = AutoModelForCausalLM.from_config(config)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        logits = self.transformer(input_ids=idx).logits
        loss = None
        if targets is not None:
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


torch.manual_seed(seed)
data = torch.randint(0, 2048, (200_000,))


def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ix = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


device_type = "cuda" if torch.cuda.is_available() else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if dtype == "float32" else torch.autocast(device_type=device_type, dtype=ptdtype)
model = GPT().to(device_type)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
if compile:
    model = torch.compile(model)
model.train()
for iter_num in range(max_iters):
    for micro_step in range(gradient_accumulation_steps):
        X, Y = (t.to(device_type) for t in get_batch())
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % 50 == 0:
        print(f"iter {iter_num}: loss {loss.item() * gradient_accumulation_steps:.4f}")
