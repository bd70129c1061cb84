"""Which settings a probe run is asked to confirm: names that suggest a role discovery lacks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from autotune.workloads.script import names, probe
from autotune.workloads.script.probe import Seen
from autotune.workloads.script.styles import discover


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
    fp32, bf16, fp16 = (Seen(compute_dtypes=(d,)) for d in ("float32", "bfloat16", "float16"))
    # (the run with the switch on, the run with it off)
    assert probe._switch(bf16, fp32) == "bf16" and probe._switch(fp16, fp32) == "fp16"
    assert probe._switch(fp32, fp32) is None      # flipping it changed nothing: not a precision switch
    assert probe._switch(fp32, bf16) is None      # on computes in fp32: the other way round
    assert probe._switch(None, fp32) is None      # the flipped run did not run


def test_length_grouping_and_packing_switches_are_candidates_where_their_role_is_missing(tmp_path):
    found, taken = found_in(tmp_path, "batch_size: 2\ngrad_accum: 4\nbf16: false\nsort_by_len: false\n"
                                      "pack_rows: false\nsort_keys: true\n")
    # sort_keys says sort but not by length: not a grouping candidate.
    assert probe.candidates(found, taken) == [("group_by_length", "sort_by_len"), ("packing", "pack_rows")]
    found, taken = found_in(tmp_path, "batch_size: 2\ngrad_accum: 4\ngroup_by_length: false\npacking: false\n"
                                      "sort_by_len: false\n")
    assert probe.candidates(found, taken) == []       # both roles found by name already


def test_grouping_is_seen_in_the_row_order_and_packing_in_full_width_unpadded_batches():
    from autotune.workloads.script.checks import length_jumps

    shuffled = [40, 210, 18, 95, 160, 22, 70, 300, 35, 120]
    grouped = sorted(shuffled, reverse=True)
    assert length_jumps(grouped) < 0.5 * length_jumps(shuffled)
    assert length_jumps(shuffled[:4]) is None          # too few micro-batches to say
    assert probe._seen_doing("group_by_length", Seen(length_jumps=length_jumps(grouped)),
                             Seen(length_jumps=length_jumps(shuffled)))
    assert not probe._seen_doing("group_by_length", Seen(length_jumps=0.6), Seen(length_jumps=0.62))
    # Rows grouped within each step: the same rows, another order, less padding; not another set of rows.
    off = Seen(length_jumps=0.6, rows={"a": 1, "b": 1}, sequence=("a", "b"), padding_share=0.4)
    assert probe._seen_doing("group_by_length", replace(off, length_jumps=0.5, sequence=("b", "a"),
                                                        padding_share=0.1), off)
    assert not probe._seen_doing("group_by_length", replace(off, length_jumps=0.5, rows={"a": 2},
                                                            sequence=("a", "a"), padding_share=0.1), off)
    packed = Seen(packed=False, all_widths_max=True, padding_share=0.0)
    padded = Seen(packed=False, all_widths_max=False, padding_share=0.31)
    assert probe._seen_doing("packing", packed, padded)
    assert probe._seen_doing("packing", Seen(packed=True), padded)   # position_ids restarting inside a row
    assert not probe._seen_doing("packing", padded, padded) and not probe._seen_doing("packing", packed, packed)


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


def test_a_probe_runs_measurement_is_read_into_what_the_roles_compare():
    measurement = {"observed": {"rows_per_micro_batch": 4, "micro_batches_per_step": 2, "compute_dtypes": ["bfloat16"],
                                "packed": False, "all_widths_max": True, "length_jumps": 0.3},
                   "data": {"padding_share": 0}, "parity_rows": {"rows": {"a": [2, 9, "h"], "b": [1, 7, "g"]},
                                                                 "splits": [[["a", "b"]], [["a"]]]}}
    seen = Seen.of(measurement)
    assert seen == Seen(4, 2, ("bfloat16",), 0.3, False, True, 0.0, {"a": 2, "b": 1}, ("a", "b", "a"))
    assert seen.count("accumulation") == 2 and seen.count("micro_batch") == 4
    assert Seen.of({"observed": {}}) is None and Seen.of({}) is None
