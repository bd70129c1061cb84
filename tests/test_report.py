"""What a user pastes into their trainer: keyword arguments, the TRL command, and the caveats."""

from __future__ import annotations

import json
import shlex

import pytest

from autotune.job import Job
from autotune.knobs import Knobs
from autotune.records import RunFolder
from autotune.report import caveats, trainer_kwargs, trl_command, write_best_config, write_results_tsv


def make_job(**overrides) -> Job:
    values = dict(run="r", model="Qwen/Qwen2.5-0.5B", dataset="tatsu-lab/alpaca", max_len=512, effective_batch=16)
    values.update(overrides)
    return Job(**values)


def flags(command: str) -> dict[str, str]:
    """`--name value` pairs of a command line (every flag the command writes takes a value)."""
    words = shlex.split(command)
    assert words[:2] == ["trl", "sft"], words
    rest = words[2:]
    assert len(rest) % 2 == 0 and all(w.startswith("--") for w in rest[::2]), rest
    return {name[2:]: value for name, value in zip(rest[::2], rest[1::2])}


def bool_setting(command: str, name: str) -> bool | None:
    """What the command sets a boolean to: `--name V`, `--no_name`, or None when it leaves the default."""
    words = shlex.split(command)
    if f"--no_{name}" in words:
        return False
    if f"--{name}" in words:
        return words[words.index(f"--{name}") + 1].lower() == "true"
    return None


def test_bf16_precision_sets_bf16_true():
    args = trainer_kwargs(make_job(), Knobs(precision="bf16"))["training_arguments"]
    assert args["bf16"] is True
    assert args["fp16"] is False and args["tf32"] is False


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_other_precisions_set_their_own_flag(precision):
    assert trainer_kwargs(make_job(), Knobs(precision=precision))["training_arguments"][precision] is True


def test_group_by_length_becomes_the_train_sampling_strategy():
    args = trainer_kwargs(make_job(), Knobs(padding="longest", group_by_length=True))["training_arguments"]
    assert args["train_sampling_strategy"] == "group_by_length"
    assert "train_sampling_strategy" not in trainer_kwargs(make_job(), Knobs())["training_arguments"]


def test_padding_free_sets_sft_padding_free():
    sft = trainer_kwargs(make_job(), Knobs(padding="padding_free"))["sft_config"]
    assert sft == {"max_length": 512, "padding_free": True}


def test_max_length_padding_pads_to_a_multiple_of_max_len():
    sft = trainer_kwargs(make_job(max_len=1024), Knobs(padding="max_length"))["sft_config"]
    assert sft == {"max_length": 1024, "pad_to_multiple_of": 1024}


def test_longest_padding_is_the_collator_default():
    assert trainer_kwargs(make_job(), Knobs(padding="longest"))["sft_config"] == {"max_length": 512}


@pytest.mark.parametrize("micro, accumulation", [(1, 16), (2, 8), (4, 4), (16, 1)])
def test_accumulation_is_effective_batch_over_micro(micro, accumulation):
    args = trainer_kwargs(make_job(), Knobs(per_device_train_batch_size=micro))["training_arguments"]
    assert args["per_device_train_batch_size"] == micro
    assert args["gradient_accumulation_steps"] == accumulation
    assert micro * accumulation == 16


def test_other_knobs_map_to_their_trainer_names():
    knobs = Knobs(attn_implementation="sdpa", gradient_checkpointing=True, torch_compile=True,
                  dataloader_num_workers=2, dataloader_pin_memory=True, optim="adamw_torch_fused")
    kwargs = trainer_kwargs(make_job(), knobs)
    args = kwargs["training_arguments"]
    assert args["gradient_checkpointing"] is True and args["torch_compile"] is True
    assert args["dataloader_pin_memory"] is True
    assert args["dataloader_num_workers"] == 2 and args["optim"] == "adamw_torch_fused"
    assert kwargs["from_pretrained"] == {"attn_implementation": "sdpa", "dtype": "float32"}


def test_trl_command_carries_the_config():
    knobs = Knobs(per_device_train_batch_size=4, padding="padding_free", precision="bf16",
                  attn_implementation="flash_attention_2", optim="adamw_torch_fused")
    got = flags(trl_command(make_job(dataset="tatsu-lab/alpaca:default"), knobs))
    assert got["model_name_or_path"] == "Qwen/Qwen2.5-0.5B"
    assert got["dataset_name"] == "tatsu-lab/alpaca"
    assert got["dataset_config"] == "default"
    assert got["per_device_train_batch_size"] == "4"
    assert got["gradient_accumulation_steps"] == "4"
    assert got["bf16"] == "True"
    assert got["padding_free"] == "True"
    assert got["max_length"] == "512"
    assert got["attn_implementation"] == "flash_attention_2"
    assert got["optim"] == "adamw_torch_fused"
    assert "use_peft" not in got
    assert "pad_to_multiple_of" not in got


def test_trl_command_group_by_length_max_length_and_lora():
    knobs = Knobs(per_device_train_batch_size=2, padding="longest", group_by_length=True)
    got = flags(trl_command(make_job(method="lora", max_len=256), knobs))
    assert got["train_sampling_strategy"] == "group_by_length"
    assert got["gradient_accumulation_steps"] == "8"
    assert got["use_peft"] == "True"
    assert "dataset_config" not in got
    got = flags(trl_command(make_job(max_len=256), Knobs()))
    assert got["pad_to_multiple_of"] == "256"


def test_trl_command_quotes_paths_with_spaces():
    command = trl_command(make_job(model="./my models/qwen"), Knobs())
    assert flags(command)["model_name_or_path"] == "./my models/qwen"


