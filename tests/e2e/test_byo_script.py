"""Bring your own script, end to end: the shipped examples tuned through the CLI from a copy of the
project folder, every user file hashed before and after; a crashing script and a bad path."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "byo_script"


def autotune(cwd: Path, *words: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli.main", "tune", *words], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def records(cwd: Path, run: str) -> list[dict]:
    return [json.loads(line) for line in (cwd / "runs" / run / "experiments.jsonl").read_text().splitlines()]


TRL_FLAGS = ("--output_dir out --per_device_train_batch_size 1 --gradient_accumulation_steps 8 --max_length 512 "
             "--pad_to_multiple_of 512 --use_cpu true --max_steps 400 --report_to none --save_strategy no")
HF_FLAGS = ("--output_dir out --per_device_train_batch_size 1 --gradient_accumulation_steps 8 --gradient_checkpointing "
            "--max_steps 400 --report_to none --save_strategy no")
EXAMPLES_READ = [
    ("trainer", ["script=examples/byo_script/trainer_yaml.py", "script_configs=examples/byo_script/train.yaml"],
     "examples/byo_script/train.yaml:training.per_device_train_batch_size = 1 -> micro_batch"),
    ("loop", ["script=examples/byo_script/plain_loop.py", "script_args=--batch_size 1 --grad_accum 8"],
     "--batch_size (your flag) = 1 -> micro_batch"),
    # HfArgumentParser with one JSON file, as run_clm.py's README runs it, and with flags.
    ("clm", ["script=examples/byo_script/hf_clm.py", "script_args=examples/byo_script/hf_clm.json"],
     "examples/byo_script/hf_clm.json:per_device_train_batch_size = 1 -> micro_batch"),
    ("clmflags", ["script=examples/byo_script/hf_clm.py", f"script_args={HF_FLAGS}"],
     "--pad_to_max_length (default) = True -> pad_to_max_length"),
    # TrlParser with --config, as TRL's sft.py README runs it, and with flags; the rest SFTConfig's defaults.
    ("sft", ["script=examples/byo_script/trl_sft.py", "script_args=--config examples/byo_script/trl_sft.yaml"],
     "examples/byo_script/trl_sft.yaml:bf16 (default) = True -> bf16"),
    ("sftflags", ["script=examples/byo_script/trl_sft.py", f"script_args={TRL_FLAGS}"],
     "--pad_to_multiple_of (your flag) = 512 -> pad_to_multiple_of"),
]
# The fake clock's table for the script tunes: a larger micro-batch pays, every other change is 10% slower.
GAINS = {("per_device_train_batch_size", 2): 1.5, ("per_device_train_batch_size", 4): 1.8,
         ("per_device_train_batch_size", 8): 2.0}


@pytest.fixture
def clocked(monkeypatch):
    """`autotune tune` (host=local) gets the real executor behind a fake clock (tests/fake_clock.py):
    each config runs the script for real once; the times the loop judges are the table's."""
    import autotune.executors as executors
    from autotune.executors import LocalExecutor
    from fake_clock import FakeClock

    clock = FakeClock(LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}), GAINS, default=0.9)
    monkeypatch.setattr(executors, "get_executor", lambda *args, **keys: clock)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return clock


# SFTConfig's default bf16 runs at about 1% of fp32's speed on a CPU without bf16 matrix units: the
# example's 8 x 512-token micro-batches took 14 s a step, 6 minutes a tune. The tune reads the same file
# the same way with 2 x 128 tokens a step (its bf16 default and all), so its copy here holds those.
SHORTER = {"sft": {"trl_sft.yaml": ("gradient_accumulation_steps: 8\nmax_length: 512\npad_to_multiple_of: 512",
                                    "gradient_accumulation_steps: 2\nmax_length: 128\npad_to_multiple_of: 128")},
           # run_clm's data arguments in its JSON file: 64-token rows, padded to that, read the same way.
           "clm": {"hf_clm.json": ('"gradient_accumulation_steps": 8,\n',
                                   '"gradient_accumulation_steps": 8,\n  "max_length": 64,\n')}}
# The plain loop takes its sizes as flags: its tune here runs 64-token rows (the script's --max_len), read
# and tuned the same way as its 256-token default, a quarter of the compute a step.
SHORTER_ARGS = {"loop": " --max_len 64"}


def pays(trial: dict) -> bool:
    return any(trial["knobs"][name] == value for name, value in GAINS)


