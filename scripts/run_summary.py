"""Print one run's figures from its records: device peaks, baseline and best, and every trial.

Usage: python scripts/run_summary.py runs/RUN
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: Path) -> int:
    frame_path, records_path = folder / "frame.json", folder / "experiments.jsonl"
    if not frame_path.exists() or not records_path.exists():
        print(f"{folder}: no frame or records (the run stopped before its baseline)")
        return 1
    frame = json.loads(frame_path.read_text())
    device = frame["device"]
    peaks = device["peaks"]
    print(f"device {device.get('name')}: measured matmul TFLOP/s "
          + ", ".join(f"{k} {v / 1e12:.1f}" for k, v in peaks["matmul_flops"].items())
          + f"; copy {peaks['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write)")
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    kept = [r for r in records if r["decision"] == "keep"]
    for label, record in (("baseline", records[0]), ("best", kept[-1] if kept else records[0])):
        if not record["measurements"]:
            print(f"{label}: {record['state']}: {record['reason'][:200]}")
            continue
        m = record["measurements"][-1]
        mfu = f"{m['mfu']:.1%}" if m.get("mfu") is not None else "-"
        print(f"{label}: {record['samples_per_s']:.2f} samples/s, {m['tokens_per_s']:.0f} tokens/s, MFU {mfu}, "
              f"peak {m['peak_memory']['bytes'] / 2**30:.2f} GiB, knobs {record['knobs']}")
    for r in records:
        speed = f"{r['samples_per_s']:.2f}" if r.get("samples_per_s") else "-"
        print(f"  #{r['trial']} {r['change'] or 'baseline'}: {r['state']} {r['decision']} {speed} samples/s; "
              f"{r['reason'][:150]}")
    realized = folder / "realized.json"
    if realized.exists():  # the hand-over: both YAML files timed in `trl sft`
        done = json.loads(realized.read_text())
        if "speedup" in done and "baseline_samples_per_s" in done:
            print(f"realized in trl sft: baseline {done['baseline_samples_per_s']:.2f}, best "
                  f"{done['best_samples_per_s']:.2f} samples/s, x{done['speedup']:.2f} beside the loop's "
                  f"x{done.get('loop_speedup', 0):.2f}")
        else:
            print(f"realized in trl sft: {done.get('state')}: {done.get('reason', '')[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
