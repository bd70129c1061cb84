#!/usr/bin/env bash
# GPU check: tune a model with the shape of Qwen2.5-0.5B (random weights, nothing downloaded) on the
# local GPU within 8 minutes, then print the measured device peaks, and baseline and best samples/s
# and MFU from the run's records.
# Usage: bash scripts/gpu_check.sh   (from the repository root, with the project installed)
set -euo pipefail
run="gpu_check_$(date +%H%M%S)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
autotune tune "$run" model=qwen2.5-0.5b-shape dataset=synthetic max_len=2048 effective_batch=16 \
    per_device_train_batch_size=1 padding=max_length precision=fp32 attn_implementation=eager time=7m
python - "$run" <<'PY'
import json, sys
folder = f"runs/{sys.argv[1]}"
frame = json.load(open(f"{folder}/frame.json"))
peaks = frame["device"]["peaks"]
print(f"device {frame['device']['name']}: measured matmul TFLOP/s "
      + ", ".join(f"{k} {v / 1e12:.1f}" for k, v in peaks["matmul_flops"].items())
      + f"; copy {peaks['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write)")
records = [json.loads(line) for line in open(f"{folder}/experiments.jsonl")]
kept = [r for r in records if r["decision"] == "keep"]
for label, record in (("baseline", records[0]), ("best", kept[-1] if kept else records[0])):
    m = record["measurements"][-1]
    mfu = f"{m['mfu']:.1%}" if m.get("mfu") is not None else "-"
    print(f"{label}: {record['samples_per_s']:.2f} samples/s, {m['tokens_per_s']:.0f} tokens/s, MFU {mfu}, "
          f"peak {m['peak_memory']['bytes'] / 2**30:.1f} GiB, knobs {record['knobs']}")
for r in records:
    print(r["trial"], r["change"], r["state"], r["decision"], r["samples_per_s"], r["reason"][:110])
PY
