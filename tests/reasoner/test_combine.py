"""Changes made at once hold together: no warm start or pooled change asks for a config no rule allows."""

from __future__ import annotations

from autotune.config.knobs import Knobs
from autotune.reasoner import key, pooled
from autotune.reasoner.combine import applies, together

CPU = {"kind": "cpu", "cpu_count": 2, "bf16": False, "compile": True, "fused_adamw": True, "memory_bytes": 2**34}
CUDA = {"kind": "cuda", "cpu_count": 16, "bf16": True, "tf32": True, "flash_attn": True, "compile": True,
        "fused_adamw": True, "memory_bytes": 2**36}


def test_group_by_length_is_dropped_when_the_same_config_moves_padding_off_longest():
    start = Knobs(padding="longest")
    changes = together(start, [("group_by_length", True), ("padding", "padding_free"), ("optim", "adamw_torch_fused")],
                       CPU, 8)
    assert ("group_by_length", True) not in changes and ("padding", "padding_free") in changes
    final = start
    for knob, value in changes:
        final = final.with_change(knob, value)
    assert applies(final, start, CPU, 8) is None
    broken = start.with_change("group_by_length", True).with_change("padding", "padding_free")
    assert "group_by_length" in applies(broken, start, CPU, 8)


def test_a_change_that_needs_another_first_is_added_once_that_one_is_in():
    changes = together(Knobs(), [("attn_implementation", "flash_attention_2"), ("precision", "bf16")], CUDA, 8)
    assert set(changes) == {("attn_implementation", "flash_attention_2"), ("precision", "bf16")}
    assert together(Knobs(), [("attn_implementation", "flash_attention_2")], CUDA, 8) == []


def test_pooled_changes_never_combine_into_a_config_no_rule_allows():
    start = Knobs(padding="longest")
    records = [{"change": change, "knobs": start.with_change(knob, value).to_dict(), "decision": "discard",
                "state": "complete", "ratio": ratio}
               for change, knob, value, ratio in (("group_by_length=True", "group_by_length", True, 1.09),
                                                  ("padding=padding_free", "padding", "padding_free", 1.08),
                                                  ("optim=adamw_torch_fused", "optim", "adamw_torch_fused", 1.05))]
    combined = pooled(start, records, CPU, 8, {key(start)})
    assert combined is not None and applies(combined.apply(start), start, CPU, 8) is None
    assert "group_by_length" not in combined.change or "padding" not in combined.change


def test_moving_padding_off_longest_also_ends_group_by_length():
    from autotune.reasoner import rank

    start = Knobs(padding="longest", group_by_length=True)
    ready, _ = rank(start, CPU, 8, {key(start)})
    moves = [h for h in ready if h.knob == "padding"]
    assert moves and all(("group_by_length", False) in h.changes for h in moves)
    assert all(applies(h.apply(start), start, CPU, 8) is None for h in ready)


def test_a_scripts_own_setting_that_would_not_be_tried_here_is_kept_not_repaired():
    # A script's TrainingArguments pin memory by default; on a CPU that is no change autotune would
    # try, but it is the user's setting: a combined change must neither drop it nor fail over it.
    start = Knobs(dataloader_pin_memory=True)
    records = [{"change": change, "knobs": start.with_change(knob, value).to_dict(), "decision": "discard",
                "state": "complete", "ratio": ratio}
               for change, knob, value, ratio in (("per_device_train_batch_size=2", "per_device_train_batch_size", 2, 1.06),
                                                  ("optim=adamw_torch_fused", "optim", "adamw_torch_fused", 1.04))]
    combined = pooled(start, records, CPU, 8, {key(start)})
    assert combined is not None
    assert combined.apply(start).dataloader_pin_memory is True
    assert set(combined.changes) == {("per_device_train_batch_size", 2), ("optim", "adamw_torch_fused")}
