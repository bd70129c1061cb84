"""A whole smoke tune of the tiny VLM through the command line, on the real runner behind a fake clock
(tests/fake_clock.py): the change the clock says pays is kept, with parity compared on real per-row
losses, and the frame and MFU count the vision side."""

from __future__ import annotations

import json

import pytest
from fake_clock import FakeClock

from autotune.executors import LocalExecutor

pytestmark = pytest.mark.slow
GAINS = {("padding", "padding_free"): 2.0, ("padding", "longest"): 1.8}


def test_vlm_smoke_keeps_the_change_that_pays_and_trains_the_same_thing(in_tmp, monkeypatch, capsys):
    import autotune.executors as executors
    from autotune.cli.main import main

    clock = FakeClock(LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}), GAINS, default=0.9)
    monkeypatch.setattr(executors, "get_executor", lambda *args, **keys: clock)
    # Held to the padding knob (one trial) so that it fits the suite's budget; the README's command
    # (effective_batch=8, every knob) is what `python -m bench.e2e` would time.
    code = main(["tune", "vlm", "model=tiny-qwen2-vl", "dataset=synthetic", "max_len=256", "effective_batch=2",
                 "only=padding", "max_trials=1", "smoke", "time=30m"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    trials = [json.loads(line) for line in (in_tmp / "runs" / "vlm" / "experiments.jsonl").read_text().splitlines()]
    assert [t["trial"] for t in trials] == [0, 1] and trials[1]["change"] in ("padding=padding_free", "padding=longest")
    assert trials[1]["decision"] == "keep", trials[1]["reason"]
    assert trials[1]["parity"]["ok"] and trials[1]["parity"]["worst"] is not None   # compared, not skipped
    frame = json.loads((in_tmp / "runs" / "vlm" / "frame.json").read_text())
    assert frame["model"]["model_type"] == "qwen2_vl" and frame["data"]["image_token_share"] > 0.3
    # MFU counts the vision tower: a positive share of the device's measured peak.
    assert all(0 < m["mfu"] < 1 for t in trials for m in t["measurements"])
    report = (in_tmp / "runs" / "vlm" / "report.md").read_text()
    assert "attn_implementation=sdpa" not in report  # held by only=, so not even listed as skipped
    # The hand-over writes the files and says why an image-text model's are not run in `trl sft`.
    realized = json.loads((in_tmp / "runs" / "vlm" / "realized.json").read_text())
    assert realized["state"] != "complete" and "image-text model" in realized["reason"]
