"""Accelerate and Lightning scripts, read and edited (no training): the settings their own calls, the
launcher, accelerate's environment and a LightningCLI's config and flags hold, and the edit a trial
makes of each, the way the user sets it."""

from __future__ import annotations

import ast
import dataclasses
import shutil
import textwrap
from pathlib import Path

import pytest

from autotune.config.job import Job
from autotune.util.errors import JobError
from autotune.workloads.script import ScriptAdapter, frameworks, launch
from autotune.workloads.script.best import best_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "byo_script"


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(frameworks.PRECISION_ENV, raising=False)
    return tmp_path


def adapter(script: str, args: str = "", launcher: str = "") -> ScriptAdapter:
    return ScriptAdapter.for_script(Path(script), (), args.split(), launcher=tuple(launcher.split()))


def knobs(found: ScriptAdapter, **changes) -> object:
    return dataclasses.replace(found.start, **changes)


def test_accelerate_precision_is_the_environment_without_a_launcher(project, monkeypatch):
    found = adapter("examples/byo_script/accel_train.py")
    assert "env:ACCELERATE_MIXED_PRECISION (default) = 'no' -> precision" in found.listing()
    assert found.start.precision == "fp32" and "precision" in found.tryable
    files, flags = found.edits(knobs(found, precision="bf16", per_device_train_batch_size=2))
    assert files == {"env": [(["ACCELERATE_MIXED_PRECISION"], "bf16")]}
    assert flags == ["--batch_size", "2", "--grad_accum", "4"]
    # The user's own setting of the variable is the baseline's precision.
    monkeypatch.setenv(frameworks.PRECISION_ENV, "bf16")
    assert adapter("examples/byo_script/accel_train.py").start.precision == "bf16"


def test_accelerate_precision_is_the_launchers_flag_under_accelerate_launch(project):
    found = adapter("examples/byo_script/accel_train.py", launcher="accelerate launch --mixed_precision no")
    assert "launcher:--mixed_precision = 'no' -> precision" in found.listing()
    files, _ = found.edits(knobs(found, precision="bf16"))
    _, _, env, flags = frameworks.split(files)
    assert env == {} and frameworks.with_flags(["accelerate", "launch", "--mixed_precision", "no"], flags) == [
        "accelerate", "launch", "--mixed_precision", "bf16"]
    assert frameworks.with_flags(["accelerate", "launch"], flags) == ["accelerate", "launch", "--mixed_precision", "bf16"]
    # fp16 autocast is not tried on a CPU: accelerate stops there.
    assert "needs a GPU" in found.why_not("precision", "fp16", "cpu")
    assert found.why_not("precision", "fp16", "cuda") is None


LITERAL = textwrap.dedent('''
    import argparse
    from accelerate import Accelerator
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--max_len", type=int, default=64)
    args = parser.parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision="no")
    for batch in []:
        with accelerator.accumulate(None):
            pass
''')


