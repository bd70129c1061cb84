"""rank(): which single change to try next, and which changes cannot apply here (and why)."""

from __future__ import annotations

import pytest

from autotune.config.knobs import Knobs
from autotune.reasoner import Hypothesis, key, rank

CPU = {"kind": "cpu", "cpu_count": 2, "bf16": False, "compile": True, "fused_adamw": True, "memory_bytes": 2**34}
CUDA = {"kind": "cuda", "cpu_count": 16, "bf16": True, "tf32": True, "flash_attn": True, "compile": True,
        "fused_adamw": True, "memory_bytes": 2**36}
NAIVE = Knobs()


def micro_values(ready: list[Hypothesis]) -> list[int]:
    return [h.value for h in ready if h.knob == "per_device_train_batch_size"]


def test_first_hypothesis_from_the_naive_start_is_padding_free():
    ready, _ = rank(NAIVE, CPU, 16, set())
    assert ready[0].knob == "padding" and ready[0].value == "padding_free"
    assert ready[0].change == "padding=padding_free"
    assert ready[0].apply(NAIVE).padding == "padding_free"


@pytest.mark.parametrize("micro, expected", [(4, [8, 2]), (1, [2]), (16, [8]), (2, [4, 1])])
def test_micro_batch_neighbours_are_next_larger_then_next_smaller_divisor(micro, expected):
    ready, _ = rank(Knobs(per_device_train_batch_size=micro), CPU, 16, set())
    assert micro_values(ready) == expected


def test_micro_batch_neighbours_follow_divisors_not_doubling():
    # divisors of 12: 1 2 3 4 6 12; from 4 the neighbours are 6 then 3
    ready, _ = rank(Knobs(per_device_train_batch_size=4), CPU, 12, set())
    assert micro_values(ready) == [6, 3]


def test_an_already_measured_knob_set_is_not_proposed_again():
    measured = {key(NAIVE), key(NAIVE.with_change("padding", "padding_free"))}
    ready, _ = rank(NAIVE, CPU, 16, measured)
    changes = [h.change for h in ready]
    assert "padding=padding_free" not in changes
    assert changes[0] == "padding=longest"
    assert all(key(h.apply(NAIVE)) not in measured for h in ready)


def test_everything_measured_leaves_nothing_ready():
    ready, _ = rank(NAIVE, CPU, 16, set())
    measured = {key(h.apply(NAIVE)) for h in ready}
    again, _ = rank(NAIVE, CPU, 16, measured)
    assert again == []


def test_inapplicable_changes_are_skipped_with_reasons_and_never_ready():
    ready, skipped = rank(NAIVE, CPU, 16, set())
    skipped_changes = dict(skipped)
    for change in ("attn_implementation=flash_attention_2", "precision=bf16", "precision=tf32", "precision=fp16",
                   "group_by_length=True", "dataloader_pin_memory=True", "dataloader_num_workers=2"):
        assert change in skipped_changes, f"{change} should be skipped on a 2-core CPU"
        assert skipped_changes[change].strip(), f"{change} skipped without a reason"
    ready_changes = {h.change for h in ready}
    assert not ready_changes & set(skipped_changes)
    assert {"padding=padding_free", "padding=longest", "per_device_train_batch_size=2",
            "attn_implementation=sdpa", "optim=adamw_torch_fused", "gradient_checkpointing=True",
            "torch_compile=True"} <= ready_changes


def test_skipped_reasons_come_from_the_device():
    device = {**CPU, "compile": False, "compile_reason": "torch.compile needs a C compiler"}
    _, skipped = rank(NAIVE, device, 16, set())
    assert ("torch_compile=True", "torch.compile needs a C compiler") in skipped


def test_group_by_length_becomes_ready_once_padding_is_longest():
    ready, skipped = rank(Knobs(padding="longest"), CPU, 16, set())
    assert "group_by_length=True" in {h.change for h in ready}
    assert "group_by_length=True" not in dict(skipped)


