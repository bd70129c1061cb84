"""rank() steered by the shipped beliefs and the job's features (see kb.features.context), and by evidence."""

from __future__ import annotations

import pytest

from autotune.kb.beliefs import Beliefs
from autotune.kb.claims import Evidence, Update
from autotune.kb.features import knob_features
from autotune.config.knobs import Knobs
from autotune.reasoner import Hypothesis, Observation, observe, rank

CPU = {"kind": "cpu", "cpu_count": 2, "bf16": False, "compile": True, "fused_adamw": True, "memory_bytes": 2**34}
CUDA = {"kind": "cuda", "cpu_count": 16, "bf16": True, "tf32": True, "flash_attn": True, "compile": True,
        "fused_adamw": True, "memory_bytes": 2**36}
CUDA_24 = {**CUDA, "memory_bytes": 24 * 10**9}
CUDA_80 = {**CUDA, "memory_bytes": 80 * 10**9}
NAIVE = Knobs()
BATCH = 16


def features(device: dict, knobs: Knobs, **overrides) -> dict:
    """What kb.features.context gives for a small full fine-tune with a middling profile."""
    base = {"max_len": 1024, "effective_batch": BATCH, "method": "sft", "params_m": 494.0, "layers": 24,
            "hidden": 896, "vocab": 151936, "model_family": "qwen2", "padding_share": 0.2, "length_spread": 1.4,
            "mean_len": 600, "device_kind": device["kind"], "bf16_supported": bool(device.get("bf16")),
            "data_wait_share": 0.05, "optimizer_share": 0.06, "headroom": 0.4}
    if device["kind"] == "cuda":
        base["gpu_mem_gb"] = round(device["memory_bytes"] / 1e9, 1)
    return {**base, **knob_features(knobs), **overrides}


def ranked(incumbent: Knobs, device: dict, claims=None, blocked=(), **overrides) -> list[Hypothesis]:
    claims = Beliefs().claims() if claims is None else claims
    ready, _ = rank(incumbent, device, BATCH, set(), claims=claims,
                    features=features(device, incumbent, **overrides), blocked=blocked)
    return ready


def position(ready: list[Hypothesis], change: str) -> int:
    changes = [h.change for h in ready]
    assert change in changes, f"{change} not proposed: {changes}"
    return changes.index(change)


def unknown(ready: list[Hypothesis]) -> list[Hypothesis]:
    return [h for h in ready if not h.claims]


# -- the profile steers ---------------------------------------------------------------------------------

def test_a_high_data_wait_ranks_more_workers_among_the_first():
    ready = ranked(NAIVE, CUDA, data_wait_share=0.35)
    workers = ready[position(ready, "dataloader_num_workers=2")]
    assert position(ready, "dataloader_num_workers=2") < 4
    assert "P30" in workers.claims and "data_wait_share" in workers.reason
    assert all(workers.score > h.score for h in unknown(ready))


def test_a_low_data_wait_puts_more_workers_low():
    ready = ranked(NAIVE, CUDA, data_wait_share=0.005)
    assert position(ready, "dataloader_num_workers=2") >= len(ready) // 2
    high = ranked(NAIVE, CUDA, data_wait_share=0.35)
    assert position(ready, "dataloader_num_workers=2") > position(high, "dataloader_num_workers=2")


@pytest.mark.parametrize("incumbent, device", [(NAIVE, CPU), (Knobs(precision="bf16"), CUDA),
                                               (Knobs(precision="bf16", attn_implementation="sdpa"), CUDA_24)])
def test_a_high_padding_share_ranks_padding_free_first(incumbent, device):
    ready = ranked(incumbent, device, padding_share=0.55)
    assert ready[0].change == "padding=padding_free"
    assert "P06" in ready[0].claims


