#!/usr/bin/env bash
# One lent-GPU session, end to end in under 10 minutes: the CUDA-marked tests, then three real tunes on the
# local GPU (random weights, nothing downloaded), each bounded by its own time budget:
#   1. a model with the shape of Qwen2.5-0.5B from the naive start (fp32, eager, micro-batch 1, padded),
#   2. the tiny VLM preset (image+text rows),
#   3. model=mlp (the framework-free runner: the install check),
# and prints each run's device peaks, baseline and best samples/s, MFU and trial list (scripts/run_summary.py).
# Usage: bash scripts/gpu_session.sh [OUT]   (from the repository root; OUT collects logs and reports)
#        PARTS="tests mlp" bash scripts/gpu_session.sh   runs only those parts (default: tests mlp qwen vlm)
# Packages the machine lacks may be given as wheels in .whl/ (installed to /tmp/site first).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-/tmp/gpu_session}}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,temperature.gpu --format=csv,noheader || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"

parts=" ${PARTS:-tests mlp qwen vlm} "
if [[ $parts == *" tests "* ]]; then
    echo "== CUDA-marked tests"
    timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider --durations=5 tests/test_cuda.py > "$out/pytest.log" 2>&1
    tail -25 "$out/pytest.log"
fi

tune() {  # tune LIMIT_S RUN key=value ...
    local limit=$1 run=$2
    shift 2
    echo "== tune $run $*"
    timeout "$limit" python3 -m autotune.cli tune "$run" "$@" kb="$PWD/runs/gpu_kb" > "$out/$run.log" 2>&1
    echo "exit $?"
    tail -3 "$out/$run.log"
    python3 scripts/run_summary.py "runs/$run" && cp "runs/$run/report.md" "$out/$run.md"
}

if [[ $parts == *" qwen "* ]]; then
    # The issue's job: the Qwen2.5-0.5B shape at max_len=2048, effective_batch=16, from the naive start;
    # trials train inside trl.SFTTrainer and the hand-over times both YAML files in `trl sft` after the loop.
    tune 290 gpu_qwen model=qwen2.5-0.5b-shape dataset=synthetic max_len=2048 effective_batch=16 \
        per_device_train_batch_size=1 padding=max_length precision=fp32 attn_implementation=eager time=170s
fi
if [[ $parts == *" vlm "* ]]; then
    tune 95 gpu_vlm model="${VLM_PRESET:-tiny-qwen2-vl}" dataset=synthetic max_len=512 effective_batch=8 time=80s
fi
if [[ $parts == *" mlp "* ]]; then
    tune 75 gpu_mlp model=mlp mlp_width=4096 mlp_depth=8 max_len=4096 effective_batch=128 time=60s
fi
