"""Discovery and edits for each way a script takes its settings, on the shipped examples (no training):
what the listing says, what the baseline is, and that a trial's edit goes by the user's own route."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autotune.workloads.script.runner import _edited
from autotune.workloads.script import ScriptAdapter, pyconfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "byo_script"


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    shutil.copytree(EXAMPLES, tmp_path / "examples" / "byo_script")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def adapter(script: str, args: str, configs: tuple[str, ...] = ()) -> ScriptAdapter:
    return ScriptAdapter.for_script(Path("examples/byo_script") / script, configs, args.split())


def lines(found: ScriptAdapter) -> set[str]:
    return set(found.listing())


def test_configurator_globals_python_config_and_key_value_flags(project):
    found = adapter("nano_train.py", "examples/byo_script/config/train_tiny.py --batch_size=2")
    assert found.discovery.style == "configurator"
    assert found.discovery.arg_configs == ["examples/byo_script/config/train_tiny.py"]
    assert {"examples/byo_script/config/train_tiny.py:gradient_accumulation_steps = 8 -> accumulation",
            "--batch_size (your flag) = 2 -> micro_batch", "--compile (default) = False -> torch_compile",
            "--dtype (default) = 'float32' -> precision"} <= lines(found)
    # The config file's block_size (64) beats the global (256); the flag beats the file.
    assert (found.start.per_device_train_batch_size, found.effective_batch, found.max_len) == (2, 16, 64)
    files, flags = found.edits(found.start.with_change("per_device_train_batch_size", 4)
                               .with_change("precision", "bf16").with_change("torch_compile", True))
    assert sorted(flags) == ["--batch_size=4", "--compile=True", "--dtype='bfloat16'"]
    assert files == {"examples/byo_script/config/train_tiny.py": [(["gradient_accumulation_steps"], 4)]}


def test_a_python_config_is_edited_in_place_and_never_run(tmp_path):
    text = "# tiny\nbatch_size = 1  # one row\nname = 'é'\nlr = 1e-3 * 2\n"
    assert pyconfig.read(text, "c.py") == {"batch_size": 1, "name": "é"}     # lr is computed: not a setting
    edited = _edited(text, ".py", [(["batch_size"], 8), (["name"], "ü"), (["compile"], True)])
    assert edited == "# tiny\nbatch_size = 8  # one row\nname = 'ü'\nlr = 1e-3 * 2\ncompile = True\n"


def test_hf_argument_parser_with_one_json_file_takes_training_arguments_defaults(project):
    found = adapter("hf_clm.py", "examples/byo_script/hf_clm.json")
    assert found.discovery.style == "dataclass"
    assert {"examples/byo_script/hf_clm.json:per_device_train_batch_size = 1 -> micro_batch",
            "examples/byo_script/hf_clm.json:optim (default) = 'adamw_torch_fused' -> optim",
            "examples/byo_script/hf_clm.json:pad_to_max_length (default) = True -> pad_to_max_length",
            "examples/byo_script/hf_clm.json:train_sampling_strategy (default) = 'random' -> group_by_length"
            } <= lines(found)
    assert (found.start.precision, found.start.optim, found.start.dataloader_pin_memory) == ("fp32", "adamw_torch_fused", True)
    assert found.start.gradient_checkpointing is True and found.start.padding == "max_length"
    # Keys the file lacks are added to its copy: with one JSON argument the parser reads no flags.
    files, flags = found.edits(found.start.with_change("torch_compile", True).with_change("group_by_length", True)
                               .with_change("padding", "longest"))
    assert flags == [] and dict((p[0], v) for p, v in files["examples/byo_script/hf_clm.json"]) == {
        "torch_compile": True, "train_sampling_strategy": "group_by_length", "pad_to_max_length": False}
    text = (project / "examples/byo_script/hf_clm.json").read_text()
    assert json.loads(_edited(text, ".json", files["examples/byo_script/hf_clm.json"]))["torch_compile"] is True


def test_hf_argument_parser_with_flags_changes_flags(project):
    found = adapter("hf_clm.py", "--output_dir out --per_device_train_batch_size 1 --gradient_accumulation_steps 8 "
                                 "--gradient_checkpointing")
    assert {"--per_device_train_batch_size (your flag) = 1 -> micro_batch",
            "--gradient_checkpointing (your flag) = True -> gradient_checkpointing"} <= lines(found)
    files, flags = found.edits(found.start.with_change("per_device_train_batch_size", 8)
                               .with_change("gradient_checkpointing", False).with_change("precision", "bf16"))
    assert files == {}
    assert flags == ["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                     "--gradient_checkpointing", "false", "--bf16", "true"]


def test_trl_parser_with_config_takes_sft_config_defaults(project):
    found = adapter("trl_sft.py", "--config examples/byo_script/trl_sft.yaml")
    # SFTConfig's own defaults, from the installed class: bf16 where fp16 is off, checkpointing on.
    assert (found.start.precision, found.start.gradient_checkpointing, found.start.padding) == ("bf16", True, "max_length")
    assert "examples/byo_script/trl_sft.yaml:bf16 (default) = True -> bf16" in lines(found)
    assert any("packing" in n and "never tried" in n for n in found.notes)
    files, flags = found.edits(found.start.with_change("precision", "fp32").with_change("padding", "longest"))
    assert flags == [] and dict((p[0], v) for p, v in files["examples/byo_script/trl_sft.yaml"]) == {
        "bf16": False, "pad_to_multiple_of": None}
    # SFTTrainer stops on padding_free while max_length is set, and max_length is the user's: never tried.
    assert "refuses padding_free" in found.why_not("padding", "padding_free")
    assert found.why_not("padding", "longest") is None


def test_trl_parser_with_flags(project):
    found = adapter("trl_sft.py", "--output_dir out --per_device_train_batch_size 2 --gradient_accumulation_steps 4 "
                                  "--bf16 false --max_length 128")
    assert (found.start.per_device_train_batch_size, found.effective_batch, found.max_len) == (2, 8, 128)
    assert found.start.precision == "fp32" and found.start.gradient_checkpointing is True
    _, flags = found.edits(found.start.with_change("gradient_checkpointing", False))
    assert flags == ["--activation_checkpointing", "false"]


def test_trl_parser_flag_padding_to_max_length_is_read_and_the_baseline_runs_as_given(project):
    # SFTConfig's pad_to_multiple_of defaults to "auto" (a string); the flag's digits are the int TRL
    # makes of them, so padding to max_length is the baseline and the baseline edits nothing.
    found = adapter("trl_sft.py", "--output_dir out --per_device_train_batch_size 1 --gradient_accumulation_steps 8 "
                                  "--max_length 512 --pad_to_multiple_of 512 --use_cpu true")
    assert found.start.padding == "max_length" and found.max_len == 512
    assert "--pad_to_multiple_of (your flag) = 512 -> pad_to_multiple_of" in lines(found)
    assert found.edits(found.start) == ({}, [])
    _, flags = found.edits(found.start.with_change("padding", "longest"))
    assert flags == ["--pad_to_multiple_of", "None"]


def test_bf16_is_not_tried_on_a_cpu_where_the_trainer_would_refuse_it(project):
    # HF TrainingArguments stops on bf16 on a CPU unless use_cpu is set: said before any trial runs.
    found = adapter("hf_clm.py", "--output_dir out --per_device_train_batch_size 1 --gradient_accumulation_steps 8")
    assert "use_cpu" in found.why_not("precision", "bf16", "cpu")
    assert found.why_not("precision", "bf16", "cuda") is None
    allowed = adapter("hf_clm.py", "--output_dir out --per_device_train_batch_size 1 --gradient_accumulation_steps 8 "
                                   "--use_cpu true")
    assert allowed.why_not("precision", "bf16", "cpu") is None


def test_argparse_script_run_with_flags_only(project):
    found = adapter("plain_loop.py", "--batch_size 2 --grad_accum 4 --padding=longest")
    assert found.discovery.style == "argparse"
    assert (found.start.per_device_train_batch_size, found.effective_batch, found.start.padding) == (2, 8, "longest")
    assert "--grad_accum (your flag) = 4 -> accumulation" in lines(found)
    _, flags = found.edits(found.start.with_change("per_device_train_batch_size", 8))
    assert flags == ["--batch_size", "8", "--grad_accum", "1"]