def test_a_high_padding_share_ranks_padding_free_among_the_first_two_from_fp32_on_a_gpu():
    # bf16 from fp32 (about 2x) is the one change the priors expect more of
    ready = ranked(NAIVE, CUDA, padding_share=0.55)
    assert position(ready, "padding=padding_free") <= 1
    low = ranked(NAIVE, CUDA, padding_share=0.02)
    assert position(low, "padding=padding_free") > position(ready, "padding=padding_free")


def test_on_a_gpu_with_bf16_bf16_ranks_near_the_top_from_fp32():
    ready = ranked(NAIVE, CUDA)
    assert position(ready, "precision=bf16") <= 1
    assert "P18" in ready[position(ready, "precision=bf16")].claims
    # and never where the device has none
    assert "precision=bf16" not in [h.change for h in ranked(NAIVE, CPU)]


# -- memory: micro-batch and checkpointing ---------------------------------------------------------------

@pytest.mark.parametrize("headroom", [0.05, 0.15, 0.29])
def test_little_headroom_on_long_rows_on_a_24gb_card_proposes_checkpointing_with_a_larger_micro_batch(headroom):
    incumbent = Knobs(per_device_train_batch_size=2, precision="bf16", attn_implementation="sdpa")
    ready = ranked(incumbent, CUDA_24, max_len=4096, headroom=headroom)
    combined = {h.change: h for h in ready if h.also}
    # Other memory savers may enable it too (offloading, at headroom < 0.1); each says which claim.
    assert "gradient_checkpointing=True+per_device_train_batch_size=4" in combined
    assert all(change.endswith("+per_device_train_batch_size=4") for change in combined)
    pair = combined["gradient_checkpointing=True+per_device_train_batch_size=4"]
    assert pair.apply(incumbent) == incumbent.with_change("gradient_checkpointing", True).with_change(
        "per_device_train_batch_size", 4)
    assert "P26" in pair.claims
    assert ready.index(pair) < position(ready, "per_device_train_batch_size=4")
    # the lone larger micro-batch is what P26 says needs checkpointing here
    assert "P26" in ready[position(ready, "per_device_train_batch_size=4")].reason


def test_large_headroom_on_short_rows_on_an_80gb_card_prefers_a_larger_micro_batch_to_checkpointing():
    incumbent = Knobs(per_device_train_batch_size=2, precision="bf16", attn_implementation="sdpa")
    ready = ranked(incumbent, CUDA_80, max_len=512, headroom=0.7)
    assert position(ready, "per_device_train_batch_size=4") < position(ready, "gradient_checkpointing=True")
    assert not [h for h in ready if h.also]
    assert "P01" in ready[position(ready, "per_device_train_batch_size=4")].claims


def test_a_blocked_larger_micro_batch_brings_the_combined_checkpointing_change():
    # lots of headroom measured, but micro-batch 4 did not fit: checkpointing may make room for it
    incumbent = Knobs(per_device_train_batch_size=2, precision="bf16")
    ready = ranked(incumbent, CUDA_80, max_len=512, headroom=0.7, blocked={"per_device_train_batch_size=4"})
    combined = {h.change: h for h in ready if h.also}
    # Every memory saver a claim says enables a larger micro-batch comes with it (checkpointing among them).
    assert all(change.endswith("+per_device_train_batch_size=4") for change in combined)
    pair = combined["gradient_checkpointing=True+per_device_train_batch_size=4"]
    assert "did not fit" in pair.reason and "P26" in pair.reason
    assert not [h for h in ranked(incumbent, CUDA_80, max_len=512, headroom=0.7) if h.also]


# -- rationale ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("incumbent, device, overrides", [
    (NAIVE, CUDA, {}), (NAIVE, CPU, {"padding_share": 0.5}),
    (Knobs(per_device_train_batch_size=2, precision="bf16"), CUDA_24, {"max_len": 4096, "headroom": 0.1}),
    (Knobs(padding="longest", precision="bf16", attn_implementation="sdpa"), CUDA,
     {"length_spread": 2.5, "data_wait_share": 0.3, "optimizer_share": 0.2}),
])
def test_every_hypothesis_says_why_naming_the_claims_behind_it(incumbent, device, overrides):
    ready = ranked(incumbent, device, **overrides)
    assert ready and any(h.claims for h in ready)
    for hypothesis in ready:
        assert hypothesis.reason.strip()
        assert hypothesis.to_dict()["rationale"] == hypothesis.reason
        for claim in hypothesis.claims:
            assert claim in hypothesis.reason, (hypothesis.change, hypothesis.reason)
        if not hypothesis.claims:
            assert "no claim" in hypothesis.reason


