"""Bring your own script, judged by row identity, end to end through the CLI on scripts written for these
tests: a length-grouping switch is an order change, a decoy "grouping" that drops rows is refused, a
nanoGPT-style script whose random windows follow the batch shape is checked statistically, and TRL's
installed sft.py starts from SFTConfig's own defaults with checkpointing off tried. These assert the
parity verdicts and what was tried, not which trial is faster: the tunes run on the fake clock
(tests/fake_clock.py), each config once for real, its per-row losses the real ones."""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# A plain loop on a small pure-torch LM: rows of four lengths padded to the longest of each micro-batch;
# `group_by_length` sorts each step's rows by length, and with `drop_short` swaps the step's shortest row
# for a second copy of its longest.
GROUPED = textwrap.dedent('''
    import random
    import torch
    import yaml

    cfg = yaml.safe_load(open("group.yaml"))
    rng = random.Random(0)
    rows = [[rng.randrange(1, 512) for _ in range(rng.choice((8, 16, 24, 128)))] for _ in range(2000)]
    torch.manual_seed(0)


    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(512, 128)
            self.mix = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
            self.head = torch.nn.Linear(128, 512)

        def forward(self, input_ids, attention_mask=None, labels=None):
            hidden = self.embed(input_ids)
            hidden = hidden + self.mix(torch.cumsum(hidden, 1) / torch.arange(1, input_ids.shape[1] + 1)[None, :, None])
            logits = self.head(hidden)
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 512), labels[:, 1:].reshape(-1))
            return loss, logits


    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_rows = cfg["batch_size"] * cfg["grad_accum"]
    for step in range(200):
        chunk = rows[step * step_rows:(step + 1) * step_rows]
        if cfg["group_by_length"]:
            chunk = sorted(chunk, key=len, reverse=True)
            if cfg["drop_short"]:
                chunk = chunk[:1] + chunk[:-1]
        for start in range(0, step_rows, cfg["batch_size"]):
            batch = chunk[start:start + cfg["batch_size"]]
            width = max(len(r) for r in batch) if cfg["padding"] == "longest" else cfg["max_len"]
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, r in enumerate(batch):
                ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
            loss, _ = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
            (loss / cfg["grad_accum"]).backward()
        optimizer.step()
        optimizer.zero_grad()
''')

# nanoGPT's loop and model interface (model(X, Y) -> logits, loss) on fresh random windows each call.
# On a GPU nanoGPT's own `torch.randint` draws other windows when the batch shape changes (the generator
# advances by the call); the CPU's does not, so here each call draws from a fresh permutation.
WINDOWS = textwrap.dedent('''
    import torch
    import yaml

    cfg = yaml.safe_load(open("nano.yaml"))
    torch.manual_seed(0)
    data = torch.randint(0, 256, (20000,), generator=torch.Generator().manual_seed(1))


    def get_batch(batch_size, block_size):
        ix = torch.randperm(len(data) - block_size - 1)[:batch_size]
        x = torch.stack([data[i:i + block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
        return x, y


    class TinyGPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(256, 64)
            self.mix = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
            self.head = torch.nn.Linear(64, 256)

        def forward(self, idx, targets=None):
            hidden = self.embed(idx)
            hidden = hidden + self.mix(torch.cumsum(hidden, 1) / torch.arange(1, idx.shape[1] + 1)[None, :, None])
            logits = self.head(hidden)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, 256), targets.view(-1)) if targets is not None else None
            return logits, loss


    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(500):
        for _ in range(cfg["gradient_accumulation_steps"]):
            X, Y = get_batch(cfg["batch_size"], cfg["block_size"])
            _, loss = model(X, Y)
            (loss / cfg["gradient_accumulation_steps"]).backward()
        optimizer.step()
        optimizer.zero_grad()
''')


# The clock's table: length grouping and a larger micro-batch pay, so a change whose parity holds is kept
# and its reason must say how parity was judged; every other change is 10% slower.
GAINS = {("group_by_length", True): 1.5, **{("per_device_train_batch_size", m): 1.5 for m in (2, 4, 8)}}


