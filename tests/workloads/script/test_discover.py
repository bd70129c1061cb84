"""Knob discovery on a table of config shapes, and what happens when nothing is recognised."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from autotune.util.errors import JobError
from autotune.workloads.script import ScriptAdapter, discover

SCRIPT = "import argparse\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def adapter_for(tmp_path: Path, script_text: str = SCRIPT, configs: dict[str, str] | None = None) -> ScriptAdapter:
    script = write(tmp_path, "train.py", script_text)
    paths = [(write(tmp_path, name, text), name) for name, text in (configs or {}).items()]
    return ScriptAdapter.build(discover(script, paths))


FLAT_YAML = """
per_device_train_batch_size: 2
gradient_accumulation_steps: 4
gradient_checkpointing: true
bf16: false
max_seq_length: 1024
dataloader_num_workers: 0
"""
NESTED_YAML = """
model:
  attn_implementation: sdpa
trainer:
  micro_batch_size: 4
  accumulation_steps: 2
  mixed_precision: "no"
  compile: false
data:
  block_size: 512
  padding_free: false
"""
JSON_CONFIG = json.dumps({"train": {"batch_size": 8, "grad_accum": 2, "optimizer": "adamw_torch",
                                    "pin_memory": False, "torch_dtype": "float32"},
                          "max_length": 2048, "padding": "longest", "group_by_length": False})
ARGPARSE = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=1)
parser.add_argument("--gradient_accumulation_steps", type=int, default=16)
parser.add_argument("--max_len", type=int, default=4096)
parser.add_argument("--gradient_checkpointing", action="store_true")
parser.add_argument("--fp16", action="store_true")
parser.add_argument("--num_workers", type=int, default=2)
parser.add_argument("--learning_rate", type=float, default=1e-4)
"""


@pytest.mark.parametrize("configs, script, expected", [
    ({"a.yaml": FLAT_YAML}, SCRIPT,
     {"micro": 2, "batch": 8, "max_len": 1024, "tryable": {"per_device_train_batch_size", "gradient_checkpointing",
                                                           "precision", "dataloader_num_workers"},
      "start": {"gradient_checkpointing": True, "precision": "fp32"}}),
    ({"b.yml": NESTED_YAML}, SCRIPT,
     {"micro": 4, "batch": 8, "max_len": 512, "tryable": {"per_device_train_batch_size", "attn_implementation",
                                                          "precision", "torch_compile", "padding"},
      "start": {"attn_implementation": "sdpa", "padding": "longest", "precision": "fp32"}}),
    ({"c.json": JSON_CONFIG}, SCRIPT,
     {"micro": 8, "batch": 16, "max_len": 2048, "tryable": {"per_device_train_batch_size", "optim",
                                                            "dataloader_pin_memory", "precision", "padding",
                                                            "group_by_length"},
      "start": {"optim": "adamw_torch", "padding": "longest"}}),
    ({}, ARGPARSE,
     {"micro": 1, "batch": 16, "max_len": 4096, "tryable": {"per_device_train_batch_size", "gradient_checkpointing",
                                                            "precision", "dataloader_num_workers"},
      "start": {"gradient_checkpointing": False, "dataloader_num_workers": 2}}),
])
def test_discovery_finds_knobs_length_and_batch_in_each_shape(tmp_path, configs, script, expected):
    adapter = adapter_for(tmp_path, script, configs)
    assert adapter.start.per_device_train_batch_size == expected["micro"]
    assert adapter.effective_batch == expected["batch"] and adapter.max_len == expected["max_len"]
    assert set(adapter.tryable) == expected["tryable"]
    for knob, value in expected["start"].items():
        assert getattr(adapter.start, knob) == value


def test_edits_keep_the_effective_batch_and_the_file_style(tmp_path):
    adapter = adapter_for(tmp_path, SCRIPT, {"b.yml": NESTED_YAML})
    edits, flags = adapter.edits(adapter.start.with_change("per_device_train_batch_size", 8)
                                 .with_change("precision", "bf16").with_change("padding", "padding_free"))
    assert flags == []
    assert dict((tuple(p), v) for p, v in edits["b.yml"]) == {
        ("trainer", "micro_batch_size"): 8, ("trainer", "accumulation_steps"): 1,
        ("trainer", "mixed_precision"): "bf16", ("data", "padding_free"): True}


