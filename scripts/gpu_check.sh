#!/usr/bin/env bash
# GPU check: tune a model with the shape of Qwen2.5-0.5B (random weights, nothing downloaded) on the
# local GPU within 8 minutes, then print baseline and best samples/s from the run's records.
# Usage: bash scripts/gpu_check.sh   (from the repository root, with the project installed)
set -euo pipefail
run="gpu_check_$(date +%H%M%S)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
autotune tune "$run" model=qwen2.5-0.5b-shape dataset=synthetic max_len=2048 effective_batch=16 \
    per_device_train_batch_size=1 padding=max_length precision=fp32 attn_implementation=eager time=7m
python - "$run" <<'PY'
import json, sys
records = [json.loads(line) for line in open(f"runs/{sys.argv[1]}/experiments.jsonl")]
baseline = records[0]["samples_per_s"]
kept = [r for r in records if r["decision"] == "keep"]
best = kept[-1] if kept else records[0]
print(f"baseline {baseline:.2f} samples/s; best {best['samples_per_s']:.2f} samples/s "
      f"(x{best['samples_per_s'] / baseline:.2f}) with {best['knobs']}")
for r in records:
    print(r["trial"], r["change"], r["state"], r["decision"], r["samples_per_s"], r["reason"][:100])
PY
