"""Record real optimizer-step times for the tests of autotune.probes.stats.

Run: `python tests/data/record_step_times.py` (about a minute on one core). Writes step_times.json
next to this file. Nothing here is imported by the tests; they only read the JSON.

What is measured, and why it looks like a tuning session:
- A 1-layer transformer LM (embedding, one encoder layer, vocabulary head), CPU, one thread, trained
  with AdamW. Every step has the same number of rows but a seeded, varying sequence length, so the
  workload differs by step index exactly as it does with real, unpadded data; step i holds the same
  rows in every run.
- Each run is a fresh process (import, allocator and caches start cold, as for a trial); 2 warm-up
  steps are run and not recorded, then STEPS steps are timed.
- "normal": the plain loop, repeated runs of ONE config (the A/A data).
- "slowed": the same loop with time.sleep(5% of that step's median normal time) inside every timed
  step: a real slowdown of 5% (throughput x1/1.05 = x0.952).
- Order: CALIBRATION normal runs first (their per-step medians size the sleeps), then normal and
  slowed runs interleaved N S S N ..., as the tuner interleaves incumbent and candidate.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROWS_PER_STEP = 8
STEPS = 10
WARMUP = 2
SEED = 1234
CALIBRATION = 6          # normal runs before the interleaved part
PAIRS = 6                # interleaved normal/slowed pairs -> 12 normal, 6 slowed in all
SLOWDOWN = 0.05
OUT = Path(__file__).with_name("step_times.json")


def child(sleeps: list[float]) -> None:
    """One run: build, warm up, time STEPS steps; print the step times as JSON on stdout."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    vocab, width = 1000, 128
    model = nn.Sequential()
    model.embed = nn.Embedding(vocab, width)
    model.block = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, batch_first=True)
    model.head = nn.Linear(width, vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(SEED)
    # Same seeded batches in every run: step i has the same rows, lengths vary by step.
    lengths = torch.randint(24, 72, (WARMUP + STEPS,), generator=gen).tolist()
    batches = [torch.randint(0, vocab, (ROWS_PER_STEP, n + 1), generator=gen) for n in lengths]

    def step(tokens: torch.Tensor) -> None:
        x, y = tokens[:, :-1], tokens[:, 1:]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        h = model.block(model.embed(x), src_mask=mask, is_causal=True)
        loss = nn.functional.cross_entropy(model.head(h).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for tokens in batches[:WARMUP]:
        step(tokens)
    times = []
    for i, tokens in enumerate(batches[WARMUP:]):
        start = time.perf_counter()
        step(tokens)
        if sleeps:
            time.sleep(sleeps[i])
        times.append(time.perf_counter() - start)
    print(json.dumps({"step_times": times, "lengths": lengths[WARMUP:]}))


def run(sleeps: list[float]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(sleeps)],
                         capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import torch  # only for the version; the runs import it in their own processes

    began = time.monotonic()
    normal, slowed, order = [], [], []
    for _ in range(CALIBRATION):
        got = run([])
        normal.append(got["step_times"])
        order.append("normal")
    medians = [statistics.median(col) for col in zip(*normal)]
    sleeps = [SLOWDOWN * m for m in medians]
    for i in range(PAIRS):
        for kind in (("normal", "slowed") if i % 2 == 0 else ("slowed", "normal")):
            got = run(sleeps if kind == "slowed" else [])
            (slowed if kind == "slowed" else normal).append(got["step_times"])
            order.append(kind)
    data = {
        "schema_version": 1,
        "description": __doc__.strip().splitlines()[0],
        "machine": {"cpu_count": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
                    "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "load_average": list(os.getloadavg())},
        "model": "Embedding(1000,128) + TransformerEncoderLayer(128, 4 heads, ffn 512) + Linear(128,1000); "
                 "AdamW; CPU, 1 thread",
        "rows_per_step": ROWS_PER_STEP, "warmup_steps": WARMUP, "steps": STEPS,
        "lengths": got["lengths"], "slowdown": SLOWDOWN, "sleep_s": sleeps, "run_order": order,
        "normal": normal, "slowed": slowed,
        "recording_s": round(time.monotonic() - began, 1),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}: {len(normal)} normal, {len(slowed)} slowed runs in {data['recording_s']} s")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
    else:
        main()