def test_argparse_flags_are_passed_on_the_command_line(tmp_path):
    adapter = adapter_for(tmp_path, ARGPARSE)
    _, flags = adapter.edits(adapter.start.with_change("per_device_train_batch_size", 4)
                             .with_change("gradient_checkpointing", True).with_change("precision", "fp16"))
    assert flags == ["--batch-size", "4", "--gradient_accumulation_steps", "4", "--gradient_checkpointing", "--fp16"]


def test_unrecognised_keys_are_left_alone(tmp_path):
    adapter = adapter_for(tmp_path, ARGPARSE)
    assert all(s.role != "learning_rate" for s in adapter.discovery.settings)
    why = adapter.why_not("torch_compile", True)
    assert why.startswith("not applicable here: the script has no setting for torch_compile (none of compile, ")
    assert why.endswith("add script_knobs=NAME:torch_compile")
    assert "a knob of autotune's own trainer" in adapter.why_not("chunked_cross_entropy", True)


def test_a_script_with_no_known_knob_says_what_was_found_looked_for_and_the_way_out(tmp_path):
    write(tmp_path, "train.py", SCRIPT)
    write(tmp_path, "x.yaml", "per_device_train_batch_size: 2\nlearning_rate: 0.1\n")
    with pytest.raises(JobError) as error:
        ScriptAdapter.for_script(tmp_path / "train.py", ("x.yaml",), [], tmp_path)
    message = str(error.value)
    assert "no knob autotune can change found" in message and "x.yaml:per_device_train_batch_size = 2" in message
    assert "learning_rate=0.1 (x.yaml)" in message and "looked for gradient_accumulation_steps" in message
    assert message.endswith("add script_knobs=YOUR_NAME:gradient_accumulation_steps")


def test_a_bad_config_file_is_one_clear_error(tmp_path):
    with pytest.raises(JobError, match="not valid YAML"):
        adapter_for(tmp_path, SCRIPT, {"bad.yaml": "a: [1, 2\n"})


def test_the_training_section_wins_over_an_eval_section_with_the_same_keys(tmp_path):
    adapter = adapter_for(tmp_path, SCRIPT, {"two.yaml": """
        eval:
          batch_size: 16
          max_length: 64
        train:
          batch_size: 4
          gradient_accumulation_steps: 4
          max_length: 512
        """})
    assert (adapter.start.per_device_train_batch_size, adapter.effective_batch, adapter.max_len) == (4, 16, 512)
    edits, _ = adapter.edits(adapter.start.with_change("per_device_train_batch_size", 8))
    assert [tuple(path) for path, _ in edits["two.yaml"]] == [("train", "batch_size"), ("train", "gradient_accumulation_steps")]


def test_script_args_override_the_scripts_defaults(tmp_path):
    from autotune.workloads.script import apply_args

    script = write(tmp_path, "train.py", ARGPARSE)
    found = discover(script, [])
    apply_args(found, ["--batch-size", "4", "--gradient_checkpointing", "--max_len=1024"])
    adapter = ScriptAdapter.build(found)
    assert adapter.start.per_device_train_batch_size == 4 and adapter.effective_batch == 64
    assert adapter.start.gradient_checkpointing is True and adapter.max_len == 1024


@pytest.mark.parametrize("config, sayable, unsayable", [
    ("fp16: true\nbatch_size: 2\ngrad_accum: 2\n", {"fp16", "fp32"}, {"bf16", "tf32"}),
    ("precision: '32'\nbatch_size: 2\ngrad_accum: 2\n", {"fp32", "bf16", "fp16"}, {"tf32"}),
    ("mixed_precision: bf16\nbatch_size: 2\ngrad_accum: 2\n", {"fp32", "bf16", "fp16"}, {"tf32"}),
])
def test_a_precision_is_tried_only_where_the_settings_can_say_it(tmp_path, config, sayable, unsayable):
    adapter = adapter_for(tmp_path, SCRIPT, {"p.yaml": config})
    assert {p for p in sayable | unsayable if adapter.why_not("precision", p) is None} == sayable