# TRL's SFTConfig defaults gradient_checkpointing=True and bf16=True (when fp16 is not set), and
# TrainingArguments defaults dataloader_pin_memory=True. A tuned value of False that is left out of
# the command / kwargs is silently replaced by those defaults.
@pytest.mark.parametrize("name, knobs", [
    ("gradient_checkpointing", Knobs()),
    ("bf16", Knobs()),
    ("bf16", Knobs(precision="tf32")),
])
def test_trl_command_pins_settings_whose_trl_default_is_on(name, knobs):
    assert bool_setting(trl_command(make_job(), knobs), name) is False


def test_training_arguments_pin_memory_off_is_explicit():
    args = trainer_kwargs(make_job(), Knobs(dataloader_pin_memory=False))["training_arguments"]
    assert args.get("dataloader_pin_memory") is False


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_caveat_for_padding_free_without_flash_attention(attn):
    notes = caveats(Knobs(padding="padding_free", attn_implementation=attn))
    assert len(notes) == 1
    assert "flash_attention_2" in notes[0]


def test_no_caveat_with_flash_attention_or_padding():
    assert caveats(Knobs(padding="padding_free", attn_implementation="flash_attention_2", precision="bf16")) == []
    assert caveats(Knobs(padding="longest", attn_implementation="sdpa")) == []


@pytest.mark.parametrize("vlm,attn", [("llava", "sdpa"), ("qwen2_vl", "flash_attention_2")])
def test_packed_vlm_rows_get_their_own_caveat_from_the_frame(tmp_path, vlm, attn):
    """TRL refuses padding_free for VLMs: the note says so and what the runner measured, whatever the kernel."""
    folder = RunFolder(tmp_path, "r")
    folder.path.mkdir()
    folder.frame.write_text(json.dumps({"model": {"model_type": vlm, "vision": {"params": 10}}}))
    knobs = Knobs(padding="padding_free", attn_implementation=attn, precision="bf16")
    note, = write_best_config(folder, make_job(), knobs)["caveats"]
    assert "refuses padding_free" in note and "images passed in row order" in note and "use_cache" not in note
    assert ("get_rope_index" in note) == (vlm == "qwen2_vl")
    assert ("block-diagonal" in note) == (attn != "flash_attention_2")
    assert caveats(Knobs(padding="longest"), vlm) == []


def test_best_config_json_holds_knobs_kwargs_command_and_caveats(tmp_path):
    folder = RunFolder(tmp_path, "r")
    folder.path.mkdir()
    job, knobs = make_job(), Knobs(padding="padding_free", attn_implementation="sdpa", per_device_train_batch_size=8)
    write_best_config(folder, job, knobs)
    stored = json.loads(folder.best.read_text())
    assert Knobs.from_dict(stored["knobs"]) == knobs
    assert stored["training_arguments"]["gradient_accumulation_steps"] == 2
    assert stored["sft_config"]["padding_free"] is True
    assert stored["command"] == trl_command(job, knobs)
    assert stored["caveats"] == caveats(knobs)


def test_results_tsv_one_line_per_trial(tmp_path):
    folder = RunFolder(tmp_path, "r")
    folder.path.mkdir()
    records = [
        {"trial": 0, "change": None, "state": "complete", "decision": "baseline", "samples_per_s": 10.0,
         "tokens_per_s": 900.5, "ratio": 1.0, "peak_memory_bytes": 3 * 2**20, "reason": "baseline"},
        {"trial": 1, "change": "padding=longest", "state": "oom", "decision": "discard", "samples_per_s": None,
         "ratio": None, "reason": "out\tof memory"},
    ]
    write_results_tsv(folder, records)
    lines = folder.results.read_text().splitlines()
    assert lines[0].split("\t")[:4] == ["trial", "change", "state", "decision"]
    assert len(lines) == 3
    assert all(len(line.split("\t")) == len(lines[0].split("\t")) for line in lines)
    assert lines[1].split("\t")[1] == "(baseline)"
    assert lines[1].split("\t")[7] == "3.000"
    assert lines[2].split("\t")[4] == "-"


def test_padding_free_without_flash_attention_loads_the_model_without_a_cache():
    """With a cache, transformers skips packed-row detection and rows attend to each other."""
    job = make_job()
    knobs = Knobs(padding="padding_free", attn_implementation="sdpa", per_device_train_batch_size=4)
    assert trainer_kwargs(job, knobs)["from_pretrained"]["use_cache"] is False
    assert "use_cache=False" in caveats(knobs)[0] and "cannot" in caveats(knobs)[0]
    flash = Knobs(padding="padding_free", attn_implementation="flash_attention_2", precision="bf16")
    assert "use_cache" not in trainer_kwargs(job, flash)["from_pretrained"]


def test_vlm_settings_that_no_trainer_argument_holds_are_named_in_caveats():
    """A kept resolution cap or frozen tower would be lost in `trl sft`: the best config says where it goes."""
    notes = caveats(Knobs(max_image_pixels=200704, freeze_vision_tower=True))
    assert any("max_pixels" in note and "200704" in note for note in notes)
    assert any("requires_grad_(False)" in note for note in notes)
    assert caveats(Knobs()) == []
    # Idefics3 / SmolVLM take the cap as a longest edge: the note names that setting instead.
    tiled = caveats(Knobs(max_image_pixels=200704), vlm="idefics3")
    assert len(tiled) == 1 and 'size={"longest_edge": k * tile}' in tiled[0] and "max_pixels" not in tiled[0]