@pytest.mark.parametrize("run, words, read", EXAMPLES_READ, ids=[case[0] for case in EXAMPLES_READ])
def test_each_example_script_is_read_as_its_style_says(tmp_path, monkeypatch, run, words, read):
    # Discovery alone (what `tune` prints first and the report's "Your script" holds): each way a script
    # takes its settings is read to the knobs it maps to, and nothing is written.
    import shlex

    from autotune.workloads.jobs import job_from_words
    from autotune.workloads.script import ScriptAdapter

    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    before = hashes(tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    job, _ = job_from_words(run, [*words, "smoke"])
    listing = ScriptAdapter.for_script(Path(job.script.path), job.script.configs, shlex.split(job.script.args),
                                       tmp_path, job.max_len, job.effective_batch, job.script.knobs).listing()
    assert read in listing, listing
    assert any(line.startswith("knobs to try") and "per_device_train_batch_size" in line for line in listing)
    assert hashes(tmp_path / "examples") == before


@pytest.mark.parametrize("run, words, read", [case for case in EXAMPLES_READ if case[0] in ("loop", "clm", "sft")],
                         ids=["loop", "clm", "sft"])
def test_an_example_script_is_tuned_without_touching_its_files(tmp_path, monkeypatch, capsys, clocked, run, words,
                                                                read):
    import autotune.cli.main as cli

    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    for name, (was, now) in SHORTER.get(run, {}).items():
        path = tmp_path / "examples" / "byo_script" / name
        assert was in path.read_text(), (name, was)
        path.write_text(path.read_text().replace(was, now))
    before = hashes(tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    words = [word + SHORTER_ARGS[run] if word.startswith("script_args=") and run in SHORTER_ARGS else word
             for word in words]
    code = cli.main(["tune", run, *words, "smoke", "max_trials=1", "time=30m"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert hashes(tmp_path / "examples") == before          # not one byte of the user's files changed
    assert read in out.out                                   # as it read the script, printed first
    trials = records(tmp_path, run)
    assert [t["trial"] for t in trials] == [0, 1] and len(trials[0]["measurements"]) == 3
    assert all(t["state"] == "complete" for t in trials), [(t["change"], t["reason"]) for t in trials]
    # The decision is the clock's; a kept change had its per-row losses compared for real.
    assert (trials[1]["decision"] == "keep") == pays(trials[1]), (trials[1]["change"], trials[1]["reason"])
    assert all(t["parity"]["ok"] and t["parity"].get("checked", True) for t in trials if t["decision"] == "keep")
    for trial in trials:     # every edit verified: the hooks saw the micro-batch the trial set
        for measurement in trial["measurements"]:
            assert measurement["observed"]["rows_per_micro_batch"] == trial["knobs"]["per_device_train_batch_size"]
    best = json.loads((tmp_path / "runs" / run / "best_config.json").read_text())
    best_trial = trials[1] if trials[1]["decision"] == "keep" else trials[0]
    assert best["command"].startswith("python ") and best["knobs"] == best_trial["knobs"]
    report = (tmp_path / "runs" / run / "report.md").read_text()
    assert "## Your script" in report and read in report


CRASHING = textwrap.dedent('''
    import argparse
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--grad_accum", type=int, default=4)
    parser.add_argument("--max_len", type=int, default=32)
    args = parser.parse_args()
    if args.batch_size > 1:
        raise RuntimeError("this script breaks with a larger batch")
    torch.manual_seed(0)
    config = AutoConfig.for_model("qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, use_cache=False)
    model = AutoModelForCausalLM.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters())
    for step in range(100):
        for _ in range(args.grad_accum):
            ids = torch.randint(1, 64, (args.batch_size, args.max_len))
            (model(input_ids=ids, labels=ids).loss / args.grad_accum).backward()
        optimizer.step()
        optimizer.zero_grad()
''')


def tune_here(tmp_path: Path, monkeypatch, capsys, *words: str) -> None:
    """`autotune tune WORDS` in this process (its fork server already warm), on the clocked executor: the
    states below come from the real runs; only the baseline's repeats are replayed."""
    import autotune.cli.main as cli

    monkeypatch.chdir(tmp_path)
    code = cli.main(["tune", *words])
    assert code == 0, capsys.readouterr().err[-3000:]


def test_a_crashing_script_gives_a_crash_trial_with_its_stderr(tmp_path, monkeypatch, capsys, clocked):
    (tmp_path / "crashy.py").write_text(CRASHING)
    tune_here(tmp_path, monkeypatch, capsys, "crashy", "script=crashy.py", "smoke", "max_trials=2")
    crashed = [t for t in records(tmp_path, "crashy") if t["state"] == "crash"]
    assert crashed and crashed[0]["change"].startswith("per_device_train_batch_size=")
    assert "this script breaks with a larger batch" in crashed[0]["reason"] + (crashed[0]["stderr_tail"] or "")


def test_an_edit_of_a_config_the_script_never_reads_ends_invalid(tmp_path, monkeypatch, capsys, clocked):
    # The script takes --batch_size; decoy.yaml says the same names but nothing reads it. Discovery
    # takes the file (a config beats a default), so the trial's edit lands where it changes nothing.
    (tmp_path / "crashy.py").write_text(CRASHING)
    (tmp_path / "decoy.yaml").write_text("batch_size: 1\ngrad_accum: 4\n")
    tune_here(tmp_path, monkeypatch, capsys, "decoy", "script=crashy.py", "script_configs=decoy.yaml", "smoke",
              "max_trials=1")
    trials = [t for t in records(tmp_path, "decoy") if t["change"]]
    assert trials and all(t["state"] == "invalid" for t in trials)
    micro = trials[0]["knobs"]["per_device_train_batch_size"]    # which size is tried first is the ranking's
    assert micro > 1 and trials[0]["reason"] == (f"the script did not apply per_device_train_batch_size={micro}: it ran "
                                                 "1 rows per micro-batch")


@pytest.mark.parametrize("words, needle", [
    (["script=missing.py"], "no such Python file"),
    (["script=crashy.py", "script_configs=nope.yaml"], "no such file 'nope.yaml'"),
])
def test_a_missing_script_or_config_is_one_line_and_exit_2(tmp_path, words, needle):
    (tmp_path / "crashy.py").write_text(CRASHING)
    done = autotune(tmp_path, "bad", *words, "smoke")
    assert done.returncode == 2 and needle in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_nanogpt_style_script_is_tuned_through_its_configurator(tmp_path, monkeypatch, capsys, clocked):
    # Globals overridden by a Python config and a --key=value flag, the model called as model(X, Y) with
    # dropout 0.1: the trial passes --batch_size again and edits the config's copy, the hooks see both
    # applied, and parity is read from the loss the script computes.
    import autotune.cli.main as cli

    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    before = hashes(tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    config = "examples/byo_script/config/train_tiny.py"
    code = cli.main(["tune", "nano", "script=examples/byo_script/nano_train.py", f"script_args={config} --batch_size=1",
                     "only=per_device_train_batch_size", "smoke", "max_trials=2", "time=30m"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert hashes(tmp_path / "examples") == before
    for line in ("--batch_size (your flag) = 1 -> micro_batch", f"{config}:gradient_accumulation_steps = 8 -> accumulation",
                 f"{config}:block_size = 64 -> max_len", "--compile (default) = False -> torch_compile"):
        assert line in out.out
    trials = records(tmp_path, "nano")
    assert [t["trial"] for t in trials] == [0, 1, 2]
    assert all(t["change"].startswith("per_device_train_batch_size=") for t in trials[1:])
    # Every micro-batch above 1 pays on this clock: the first is kept, compared on real per-row losses.
    kept = [t for t in trials if t["decision"] == "keep"]
    assert kept and kept[0]["trial"] == 1, [(t["change"], t["decision"], t["reason"]) for t in trials]
    assert all(t["parity"]["ok"] and t["parity"]["worst"] is not None for t in kept)   # compared, not skipped
    for trial in trials:   # every edit verified: the hooks saw the micro-batch and the accumulation it set
        micro = trial["knobs"]["per_device_train_batch_size"]
        for measurement in trial["measurements"]:
            seen = measurement["observed"]
            assert (seen["rows_per_micro_batch"], seen["micro_batches_per_step"]) == (micro, 8 // micro)
    best = json.loads((tmp_path / "runs" / "nano" / "best_config.json").read_text())
    assert best["command"].endswith(f"--batch_size={kept[-1]['knobs']['per_device_train_batch_size']}")


PROBED = textwrap.dedent('''
    import contextlib
    import torch
    import yaml
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = yaml.safe_load(open("loop.yaml"))["train"]
    torch.manual_seed(0)
    config = AutoConfig.for_model("qwen2", vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, use_cache=False)
    model = AutoModelForCausalLM.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters())
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if cfg["use_amp"] else contextlib.nullcontext()
    for step in range(200):
        for _ in range(cfg["accum_every"]):
            ids = torch.randint(1, 256, (cfg["batch_size"], cfg["max_len"]))
            with amp:
                loss = model(input_ids=ids, labels=ids).loss / cfg["accum_every"]
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
''')


def test_settings_no_name_covers_are_confirmed_by_probe_runs(tmp_path, monkeypatch):
    # accum_every and use_amp are in no name table; log_acc_every looks as much like an accumulation but
    # the script never reads it. The switch's runs say it stands for bf16.
    from autotune import schemas
    from autotune import job_from_words
    from autotune.workloads.script import ScriptAdapter

    (tmp_path / "loop.py").write_text(PROBED)
    (tmp_path / "loop.yaml").write_text("train:\n  log_acc_every: 10\n  batch_size: 1\n  accum_every: 4\n  max_len: 32\n"
                                        "  use_amp: false\n")
    before = hashes(tmp_path)   # the probes' runs go in runs/RUN, under its lock
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    job, _ = job_from_words("probed", ["script=loop.py", "script_configs=loop.yaml", "smoke"])
    assert job.script.knobs == ("accum_every:gradient_accumulation_steps:probed", "use_amp:bf16:probed")
    assert (job.effective_batch, job.start.precision) == (4, "fp32")
    schemas.validate("job", job.to_dict())
    listing = ScriptAdapter.for_script(Path("loop.py"), job.script.configs, [], names=job.script.knobs).listing()
    assert "loop.yaml:train.accum_every = 4 -> accumulation (confirmed by a probe run)" in listing
    assert "loop.yaml:train.use_amp = False -> bf16 (confirmed by a probe run)" in listing
    assert "knobs to try: per_device_train_batch_size, precision" in listing   # both are tried now
    assert {k: v for k, v in hashes(tmp_path).items() if not k.startswith("runs/")} == before


ORDERED = textwrap.dedent('''
    import random
    import torch
    import yaml
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = yaml.safe_load(open("order.yaml"))
    rng = random.Random(0)
    rows = [[rng.randrange(1, 256) for _ in range(rng.choice((8, 12, 20, 40, 64, 96)))] for _ in range(400)]
    if cfg["sort_by_len"]:          # length grouping: sorted within chunks of 64 rows, chunks in random order
        rows = [r for i in range(0, len(rows), 64) for r in sorted(rows[i:i + 64], key=len, reverse=True)]
    if cfg["concat_rows"]:          # packing: one token stream cut into full-width rows
        stream = [t for r in rows for t in r]
        rows = [stream[i:i + cfg["max_len"]] for i in range(0, len(stream) - cfg["max_len"], cfg["max_len"])]
    torch.manual_seed(0)
    config = AutoConfig.for_model("qwen2", vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, use_cache=False)
    model = AutoModelForCausalLM.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters())
    at = 0
    for step in range(100):
        for _ in range(cfg["grad_accum"]):
            batch = [r[:cfg["max_len"]] for r in rows[at:at + cfg["batch_size"]]]
            at = (at + cfg["batch_size"]) % (len(rows) - cfg["batch_size"])
            width = max(len(r) for r in batch) if cfg["padding"] == "longest" else cfg["max_len"]
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros(len(batch), width, dtype=torch.long)
            for i, r in enumerate(batch):
                ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
            labels = ids.masked_fill(mask == 0, -100)
            (model(input_ids=ids, attention_mask=mask, labels=labels).loss / cfg["grad_accum"]).backward()
        optimizer.step()
        optimizer.zero_grad()
''')


def test_length_grouping_and_packing_switches_are_confirmed_by_probe_runs(tmp_path, monkeypatch):
    # sort_by_len and concat_rows are in no name table. The probe runs see the first make consecutive
    # micro-batches alike in length and the second make every batch full width with no padding.
    from autotune import job_from_words
    from autotune.workloads.script import ScriptAdapter

    (tmp_path / "order.py").write_text(ORDERED)
    # bucket_by_len_log looks as much like a grouping switch, but the script never reads it.
    (tmp_path / "order.yaml").write_text("batch_size: 1\ngrad_accum: 4\nmax_len: 64\npadding: longest\n"
                                         "bucket_by_len_log: false\nsort_by_len: false\nconcat_rows: false\n")
    before = hashes(tmp_path)   # the probes' runs go in runs/RUN, under its lock
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    job, _ = job_from_words("ordered", ["script=order.py", "script_configs=order.yaml", "smoke"])
    assert job.script.knobs == ("sort_by_len:group_by_length:probed", "concat_rows:packing:probed")
    listing = ScriptAdapter.for_script(Path("order.py"), job.script.configs, [], names=job.script.knobs).listing()
    assert "order.yaml:sort_by_len = False -> group_by_length (confirmed by a probe run)" in listing
    assert "order.yaml:concat_rows = False -> packing (confirmed by a probe run)" in listing
    assert any(line.startswith("note: order.yaml:concat_rows = False: packing") and "never tried" in line
               for line in listing)
    assert any(line.startswith("knobs to try") and "group_by_length" in line for line in listing)
    assert {k: v for k, v in hashes(tmp_path).items() if not k.startswith("runs/")} == before
