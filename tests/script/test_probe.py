"""Which settings a probe run is asked to confirm: names that suggest a role discovery lacks."""

from __future__ import annotations

from pathlib import Path

from autotune.script import names, probe
from autotune.script.discover import discover


def found_in(tmp_path: Path, yaml_text: str):
    (tmp_path / "train.py").write_text("import yaml\n")
    (tmp_path / "t.yaml").write_text(yaml_text)
    configs = [(tmp_path / "t.yaml", "t.yaml")]
    return discover(tmp_path / "train.py", configs), names.taken(tmp_path / "train.py", configs, [])


def test_a_name_that_suggests_a_missing_role_is_a_candidate(tmp_path):
    found, taken = found_in(tmp_path, "batch_size: 2\naccum_every: 4\nuse_acc: true\nacc_note: x\nlr: 0.1\n")
    # accum_every: a whole number named like an accumulation; use_acc is a switch, acc_note no number.
    assert probe.candidates(found, taken) == [("accumulation", "accum_every")]


def test_a_precision_switch_is_a_candidate_only_where_no_precision_setting_was_found(tmp_path):
    found, taken = found_in(tmp_path, "batch_size: 2\ngrad_accum: 4\nuse_amp: false\namp_level: 2\n")
    assert probe.candidates(found, taken) == [("precision", "use_amp")]
    found, taken = found_in(tmp_path, "batch_size: 2\ngrad_accum: 4\nuse_amp: false\nbf16: true\n")
    assert probe.candidates(found, taken) == []


def test_a_switch_stands_for_the_precision_the_runs_compute_in():
    fp32, bf16, fp16 = ({"compute_dtypes": [d]} for d in ("float32", "bfloat16", "float16"))
    assert probe._switch(False, fp32, bf16) == "bf16" and probe._switch(True, fp16, fp32) == "fp16"
    assert probe._switch(False, fp32, fp32) is None      # flipping it changed nothing: not a precision switch
    assert probe._switch(True, fp32, bf16) is None       # on computes in fp32: the other way round
    assert probe._switch(False, fp32, None) is None      # the flipped run did not run


def test_a_role_already_found_is_not_probed(tmp_path):
    found, taken = found_in(tmp_path, "batch_size: 2\ngradient_accumulation_steps: 4\naccum_every: 4\n")
    assert probe.candidates(found, taken) == []


def test_a_missing_micro_batch_is_looked_for_among_batch_like_names(tmp_path):
    found, taken = found_in(tmp_path, "bsz: 8\ngrad_accum: 2\nmax_len: 64\n")
    assert probe.candidates(found, taken) == [("micro_batch", "bsz")]


def test_probed_pairs_are_read_as_the_users_and_named_as_probed():
    pairs = ("bsz:per_device_train_batch_size", "accum_every:gradient_accumulation_steps:probed")
    assert names.roles(pairs) == {"bsz": "micro_batch", "accum_every": "accumulation"}
    assert names.probed(pairs) == {"accum_every"}
