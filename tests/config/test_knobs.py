"""One configuration (`Knobs`): validation, changes, and why a change cannot apply on a device."""

from __future__ import annotations

import pytest

from autotune.util.errors import JobError
from autotune.config.knobs import CATALOG, NAIVE_START, Knobs, divisors, not_applicable, parse_knob_value

CPU = {"kind": "cpu", "cpu_count": 2, "bf16": False, "compile": True, "fused_adamw": True, "memory_bytes": 2**34}
CUDA = {"kind": "cuda", "cpu_count": 16, "bf16": True, "tf32": True, "flash_attn": True, "compile": True,
        "fused_adamw": True, "memory_bytes": 2**36}


def test_default_knobs_are_the_naive_start():
    assert Knobs().to_dict() == NAIVE_START
    assert set(Knobs().to_dict()) == set(CATALOG)


@pytest.mark.parametrize("name, value", [
    ("per_device_train_batch_size", 0),
    ("per_device_train_batch_size", True),
    ("per_device_train_batch_size", "4"),
    ("per_device_train_batch_size", 2.0),
    ("dataloader_num_workers", -1),
    ("group_by_length", "yes"),
    ("group_by_length", 1),
    ("torch_compile", None),
    ("padding", "zero"),
    ("attn_implementation", "flash"),
    ("precision", "fp64"),
    ("optim", "sgd"),
])
def test_bad_values_are_rejected_with_a_job_error_naming_the_knob(name, value):
    with pytest.raises(JobError, match=name):
        Knobs(**{name: value})


def test_with_change_returns_a_new_config_and_leaves_the_old_one():
    base = Knobs()
    changed = base.with_change("padding", "longest")
    assert changed.padding == "longest"
    assert base.padding == "max_length"
    assert base.diff(changed) == {"padding": ("max_length", "longest")}


def test_with_change_validates():
    with pytest.raises(JobError, match="precision"):
        Knobs().with_change("precision", "int8")


def test_diff_lists_only_differing_knobs_as_mine_theirs():
    a = Knobs(per_device_train_batch_size=2, precision="bf16")
    b = Knobs(per_device_train_batch_size=4, precision="bf16", torch_compile=True)
    assert a.diff(b) == {"per_device_train_batch_size": (2, 4), "torch_compile": (False, True)}
    assert b.diff(a) == {"per_device_train_batch_size": (4, 2), "torch_compile": (True, False)}
    assert a.diff(a) == {}


@pytest.mark.parametrize("micro, effective, accumulation", [(1, 16, 16), (4, 16, 4), (16, 16, 1), (3, 12, 4)])
def test_accumulation_makes_up_the_effective_batch(micro, effective, accumulation):
    knobs = Knobs(per_device_train_batch_size=micro)
    assert knobs.accumulation(effective) == accumulation
    assert knobs.accumulation(effective) * micro == effective


def test_from_dict_ignores_non_knob_keys_and_round_trips():
    knobs = Knobs(padding="padding_free", optim="adamw_torch_fused")
    assert Knobs.from_dict({**knobs.to_dict(), "schema_version": 1, "extra": 3}) == knobs


@pytest.mark.parametrize("name, text, value", [
    ("group_by_length", "true", True), ("group_by_length", "On", True), ("group_by_length", "0", False),
    ("torch_compile", "no", False), ("per_device_train_batch_size", "8", 8),
    ("dataloader_num_workers", "0", 0), ("padding", "padding_free", "padding_free"),
])
def test_parse_knob_value(name, text, value):
    assert parse_knob_value(name, text) == value


@pytest.mark.parametrize("name, text", [
    ("group_by_length", "maybe"), ("per_device_train_batch_size", "-1"), ("per_device_train_batch_size", "2.5"),
    ("padding", "Longest"), ("precision", ""),
])
def test_parse_knob_value_rejects_with_a_job_error(name, text):
    with pytest.raises(JobError, match=name):
        parse_knob_value(name, text)


def test_parse_knob_value_superscript_digit_is_a_job_error():
    with pytest.raises(JobError, match="per_device_train_batch_size"):
        parse_knob_value("per_device_train_batch_size", "\u00b2")


def test_divisors():
    assert divisors(16) == [1, 2, 4, 8, 16]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]


# --- not_applicable ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, value, needle", [
    ("precision", "fp16", "CUDA"),
    ("precision", "tf32", "tf32"),
    ("dataloader_pin_memory", True, "CUDA"),
    ("attn_implementation", "flash_attention_2", "CUDA"),
    ("attn_implementation", "kernels-community/flash-attn2", "CUDA"),
])
def test_cuda_only_changes_are_not_applicable_on_cpu(name, value, needle):
    reason = not_applicable(name, value, Knobs(), CPU, 16)
    assert reason and needle in reason