def tune(tmp_path: Path, monkeypatch, run: str, *words: str) -> list[dict]:
    import autotune.cli.main as cli
    from fake_clock import install

    install(monkeypatch, GAINS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = cli.main(["tune", run, *words, "smoke", "max_trials=1", "time=30m"])
    assert code == 0
    return [json.loads(line) for line in (tmp_path / "runs" / run / "experiments.jsonl").read_text().splitlines()]


def grouped(tmp_path: Path, drop_short: bool) -> None:
    (tmp_path / "group.py").write_text(GROUPED)
    (tmp_path / "group.yaml").write_text("batch_size: 4\ngrad_accum: 4\nmax_len: 128\npadding: longest\n"
                                         f"group_by_length: false\ndrop_short: {str(drop_short).lower()}\n")


def test_a_length_grouping_switch_is_an_order_change_kept_by_parity(tmp_path, monkeypatch):
    grouped(tmp_path, drop_short=False)
    trials = tune(tmp_path, monkeypatch, "grouped", "script=group.py", "script_configs=group.yaml",
                  "only=group_by_length")
    trial = trials[1]
    assert trial["change"] == "group_by_length=True" and trial["state"] == "complete", trial["reason"]
    # The same rows over every compared step, in another order and other micro-batches: parity holds.
    assert trial["parity"]["ok"] and trial["parity"]["kind"] in ("same", "weighting"), trial["parity"]
    said = re.search(r"data order changed: the same (\d+) rows over the (\d+) compared steps", trial["parity"]["reason"])
    assert said and int(said[1]) == 16 * int(said[2]), trial["parity"]["reason"]   # every row of every step
    assert trial["decision"] == "keep" and "data order changed" in trial["reason"], trial["reason"]
    assert "data order changed" in (tmp_path / "runs" / "grouped" / "report.md").read_text()


def test_a_grouping_that_drops_rows_is_refused_with_what_it_did(tmp_path, monkeypatch):
    grouped(tmp_path, drop_short=True)
    trials = tune(tmp_path, monkeypatch, "decoy", "script=group.py", "script_configs=group.yaml",
                  "only=group_by_length")
    trial = trials[1]
    assert trial["change"] == "group_by_length=True" and trial["decision"] == "discard"
    assert not trial["parity"]["ok"] and trial["parity"]["kind"] == "rows"
    # One row of each step dropped, another twice.
    said = re.match(r"the rows differ from the baseline's over the (\d+) compared steps \(rows (\d+) dropped, "
                    r"(\d+) duplicated\)", trial["reason"])
    assert said and said[1] == said[2] == said[3], trial["reason"]


def test_random_windows_under_another_micro_batch_are_checked_statistically(tmp_path, monkeypatch):
    (tmp_path / "nano.py").write_text(WINDOWS)
    (tmp_path / "nano.yaml").write_text("batch_size: 1\ngradient_accumulation_steps: 8\nblock_size: 64\n")
    trials = tune(tmp_path, monkeypatch, "windows", "script=nano.py", "script_configs=nano.yaml",
                  "only=per_device_train_batch_size")
    trial = trials[1]
    assert trial["change"].startswith("per_device_train_batch_size=") and trial["state"] == "complete"
    assert trial["parity"]["ok"] and trial["parity"]["kind"] == "statistical", trial["parity"]
    assert trial["parity"]["reason"].startswith("the check was statistical: the script drew other rows")
    assert trial["decision"] == "keep" and "the check was statistical" in trial["reason"], trial["reason"]


def _tiny_sft_inputs(folder: Path) -> None:
    """A tiny Qwen2 saved locally and pre-tokenized rows (nothing downloaded), and a config that leaves
    bf16 and checkpointing to SFTConfig."""
    import random

    from tokenizers import Tokenizer, models
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"t{i}": i for i in range(3, 256)}}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                        pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    config = AutoConfig.for_model("qwen2", vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, use_cache=False, pad_token_id=0,
                                  eos_token_id=1)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder / "tiny")
    tokenizer.save_pretrained(folder / "tiny")
    rng = random.Random(0)
    (folder / "data").mkdir()
    (folder / "data" / "train.jsonl").write_text("".join(
        json.dumps({"input_ids": [rng.randrange(3, 256) for _ in range(rng.randrange(8, 60))]}) + "\n"
        for _ in range(400)))
    (folder / "sft.yaml").write_text("model_name_or_path: ./tiny\ndataset_name: ./data\noutput_dir: out\n"
                                     "per_device_train_batch_size: 2\ngradient_accumulation_steps: 4\nmax_length: 64\n"
                                     "max_steps: 50\nreport_to: none\nsave_strategy: \"no\"\nuse_cpu: true\n")


def test_trls_installed_sft_script_is_tuned_from_its_own_defaults(tmp_path, monkeypatch):
    import trl

    _tiny_sft_inputs(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sft = Path(trl.__file__).parent / "scripts" / "sft.py"
    before = hashlib.sha256(sft.read_bytes()).hexdigest()
    trials = tune(tmp_path, monkeypatch, "sft", f"script={sft}", "script_args=--config sft.yaml",
                  "only=gradient_checkpointing")
    baseline, trial = trials[0], trials[1]
    # The baseline as TRL runs it: bf16 on, activation checkpointing on, and the hooks saw it checkpoint.
    assert (baseline["knobs"]["precision"], baseline["knobs"]["gradient_checkpointing"]) == ("bf16", True)
    assert all(m["observed"]["gradient_checkpointing"] is True for m in baseline["measurements"])
    assert trial["change"] == "gradient_checkpointing=False" and trial["state"] == "complete", trial["reason"]
    assert all(m["observed"]["gradient_checkpointing"] is False for m in trial["measurements"])
    assert trial["parity"]["ok"] and trial["parity"]["kind"] == "same"
    report = (tmp_path / "runs" / "sft" / "report.md").read_text()
    assert "sft.yaml:activation_checkpointing (default) = True -> gradient_checkpointing" in report
    assert hashlib.sha256(sft.read_bytes()).hexdigest() == before     # the installed script is never written


def test_a_grouping_switch_no_name_covers_is_confirmed_by_the_rows_it_reorders(tmp_path, monkeypatch):
    # `sort_by_len` is in no name table; it sorts each step's rows, so consecutive micro-batches jump back
    # at every step's start: the probe runs see the same rows in another order, padded less.
    from autotune import job_from_words

    (tmp_path / "group.py").write_text(GROUPED.replace('cfg["group_by_length"]', 'cfg["sort_by_len"]'))
    (tmp_path / "group.yaml").write_text("batch_size: 4\ngrad_accum: 4\nmax_len: 128\npadding: longest\n"
                                         "sort_by_len: false\ndrop_short: false\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    job, _ = job_from_words("probed", ["script=group.py", "script_configs=group.yaml", "smoke"])
    assert job.script.knobs == ("sort_by_len:group_by_length:probed",)
