"""Bring your own script on Accelerate and Lightning, end to end: the shipped examples tuned through the
CLI from a copy of the project folder, launched as their docstrings launch them, every file of the
examples hashed before and after."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo_script"


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def records(cwd: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (cwd / "runs" / run / "experiments.jsonl").read_text().splitlines()]


# The fake clock's table: padding to the longest row and micro-batch 8 pay, every other change is 10% slower.
GAINS = {("padding", "longest"): 2.0, ("per_device_train_batch_size", 8): 1.5}


@pytest.fixture
def clocked(monkeypatch):
    """`autotune tune` gets the real executor behind a fake clock (tests/fake_clock.py): each config
    runs the script for real once, launched as the job says; the times the loop judges are the table's."""
    import autotune.executors as executors
    from autotune.executors import LocalExecutor
    from fake_clock import FakeClock

    clock = FakeClock(LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}), GAINS, default=0.9)
    monkeypatch.setattr(executors, "get_executor", lambda *args, **keys: clock)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    return clock


@pytest.mark.parametrize("run, words, change, read, command", [
    # As the README prints it: the launcher's words in script_launcher=, precision its --mixed_precision.
    # Its rows 64 tokens (the script's --max_len), not the 256 of its default: read and launched the same way.
    ("accel", ["script=examples/byo_script/accel_train.py", "script_launcher=accelerate launch",
               "script_args=--max_len 64"], "padding=longest",
     "launcher:--mixed_precision (default) = 'no' -> precision", "accelerate launch "),
    ("cli", ["script=examples/byo_script/lightning_cli.py",
             "script_args=fit --config examples/byo_script/lightning_cli.yaml"], "padding=longest",
     "examples/byo_script/lightning_cli.yaml:data.pad_to_max_length = True -> pad_to_max_length", "python "),
    # The accumulation is a keyword of the script's own Trainer(...) call: edited in the trial's copy.
    ("pl", ["script=examples/byo_script/lightning_train.py"], "per_device_train_batch_size=8",
     "script:Trainer.accumulate_grad_batches = 8 -> accumulation", "python "),
], ids=["accelerate", "lightning_cli", "lightning_trainer"])
def test_a_framework_example_is_tuned_as_it_is_launched_without_touching_its_files(tmp_path, monkeypatch, capsys,
                                                                                   clocked, run, words, change, read,
                                                                                   command):
    import autotune.cli.main as cli

    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    before = hashes(tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["tune", run, *words, f"only={change.split('=')[0]}", "smoke", "max_trials=1", "time=30m"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert hashes(tmp_path / "examples") == before          # not one byte of the user's files changed
    assert read in out.out
    trials = records(tmp_path, run)
    assert [(t["change"], t["state"]) for t in trials] == [(None, "complete"), (change, "complete")], \
        [(t["change"], t["reason"]) for t in trials]
    kept = trials[1]
    # The decision is the clock's; what ran is real: the edit seen, the per-row losses compared, the
    # worst-case batch run and fitting, the baseline's time split into its phases.
    assert kept["decision"] == "keep" and kept["parity"]["ok"] and "worst-case batch fits" in kept["reason"]
    best = json.loads((tmp_path / "runs" / run / "best_config.json").read_text())
    seen = kept["measurements"][0]["observed"]
    max_len = 64 if run == "accel" else 256
    if change == "padding=longest":
        assert seen["widths"][0] < max_len
    else:   # micro-batch 8, no accumulation, where the script's own Trainer(...) call says it
        assert (seen["rows_per_micro_batch"], seen["micro_batches_per_step"]) == (8, 1)
        assert best["config_edits"] == {str(tmp_path / "examples/byo_script/lightning_train.py"): {
            "Trainer(accumulate_grad_batches)": 1}}
    micro = kept["knobs"]["per_device_train_batch_size"]
    assert kept["ceiling"]["fits"] and kept["ceiling"]["shape"] == f"{micro} x {max_len} tokens"
    baseline = trials[0]["measurements"][0]["breakdown"]
    assert baseline["steps"] == 1 and baseline["forward_share"] > 0 and baseline["backward_share"] > 0
    assert best["command"].startswith(command), best["command"]
    report = (tmp_path / "runs" / run / "report.md").read_text()
    assert read in report and "where the baseline's time goes: data wait" in report
    launched = [json.loads(p.read_text())["script"]["launcher"] for p in (tmp_path / "runs" / run / "trials").glob(
        "*/spec.json") if json.loads(p.read_text())["kind"] == "trial"]
    assert launched and all(words == (["accelerate", "launch"] if run == "accel" else []) for words in launched)


UNDER_TORCHRUN = '''
import os
import torch

assert os.environ.get("LOCAL_RANK") == "0" and os.environ.get("WORLD_SIZE") == "1", "not under torchrun"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 64))
optimizer = torch.optim.AdamW(model.parameters())
for step in range(20):
    ids = torch.randint(1, 64, (2, 8))
    loss = torch.nn.functional.cross_entropy(model(ids).transpose(1, 2), ids)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
'''


def test_a_trial_with_torchrun_runs_the_script_inside_it(tmp_path):
    # The runner started by hand as the executor starts it: it relays the trial into the launcher, and
    # the script (which refuses to run outside torchrun) is measured there, under the same hooks.
    from autotune.executors.local import LocalExecutor

    (tmp_path / "ddp.py").write_text(UNDER_TORCHRUN)
    spec = {"schema_version": 1, "kind": "probe", "runner": "script", "job": {"seed": 0, "smoke": True},
            "knobs": {"precision": "fp32"},
            "script": {"path": str(tmp_path / "ddp.py"), "cwd": str(tmp_path), "configs": [], "edits": {}, "args": [],
                       "expect": {}, "exclude": [], "launcher": ["torchrun", "--nproc_per_node=1"]},
            "flags": [], "measure_steps": 2, "warmup_max": 0, "workdir": str(tmp_path / "trial" / "work")}
    result = LocalExecutor(fork=False).run(spec, tmp_path / "trial", 300)
    assert result["state"] == "complete", (result.get("reason"), result.get("stderr_tail", "")[-2000:])
    assert result["measurement"]["observed"]["rows_per_micro_batch"] == 2


@pytest.mark.parametrize("script, args, change", [
    # accelerate reads the variable where no launcher sets it; Lightning the keyword in its Trainer(...)
    # call, or the --trainer.precision flag after a LightningCLI's --config.
    ("accel_train.py", ["--grad_accum", "1"], {"env": {"ACCELERATE_MIXED_PRECISION": "bf16"}}),
    ("lightning_train.py", [], {"source_edits": [[["Trainer", "precision"], "bf16-mixed"],
                                                 [["Trainer", "accumulate_grad_batches"], 1]]}),
    ("lightning_cli.py", ["fit", "--config", "examples/byo_script/lightning_cli.yaml",
                          "--trainer.accumulate_grad_batches=1", "--trainer.precision", "bf16-mixed"], {}),
], ids=["accelerate_env", "lightning_trainer", "lightning_cli"])
def test_bf16_reaches_the_model_the_way_each_framework_sets_it(tmp_path, monkeypatch, script, args, change):
    from autotune.executors.local import LocalExecutor

    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    spec = {"schema_version": 1, "kind": "probe", "runner": "script", "job": {"seed": 0, "smoke": True},
            "knobs": {"precision": "bf16"},
            "script": {"path": str(tmp_path / "examples" / "byo_script" / script), "cwd": str(tmp_path), "configs": [],
                       "edits": {}, "args": args, "expect": {"precision": "bf16"}, "exclude": [], **change},
            "flags": [], "measure_steps": 1, "warmup_max": 0, "workdir": str(tmp_path / "trial" / "work")}
    result = LocalExecutor().run(spec, tmp_path / "trial", 600)
    assert result["state"] == "complete", (result.get("reason"), result.get("stderr_tail", "")[-2000:])
    assert result["measurement"]["observed"]["compute_dtypes"] == ["bfloat16"]