# -- evidence moves the ranking ------------------------------------------------------------------------------

def confirmed(claim_id: str, times: int, ratio: float) -> Beliefs:
    beliefs = Beliefs()
    beliefs.apply([Update("confirm", claim_id, "test", evidence=Evidence(f"r#{i}", ratio, "helps", {}))
                   for i in range(times)])
    return beliefs


@pytest.mark.parametrize("claim_id, change, overrides", [
    ("P27", "torch_compile=True", {}),
    ("P33", "dataloader_pin_memory=True", {"data_wait_share": 0.08}),
    ("P13", "attn_implementation=sdpa", {}),
])
def test_confirming_a_claim_at_the_ratio_it_claims_makes_its_change_more_attractive(claim_id, change, overrides):
    fresh = ranked(NAIVE, CUDA, **overrides)
    ratio = Beliefs().get(claim_id).ratio
    sure = ranked(NAIVE, CUDA, claims=confirmed(claim_id, 10, ratio).claims(), **overrides)
    before, after = fresh[position(fresh, change)], sure[position(sure, change)]
    assert after.p_helps > before.p_helps
    assert after.score > before.score, "ten results that agree with the claim made its change less attractive"
    assert position(sure, change) <= position(fresh, change)


@pytest.mark.parametrize("claim_id, change, measured, overrides", [
    ("P33", "dataloader_pin_memory=True", 1.15, {"data_wait_share": 0.08}),
    ("P36", "optim=adamw_torch_fused", 1.1, {"optimizer_share": 0.03}),
])
def test_a_claim_confirmed_many_times_moves_its_change_up_the_ranking(claim_id, change, measured, overrides):
    incumbent = Knobs(precision="bf16", attn_implementation="sdpa")
    fresh = ranked(incumbent, CUDA, **overrides)
    sure = ranked(incumbent, CUDA, claims=confirmed(claim_id, 12, measured).claims(), **overrides)
    assert claim_id in fresh[position(fresh, change)].claims
    assert position(sure, change) < position(fresh, change)
    assert "12 result(s)" in sure[position(sure, change)].reason


def test_a_deleted_claim_is_no_longer_used_by_rank():
    beliefs = Beliefs()
    features_ = features(CUDA, NAIVE)
    for i in range(12):
        obs = Observation(f"r#{i}", (("attn_implementation", "eager", "sdpa"),), features_, 0.9, "hurts")
        beliefs.apply(observe(beliefs.claims(), obs))
        if beliefs.get("P13").status == "deleted":
            break
    assert beliefs.get("P13").status == "deleted"
    assert 5 <= len(beliefs.get("P13").evidence) <= 8
    for claims in (beliefs.claims(), beliefs.claims(active_only=False)):
        ready, _ = rank(NAIVE, CUDA, BATCH, set(), claims=claims, features=features_)
        assert all("P13" not in h.claims and "P13" not in h.reason for h in ready)
    before = ranked(NAIVE, CUDA)
    assert "P13" in before[position(before, "attn_implementation=sdpa")].claims


def test_a_change_that_conflicts_with_the_incumbent_is_ranked_lower_and_says_why():
    compiled = Knobs(torch_compile=True)
    plain = ranked(NAIVE, CUDA)
    with_compile = ranked(compiled, CUDA)
    longest = next(h for h in with_compile if h.change == "padding=longest")
    assert "conflicts with" in longest.reason and "P28" in longest.claims
    assert longest.p_helps < next(h for h in plain if h.change == "padding=longest").p_helps