def test_the_accelerator_call_s_own_keywords_are_edited_in_the_script_s_copy(project):
    Path("lit.py").write_text(LITERAL)
    found = adapter("lit.py")
    assert {"script:Accelerator.gradient_accumulation_steps = 4 -> accumulation",
            "script:Accelerator.mixed_precision = 'no' -> precision"} <= set(found.listing())
    assert found.effective_batch == 8
    files, flags = found.edits(knobs(found, per_device_train_batch_size=4, precision="bf16"))
    _, source, _, _ = frameworks.split(files)
    edited = frameworks.edit_source(LITERAL, source)
    call = next(n for n in ast.walk(ast.parse(edited)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Accelerator")
    assert {k.arg: k.value.value for k in call.keywords} == {"gradient_accumulation_steps": 2, "mixed_precision": "bf16"}
    assert flags == ["--batch_size", "4"]
    job = Job(run="r", model="script:lit.py", dataset="-", max_len=64, effective_batch=8,
              script=__import__("autotune.config.job", fromlist=["ScriptJob"]).ScriptJob(path="lit.py"))
    best = best_config(job, knobs(found, per_device_train_batch_size=4), found)
    assert best["config_edits"] == {"lit.py": {"Accelerator(gradient_accumulation_steps)": 2}}
    assert best["command"] == "python lit.py --batch_size 4"


def test_a_keyword_the_call_lacks_is_added_to_it():
    text = "from lightning import Trainer\ntrainer = Trainer(\n    max_steps=10,\n)\n"
    edited = frameworks.edit_source(text, [[["Trainer", "precision"], "bf16-mixed"]])
    assert "precision='bf16-mixed'" in edited and ast.parse(edited)
    assert frameworks.edit_source("Trainer()\n", [[["Trainer", "precision"], "bf16-mixed"]]) == \
        "Trainer(precision='bf16-mixed')\n"


PLAIN_LIGHTNING = textwrap.dedent('''
    import argparse
    import lightning.pytorch as pl
    from transformers import Trainer as HfTrainer
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--max_len", type=int, default=64)
    args = parser.parse_args()
    trainer = pl.Trainer(max_steps=10, accumulate_grad_batches=8)
''')


def test_a_lightning_trainer_s_keywords_and_its_defaults(project):
    Path("pl.py").write_text(PLAIN_LIGHTNING)
    found = adapter("pl.py")
    assert {"script:Trainer.accumulate_grad_batches = 8 -> accumulation",
            "script:Trainer.precision (default) = '32-true' -> precision"} <= set(found.listing())
    assert found.effective_batch == 8 and found.start.precision == "fp32"
    files, flags = found.edits(knobs(found, precision="bf16", per_device_train_batch_size=2))
    _, source, _, _ = frameworks.split(files)
    assert sorted(source) == [[["Trainer", "accumulate_grad_batches"], 4], [["Trainer", "precision"], "bf16-mixed"]]
    assert flags == ["--batch_size", "2"]
    assert "needs a GPU" in found.why_not("precision", "fp16", "cpu")


def test_lightning_cli_reads_its_yaml_sections_and_section_flags(project):
    found = adapter("examples/byo_script/lightning_cli.py",
                    "fit --config examples/byo_script/lightning_cli.yaml --trainer.precision=bf16-mixed")
    listing = set(found.listing())
    assert {"examples/byo_script/lightning_cli.yaml:trainer.accumulate_grad_batches = 8 -> accumulation",
            "examples/byo_script/lightning_cli.yaml:data.batch_size = 1 -> micro_batch",
            "examples/byo_script/lightning_cli.yaml:data.pad_to_max_length = True -> pad_to_max_length",
            "--trainer.precision (your flag) = 'bf16-mixed' -> precision"} <= listing
    assert found.start.precision == "bf16" and found.start.padding == "max_length"
    files, flags = found.edits(knobs(found, precision="fp32", per_device_train_batch_size=2, padding="longest"))
    assert files == {"examples/byo_script/lightning_cli.yaml": [
        (["data", "batch_size"], 2), (["trainer", "accumulate_grad_batches"], 4), (["data", "pad_to_max_length"], False)]}
    assert flags == ["--trainer.precision", "32-true"]    # the user's flag is passed again, later: it wins


def test_lightning_cli_without_a_config_takes_its_classes_defaults_as_flags(project):
    found = adapter("examples/byo_script/lightning_cli.py", "fit")
    assert {"--data.batch_size (default) = 1 -> micro_batch",
            "--trainer.accumulate_grad_batches (default) = 1 -> accumulation",
            "--trainer.precision (default) = '32-true' -> precision",
            "--model.attn_implementation (default) = 'eager' -> attn_implementation"} <= set(found.listing())
    _, flags = found.edits(knobs(found, attn_implementation="sdpa"))
    assert flags == ["--model.attn_implementation", "sdpa"]


@pytest.mark.parametrize("text, needle", [
    ("deepspeed --num_gpus 2", "not a launcher autotune runs"),
    ("accelerate launch --num_processes 2", "--num_processes 2 starts more than one process"),
    ("torchrun --nproc_per_node=4", "--nproc_per_node 4 starts more than one process"),
    ("accelerate launch --multi_gpu", "--multi_gpu starts a process per GPU"),
    ("accelerate launch train.py", "give the launcher's words alone"),
    ("accelerate launch 'unclosed", "No closing quotation"),
])
def test_a_launcher_autotune_cannot_run_is_one_line(text, needle):
    with pytest.raises(JobError) as error:
        launch.parse(text)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_the_launcher_runs_the_runner_as_its_module_in_this_interpreter():
    import sys

    words = launch.parse("torchrun --nproc_per_node=1")
    assert launch.command(words, "m", ["a"]) == [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1",
                                                 "-m", "m", "a"]
    assert launch.command(("accelerate", "launch"), "m", [])[:4] == [sys.executable, "-m",
                                                                     "accelerate.commands.launch", "-m"]
    assert launch.shown(words, "t.py", ["--x"]) == ["torchrun", "--nproc_per_node=1", "t.py", "--x"]
