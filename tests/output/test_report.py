"""What a user reads besides the config files: results.tsv and the caveats (tests/workloads/hf/test_export.py: the files)."""

from __future__ import annotations

import json

import pytest

from autotune.config.job import Job
from autotune.config.knobs import Knobs
from autotune.output.records import RunFolder
from autotune.config.measurement import Measurement
from autotune.config.records import TrialRecord
from autotune.output.report import write_best_config, write_results_tsv
from autotune.workloads.vlm.caveats import caveats


def make_job(**overrides) -> Job:
    values = dict(run="r", model="Qwen/Qwen2.5-0.5B", dataset="tatsu-lab/alpaca", max_len=512, effective_batch=16)
    values.update(overrides)
    return Job(**values)


@pytest.mark.parametrize("vlm,attn", [("llava", "sdpa"), ("qwen2_vl", "flash_attention_2"),
                                      ("qwen2_vl", "kernels-community/flash-attn2")])
def test_packed_vlm_rows_get_their_own_caveat_from_the_frame(tmp_path, vlm, attn):
    """TRL refuses padding_free for VLMs: the note says so and what the runner measured, whatever the kernel."""
    folder = RunFolder(tmp_path, "r")
    folder.path.mkdir()
    folder.frame.write_text(json.dumps({"model": {"model_type": vlm, "vision": {"params": 10}}}))
    knobs = Knobs(padding="padding_free", attn_implementation=attn, precision="bf16")
    note, = write_best_config(folder, make_job(), knobs)["caveats"]
    assert "refuses padding_free" in note and "images passed in row order" in note and "use_cache" not in note
    assert ("get_rope_index" in note) == (vlm == "qwen2_vl")
    assert ("block-diagonal" in note) == ("flash" not in attn)
    assert caveats(Knobs(padding="longest"), vlm) == []


def test_results_tsv_one_line_per_trial(tmp_path):
    folder = RunFolder(tmp_path, "r")
    folder.path.mkdir()
    records = [TrialRecord.from_dict(r) for r in (
        {"trial": 0, "change": None, "state": "complete", "decision": "baseline", "samples_per_s": 10.0,
         "tokens_per_s": 900.5, "ratio": 1.0, "peak_memory_bytes": 3 * 2**20, "reason": "baseline"},
        {"trial": 1, "change": "padding=longest", "state": "oom", "decision": "discard", "samples_per_s": None,
         "ratio": None, "reason": "out\tof memory"},
    )]
    write_results_tsv(folder, records)
    lines = folder.results.read_text().splitlines()
    assert lines[0].split("\t")[:4] == ["trial", "change", "state", "decision"]
    assert len(lines) == 3
    assert all(len(line.split("\t")) == len(lines[0].split("\t")) for line in lines)
    assert lines[1].split("\t")[1] == "(baseline)"
    assert lines[1].split("\t")[7] == "3.000"
    assert lines[2].split("\t")[4] == "-"


def test_vlm_settings_that_no_trainer_argument_holds_are_named_in_caveats():
    """A kept resolution cap or frozen tower would be lost in `trl sft`: the best config says where it goes."""
    notes = caveats(Knobs(max_image_pixels=200704, freeze_vision_tower=True))
    assert any("max_pixels" in note and "200704" in note for note in notes)
    assert any("requires_grad_(False)" in note for note in notes)
    assert caveats(Knobs()) == []
    # Idefics3 / SmolVLM take the cap as a longest edge: the note names that setting instead.
    tiled = caveats(Knobs(max_image_pixels=200704), vlm="idefics3")
    assert len(tiled) == 1 and 'size={"longest_edge": k * tile}' in tiled[0] and "max_pixels" not in tiled[0]


def test_compile_time_is_reported_out_of_the_timing():
    from autotune.output.report import _compile_lines, compile_cost_s

    # Two parity/warm-up steps: the first holds 4.5 s of compilation over a 0.5 s steady step.
    compiled = {"samples_per_s": 8.0, "step_times_s": [0.5, 0.5], "warmup_times_s": [5.0, 0.6], "median_step_s": 0.5}
    assert compile_cost_s(Measurement.from_dict(compiled)) == pytest.approx(4.6)
    assert compile_cost_s(Measurement.from_dict({**compiled, "warmup_times_s": []})) is None
    records = [TrialRecord.from_dict(r) for r in (
        {"trial": 3, "change": "torch_compile=True", "measurements": [compiled, compiled]},
        {"trial": 4, "change": "padding=longest", "measurements": [compiled]})]
    lines = _compile_lines(records)
    assert lines[1] == "## Compile time, out of the timing"
    assert lines[3].startswith("- #3 `torch_compile=True`: 4.6 s per run before the timed steps") and len(lines) == 4