@pytest.mark.parametrize("name, value", [
    ("attn_implementation", "sdpa"), ("padding", "padding_free"), ("padding", "longest"),
    ("per_device_train_batch_size", 2), ("optim", "adamw_torch_fused"), ("torch_compile", True),
    ("gradient_checkpointing", True), ("dataloader_num_workers", 1), ("dataloader_pin_memory", False),
])
def test_portable_changes_apply_on_cpu(name, value):
    assert not_applicable(name, value, Knobs(), CPU, 16) is None


def test_group_by_length_needs_padding_longest():
    for padding in ("max_length", "padding_free"):
        reason = not_applicable("group_by_length", True, Knobs(padding=padding), CPU, 16)
        assert reason and "longest" in reason and padding in reason
    assert not_applicable("group_by_length", True, Knobs(padding="longest"), CPU, 16) is None


def test_micro_batch_must_divide_effective_batch():
    reason = not_applicable("per_device_train_batch_size", 3, Knobs(), CPU, 16)
    assert reason and "effective_batch=16" in reason
    assert not_applicable("per_device_train_batch_size", 8, Knobs(), CPU, 16) is None
    assert not_applicable("per_device_train_batch_size", 3, Knobs(), CPU, 12) is None


def test_bf16_reason_from_the_device_is_passed_through():
    device = {**CUDA, "bf16": False, "bf16_reason": "compute capability 7.5 has no bf16 tensor cores"}
    assert not_applicable("precision", "bf16", Knobs(), device, 16) == device["bf16_reason"]


def test_bf16_without_a_reason_still_gets_one_and_applies_where_supported():
    assert not_applicable("precision", "bf16", Knobs(), CPU, 16)
    assert not_applicable("precision", "bf16", Knobs(), CUDA, 16) is None


def test_flash_attention_on_cuda_needs_half_precision_and_the_package():
    assert "bf16" in not_applicable("attn_implementation", "flash_attention_2", Knobs(), CUDA, 16)
    bf16 = Knobs(precision="bf16")
    assert not_applicable("attn_implementation", "flash_attention_2", bf16, CUDA, 16) is None
    assert "flash_attn" in not_applicable("attn_implementation", "flash_attention_2", bf16,
                                          {**CUDA, "flash_attn": False}, 16)
    flash = Knobs(precision="bf16", attn_implementation="flash_attention_2")
    assert not_applicable("precision", "fp32", flash, CUDA, 16)


def test_workers_beyond_spare_cores_and_compile_reason():
    assert not_applicable("dataloader_num_workers", 2, Knobs(), CPU, 16)
    assert not_applicable("dataloader_num_workers", 2, Knobs(), CUDA, 16) is None
    no_compile = {**CPU, "compile": False, "compile_reason": "no C compiler"}
    assert not_applicable("torch_compile", True, Knobs(), no_compile, 16) == "no C compiler"


def test_the_knob_table_is_the_one_place_a_knob_is_declared():
    """Knobs' fields, their defaults (the naive start) and the stored records' schema all follow CATALOG:
    a knob added to the table alone is a field of Knobs, and a schema that lags it fails here."""
    import dataclasses
    import json
    from pathlib import Path

    import autotune
    from autotune.config.knobs import CATALOG, NAIVE_START, Knobs

    fields = dataclasses.fields(Knobs)
    assert [f.name for f in fields] == list(CATALOG)
    assert {f.name: f.default for f in fields} == NAIVE_START == {k.name: k.naive for k in CATALOG.values()}
    assert Knobs().to_dict() == NAIVE_START
    schema = json.loads((Path(autotune.__file__).parent / "schemas" / "knobs.json").read_text())
    assert list(schema["properties"]) == list(CATALOG)
    # Knobs added later are optional in stored records (older ones load with the naive value).
    assert schema["required"] == list(CATALOG)[: len(schema["required"])]
    for knob in CATALOG.values():
        stored = schema["properties"][knob.name]
        if knob.kind == "choice":
            assert stored["enum"] == list(knob.choices), knob.name
        else:
            assert stored["type"] == {"bool": "boolean", "int": "integer"}[knob.kind], knob.name


def test_every_int_knob_has_a_range_checked_on_parse_and_on_construction():
    for knob in (k for k in CATALOG.values() if k.kind == "int"):
        assert knob.maximum > knob.minimum >= 0, knob.name
        assert parse_knob_value(knob.name, str(knob.maximum)) == knob.maximum
        with pytest.raises(JobError, match=f"from {knob.minimum:,} to {knob.maximum:,}"):
            parse_knob_value(knob.name, str(knob.maximum + 1))
        with pytest.raises(JobError, match="whole number from"):
            Knobs(**{knob.name: knob.maximum + 1})


def test_divisors_are_found_up_to_the_square_root():
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36] and divisors(1) == [1] and divisors(13) == [1, 13]
    assert divisors(2**16)[-1] == 2**16 and len(divisors(2**16)) == 17
