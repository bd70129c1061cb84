"""What the script's parser returned, read where it is parsed: TRL's installed sft.py builds its parser in
a function and parses with `parse_args_and_config(fail_with_unknown_args=False)`, so only a run says
SFTConfig's defaults; an argparse default that is no literal is read the same way. The run stops when
the parser returns: nothing after it runs."""

from __future__ import annotations

import hashlib
import shlex
import textwrap
from pathlib import Path

from autotune import job_from_words, schemas
from autotune.workloads.script import ScriptAdapter

# A config that leaves bf16 and checkpointing to SFTConfig, as TRL's own README runs sft.py.
SFT_YAML = ("model_name_or_path: ./tiny\ndataset_name: ./data\noutput_dir: out\nper_device_train_batch_size: 2\n"
            "gradient_accumulation_steps: 4\nmax_length: 64\nmax_steps: 50\nreport_to: none\nsave_strategy: \"no\"\n"
            "use_cpu: true\n")


def installed_sft() -> Path:
    import trl

    return Path(trl.__file__).parent / "scripts" / "sft.py"


def adapter(job) -> ScriptAdapter:
    return ScriptAdapter.for_script(Path(job.script.path), job.script.configs, shlex.split(job.script.args), None,
                                    job.max_len, job.effective_batch, job.script.knobs, job.script.parsed)


def test_trls_installed_sft_script_starts_from_sftconfigs_own_defaults(tmp_path, monkeypatch):
    from trl import SFTConfig

    (tmp_path / "sft.yaml").write_text(SFT_YAML)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    before = hashlib.sha256(installed_sft().read_bytes()).hexdigest()
    job, _ = job_from_words("sft", [f"script={installed_sft()}", "script_args=--config sft.yaml", "smoke"])
    # As the installed TRL sets them where the file says nothing (checked against the class itself).
    made = SFTConfig(output_dir=str(tmp_path / "out"), use_cpu=True)
    assert made.bf16 is True and made.activation_checkpointing is True
    assert (job.start.precision, job.start.gradient_checkpointing) == ("bf16", True)
    assert (job.start.per_device_train_batch_size, job.effective_batch, job.max_len) == (2, 8, 64)
    assert job.script.parsed[0] == "@TrlParser.parse_args_and_config"
    schemas.validate("job", job.to_dict())
    listing = adapter(job).listing()
    assert "sft.yaml:activation_checkpointing (default) = True -> gradient_checkpointing" in listing
    assert "sft.yaml:bf16 (default) = True -> bf16" in listing
    tried = next(line for line in listing if line.startswith("knobs to try"))
    assert "gradient_checkpointing" in tried and "precision" in tried
    assert any("TrlParser.parse_args_and_config, in a run stopped there" in line for line in listing)
    # Checkpointing off is said in the parser's config file, the way the user would say it.
    files, flags = adapter(job).edits(job.start.with_change("gradient_checkpointing", False))
    assert files == {"sft.yaml": [(["activation_checkpointing"], False)]} and flags == []
    assert hashlib.sha256(installed_sft().read_bytes()).hexdigest() == before
    assert not (tmp_path / "out").exists()    # stopped at the parser: no trainer was built


ARGPARSE = textwrap.dedent('''
    import argparse
    import pathlib

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=int(pathlib.Path("bs.txt").read_text()))
    parser.add_argument("--grad_accum", type=int, default=2)
    parser.add_argument("--max_len", type=int, default=32)
    args = parser.parse_args()
    pathlib.Path("trained.txt").write_text("the script went on past its parser")
''')


def test_an_argparse_default_that_is_no_literal_is_read_from_the_parsed_namespace(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(ARGPARSE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    (tmp_path / "bs.txt").write_text("3")
    job, _ = job_from_words("args", ["script=train.py", "smoke"])
    assert (job.start.per_device_train_batch_size, job.effective_batch) == (3, 6)
    assert "batch_size=3" in job.script.parsed and job.script.parsed[0] == "@ArgumentParser.parse_known_args"
    assert "--batch_size (default) = 3 -> micro_batch" in adapter(job).listing()
    assert not (tmp_path / "trained.txt").exists()
