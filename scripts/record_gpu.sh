#!/usr/bin/env bash
# Record the GPU table(s) of the search benchmark on the local GPU (an H200 took ~28 s a config, so
# about 17 minutes: give --budget-s; the table says when it was cut short): every config of
# bench/workloads.py's GPU grid (a model with the shape of Qwen2.5-0.5B, random weights, nothing
# downloaded), each a real trial, written to bench/tables/gpu-*.json. A table the budget cuts short
# says so ("complete": false) and keeps what was measured.
# Usage: bash scripts/record_gpu.sh   (from the repository root, with the project installed)
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 480 python -m bench.record --gpu --budget-s 420 "$@"