@pytest.mark.parametrize("incumbent, device", [
    (NAIVE, CPU), (NAIVE, CUDA), (Knobs(per_device_train_batch_size=4, padding="longest", precision="bf16"), CUDA),
    (Knobs(precision="bf16", attn_implementation="flash_attention_2", padding="padding_free"), CUDA),
])
def test_every_proposed_hypothesis_changes_exactly_one_knob(incumbent, device):
    ready, _ = rank(incumbent, device, 16, set())
    assert ready
    for hypothesis in ready:
        changed = incumbent.diff(hypothesis.apply(incumbent))
        assert list(changed) == [hypothesis.knob], hypothesis
        assert changed[hypothesis.knob] == (getattr(incumbent, hypothesis.knob), hypothesis.value)


def test_ready_order_follows_the_catalog_largest_effects_first():
    ready, _ = rank(NAIVE, CUDA, 16, set())
    knobs_in_order = [h.knob for h in ready]
    first = {k: knobs_in_order.index(k) for k in dict.fromkeys(knobs_in_order)}
    assert first["padding"] < first["per_device_train_batch_size"] < first["attn_implementation"] \
        < first["precision"] < first["torch_compile"]
    assert knobs_in_order[-1] == "torch_compile"


def _screened(knobs: Knobs, change: str, ratio: float, decision: str = "discard", state: str = "complete") -> dict:
    return {"change": change, "knobs": knobs.to_dict(), "decision": decision, "state": state, "ratio": ratio}


def test_changes_each_faster_within_the_noise_are_pooled_once_the_singles_are_spent():
    from autotune.reasoner import pooled

    start = Knobs()
    records = [_screened(start, None, None, "baseline"),
               _screened(start.with_change("per_device_train_batch_size", 2), "per_device_train_batch_size=2", 1.07),
               _screened(start.with_change("padding", "longest"), "padding=longest", 1.10),
               _screened(start.with_change("padding", "padding_free"), "padding=padding_free", 1.04),  # same knob
               _screened(start.with_change("attn_implementation", "sdpa"), "attn_implementation=sdpa", 0.90),
               _screened(start.with_change("optim", "adamw_torch_fused"), "optim=adamw_torch_fused", 1.2, state="oom")]
    combined = pooled(start, records, CPU, 16, {key(start)})
    assert combined.source == "pooled" and combined.change == "padding=longest+per_device_train_batch_size=2"
    assert combined.expected_ratio == pytest.approx(1.10 * 1.07)
    # Measured already, or fewer than two to pool: nothing more to try.
    assert pooled(start, records, CPU, 16, {key(combined.apply(start))}) is None
    assert pooled(start, records[:2], CPU, 16, set()) is None
    # Records made on another incumbent do not count for this one.
    assert pooled(start.with_change("gradient_checkpointing", True), records, CPU, 16, set()) is None


def test_fp32_is_tried_back_from_a_half_precision_only_where_the_device_emulates_it():
    # TRL's SFTConfig turns bf16 on by default; on a CPU without native bf16 (its bf16 products measured
    # slower than fp32) going back to fp32 is the change to try, and the shipped priors say it helps.
    from autotune.kb.beliefs import load_priors

    bf16 = NAIVE.with_change("precision", "bf16")
    features = {"device_kind": "cpu", "bf16_supported": False}
    ready, skipped = rank(bf16, CPU, 16, set(), load_priors(), features)
    back = next(h for h in ready if h.change == "precision=fp32")
    assert back.claims == ("P66",) and back.p_helps > 0.5 and back.expected_ratio > 1
    assert "precision=fp32" not in dict(skipped)
    # Where bf16 runs natively it stays: fp32 is no change to try there, and says why.
    ready, skipped = rank(bf16, CUDA, 16, set())
    assert "precision=fp32" not in {h.change for h in ready}
    assert "runs bf16 natively" in dict(skipped)["precision=fp32"]
    # From fp32, nothing changes: fp32 is the start, never a change.
    assert not [h for h in rank(NAIVE, CPU, 16, set())[0] if h.change == "precision=fp32"]
