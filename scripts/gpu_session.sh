#!/usr/bin/env bash
# One lent-GPU session, end to end in under 12 minutes (default parts): the CUDA-marked tests (the runners'
# CUDA paths, then each knob of issue #20), then real tunes on the local GPU (random weights, nothing
# downloaded), each bounded by its own time budget:
#   1. a model with the shape of Qwen2.5-0.5B from the naive start (fp32, eager, micro-batch 1, padded),
#      with every knob (qwen), and the same job with only the knobs that existed before issue #20 (qwen_old),
#   2. the tiny VLM preset (image+text rows; part vlm, not in the default),
#   3. model=mlp (the framework-free runner: the install check; part mlp, not in the default),
# and prints each run's device peaks, baseline and best samples/s, MFU and trial list (scripts/run_summary.py).
# Usage: bash scripts/gpu_session.sh [OUT]   (from the repository root; OUT collects logs and reports)
#        PARTS="tests mlp" bash scripts/gpu_session.sh   runs only those parts (default: tests knobs qwen qwen_old)
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

parts=" ${PARTS:-tests knobs qwen qwen_old} "
if [[ $parts == *" tests "* ]]; then
    echo "== CUDA-marked tests"
    timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider --durations=5 tests/test_cuda.py > "$out/pytest.log" 2>&1
    tail -25 "$out/pytest.log"
fi
if [[ $parts == *" knobs "* ]]; then
    echo "== CUDA-marked knob tests (each knob's samples/s, MFU and peak memory are JSON lines in the log)"
    timeout 170 python3 -m pytest -q -s -m gpu -p no:cacheprovider -rs tests/test_cuda_knobs.py > "$out/knobs.log" 2>&1
    grep '^{"trial"' "$out/knobs.log"
    tail -20 "$out/knobs.log"
fi

tune() {  # tune LIMIT_S RUN key=value ...
    local limit=$1 run=$2
    shift 2
    echo "== tune $run $*"
    timeout "$limit" python3 -m autotune.cli.main tune "$run" "$@" kb="$PWD/runs/gpu_kb" > "$out/$run.log" 2>&1
    echo "exit $?"
    tail -3 "$out/$run.log"
    python3 scripts/run_summary.py "runs/$run" && cp "runs/$run/report.md" "$out/$run.md"
}

if [[ $parts == *" qwen "* ]]; then
    # The issue's job: the Qwen2.5-0.5B shape at max_len=2048, effective_batch=16, from the naive start;
    # trials train inside trl.SFTTrainer and the hand-over times both YAML files in `trl sft` after the loop.
    tune 200 gpu_qwen model=qwen2.5-0.5b-shape dataset=synthetic max_len=2048 effective_batch=16 \
        per_device_train_batch_size=1 padding=max_length precision=fp32 attn_implementation=eager time=130s realize=false
fi
if [[ $parts == *" qwen_old "* ]]; then
    # The same job tuned with only the knobs that existed before issue #20: what the new ones add.
    tune 200 gpu_qwen_old model=qwen2.5-0.5b-shape dataset=synthetic max_len=2048 effective_batch=16 \
        per_device_train_batch_size=1 padding=max_length precision=fp32 attn_implementation=eager time=130s realize=false \
        only=per_device_train_batch_size,padding,group_by_length,attn_implementation,precision,gradient_checkpointing,torch_compile,dataloader_num_workers,dataloader_pin_memory,optim
fi
if [[ $parts == *" vlm "* ]]; then
    tune 95 gpu_vlm model="${VLM_PRESET:-tiny-qwen2-vl}" dataset=synthetic max_len=512 effective_batch=8 time=80s
fi
if [[ $parts == *" mlp "* ]]; then
    tune 75 gpu_mlp model=mlp mlp_width=4096 mlp_depth=8 max_len=4096 effective_batch=128 time=60s
fi
