#!/usr/bin/env bash
# One lent-GPU session, end to end in under 9 minutes (default parts: tests grid):
#   tests    the CUDA-marked tests of the runners (tests/test_cuda.py; 131 s on the H200, 2026-12-04);
#   table    the search benchmark's GPU table, recorded on this card (bench/record.py's gpu-long-tail: a model
#            with the shape of Qwen2.5-0.5B, random weights, every config of the GPU grid, each a real trial),
#            written to OUT/gpu-long-tail.json for `python -m bench.search` to replay at the card's own noise.
#            Not in the default: on the H200 one config cost 27.6 s of wall for 3.5 s of measured steps
#            (bench/results/gpu-s40/), so the 36 configs need ~17 minutes, more than a session's device time;
#   grid     `autotune tune` on the same job and grid, live: its device runs and device seconds to the
#            best, beside the table's best and the replayed peers;
#   expert   ../shared/gpu/expert_ref.py on the same job (if present): an expert's hand-tuned configs.
# Other parts: knobs (each knob of issue #20), qwen / qwen_old (the 2048 x 16 job from the naive start with
# every knob / the old ones), vlm (the tiny VLM preset), mlp (the framework-free runner).
# Each part is bounded by its own timeout; each run's figures are printed by scripts/run_summary.py.
# Usage: bash scripts/gpu_session.sh [OUT]   (from the repository root; OUT collects logs and reports)
#        PARTS="tests mlp" bash scripts/gpu_session.sh   runs only those parts
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

parts=" ${PARTS:-tests grid} "
if [[ $parts == *" tests "* ]]; then
    echo "== CUDA-marked tests"
    timeout "${TESTS_S:-200}" python3 -m pytest -q -x -m gpu -p no:cacheprovider --durations=5 tests/test_cuda.py > "$out/pytest.log" 2>&1
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
    tar -czf "$out/$run.tgz" -C runs "$run" 2>/dev/null || true
}

if [[ $parts == *" table "* ]]; then
    # The GPU grid's table, cut short by the budget where the card is slower than planned (it says so).
    echo "== table: bench.record gpu-long-tail"
    timeout "${TABLE_S:-250}" python3 -m bench.record --workload gpu-long-tail --out "$out" \
        --budget-s "${TABLE_BUDGET_S:-190}" --refine "${REFINE_TOP:-4}" --repeats 1 --aa "${AA_RUNS:-3}" \
        > "$out/table.log" 2>&1
    echo "exit $?"
    grep -v "━\|━" "$out/table.log" | tail -4
    python3 - "$out/gpu-long-tail.json" <<'PY' || true
import json, sys
t = json.load(open(sys.argv[1]))
done = [c for c in t["configs"] if c["state"] == "complete"]
base = [m["samples_per_s"] for m in t["baseline"]["measurements"]]
print(f"{len(t['configs'])} configs, {len(done)} complete, recorded in {t['record_wall_s']}s; baseline runs {base}")
print("A/A runs", t.get("aa_samples_per_s"), "refined", t.get("refined"))
for c in sorted(done, key=lambda c: -c["measurement"]["samples_per_s"])[:8]:
    k = c["knobs"]
    print(f"  {c['measurement']['samples_per_s']:8.2f} samples/s  wall {c['wall_s']:5.1f}s  {k['padding']} mb={k['per_device_train_batch_size']} {k['precision']}")
PY
fi
if [[ $parts == *" grid "* ]]; then
    # The table's job and grid tuned live: what the replay predicts, on the card itself. Its baseline's
    # three runs take ~85 s on the H200 (a run is ~28 s, start-up included): 80 s ended it in the baseline.
    tune "${GRID_S:-330}" gpu_grid model="${GRID_MODEL:-qwen2.5-0.5b-shape}" dataset=synthetic max_len=1024 \
        effective_batch=8 only=padding,per_device_train_batch_size,precision time="${GRID_TIME:-300s}" realize=false --json
    # --json's object is the log's last line: the tune's speed-up, device runs and device seconds.
    grep "^{" "$out/gpu_grid.log" | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print({k: d.get(k) for k in ('speedup','device_runs','device_s','trials','stop_reason')})" || true
fi
if [[ $parts == *" expert "* ]]; then
    # ../shared does not travel to a lent machine: carry a copy in .carry/ (ignored by git).
    ref=../shared/gpu/expert_ref.py
    [ -f "$ref" ] || ref=.carry/expert_ref.py
    if [ -f "$ref" ]; then
        echo "== expert_ref (max_len 1024, effective batch 8)"
        timeout "${EXPERT_S:-60}" python3 "$ref" --shape qwen2.5-0.5b --max-len 1024 --eb 8 --steps 6 > "$out/expert.log" 2>&1
        echo "exit $?"
        cat "$out/expert.log" | tail -12
    else
        echo "== expert_ref: not found (copy ../shared/gpu/expert_ref.py to .carry/)"
    fi
fi

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
