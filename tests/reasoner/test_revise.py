"""Revision from hand-made evidence: confirm, weaken, split, delete, learn. Pure: nothing is written."""

from __future__ import annotations

import pytest

from autotune.kb.beliefs import Beliefs
from autotune.kb.claims import Claim, Evidence, condition_text, parse_condition
from autotune.reasoner import Observation, find_split, observe, outcome_of, restructure

CUDA_24 = {"device_kind": "cuda", "gpu_mem_gb": 24, "bf16_supported": True, "params_m": 494, "method": "sft"}
# helps on long rows, hurts on short ones
SPLIT_RESULTS = [(256, "hurts", 0.82), (512, "hurts", 0.85), (1024, "hurts", 0.9),
                 (2048, "helps", 1.12), (4096, "helps", 1.2), (8192, "helps", 1.3)]


def checkpointing(**fields) -> Claim:
    base = dict(id="GC", knob="gradient_checkpointing", value=True, direction="helps", ratio=1.1, alpha=1.0,
                beta=1.0, statement="gradient_checkpointing=True helps")
    return Claim(**{**base, **fields})


def sdpa(**fields) -> Claim:
    base = dict(id="SD", knob="attn_implementation", value="sdpa", start="eager", direction="helps", ratio=1.2,
                condition=parse_condition("device_kind == cuda"), alpha=3.0, beta=1.5)
    return Claim(**{**base, **fields})


def result(experiment: str, max_len: int, outcome: str, ratio: float, **extra) -> Evidence:
    return Evidence(experiment, ratio, outcome, {**CUDA_24, "max_len": max_len, **extra})


def observation(experiment: str, outcome: str, ratio: float, changes=(("gradient_checkpointing", False, True),),
                **features) -> Observation:
    return Observation(experiment=experiment, changes=tuple(changes), features={**CUDA_24, **features},
                       ratio=ratio, outcome=outcome, run="run-1")


def only(updates, op):
    found = [u for u in updates if u.op == op]
    assert len(found) == 1, updates
    return found[0]


# -- confirm and weaken -------------------------------------------------------------------------------

def test_an_agreeing_outcome_confirms_the_claim_naming_the_experiment():
    claim = sdpa()
    updates = observe([claim], observation("run-1#3", "helps", 1.25, [("attn_implementation", "eager", "sdpa")]))
    assert [u.op for u in updates] == ["confirm"]
    (update,) = updates
    assert update.claim == "SD" and update.evidence.experiment == "run-1#3" and "run-1#3" in update.reason
    assert update.evidence.ratio == pytest.approx(1.25) and update.evidence.features["device_kind"] == "cuda"
    beliefs = Beliefs(priors=[claim])
    beliefs.apply(updates)
    assert beliefs.get("SD").confidence > claim.confidence


@pytest.mark.parametrize("outcome, ratio", [("hurts", 0.9), ("neutral", 1.01)])
def test_a_disagreeing_outcome_weakens_the_claim(outcome, ratio):
    claim = sdpa()
    updates = observe([claim], observation("run-1#4", outcome, ratio, [("attn_implementation", "eager", "sdpa")]))
    update = only(updates, "weaken")
    assert update.claim == "SD" and "run-1#4" in update.reason and update.evidence.experiment == "run-1#4"
    beliefs = Beliefs(priors=[claim])
    beliefs.apply(updates)
    assert beliefs.get("SD").confidence < claim.confidence


def test_a_result_outside_a_claims_condition_or_start_is_not_evidence_for_it():
    claim = sdpa()
    cpu = observe([claim], observation("r#1", "hurts", 0.9, [("attn_implementation", "eager", "sdpa")],
                                       device_kind="cpu"))
    assert all(u.claim != "SD" for u in cpu)
    other_start = observe([claim], observation("r#2", "hurts", 0.9, [("attn_implementation", "flash_attention_2",
                                                                       "sdpa")]))
    assert all(u.claim != "SD" for u in other_start)


def test_every_matching_claim_gets_the_evidence():
    long_rows = sdpa(id="SD-long", ratio=1.3, condition=parse_condition("device_kind == cuda and max_len >= 2048"))
    updates = observe([sdpa(), long_rows], observation("r#1", "helps", 1.3, [("attn_implementation", "eager", "sdpa")],
                                                       max_len=4096))
    assert sorted((u.op, u.claim) for u in updates) == [("confirm", "SD"), ("confirm", "SD-long")]


def test_a_combined_change_is_evidence_only_for_the_claims_that_proposed_it():
    alone = checkpointing(id="GC-alone", direction="hurts", ratio=0.8)
    pair = checkpointing(id="GC-pair", relations=(("enables", "per_device_train_batch_size=up"),))
    obs = Observation(experiment="r#5", changes=(("gradient_checkpointing", False, True),
                                                 ("per_device_train_batch_size", 2, 4)),
                      features={**CUDA_24, "max_len": 4096}, ratio=1.15, outcome="helps", claims=("GC-pair",))
    updates = observe([alone, pair], obs)
    assert [(u.op, u.claim) for u in updates] == [("confirm", "GC-pair")]


def test_outcome_of_reads_a_trial_record():
    assert outcome_of({"state": "complete", "ratio": 1.3, "decision": "keep"}) == "helps"
    assert outcome_of({"state": "complete", "ratio": 0.8, "decision": "discard", "interval": [0.75, 0.85]}) == "hurts"
    assert outcome_of({"state": "complete", "ratio": 1.01, "decision": "discard",
                       "interval": [0.97, 1.05]}) == "neutral"
    assert outcome_of({"state": "oom", "ratio": None}) is None


# -- split ------------------------------------------------------------------------------------------

def split_evidence(**extra) -> tuple[Evidence, ...]:
    return tuple(result(f"r#{n}", max_len, outcome, ratio, **extra)
                 for n, (max_len, outcome, ratio) in enumerate(SPLIT_RESULTS))


def test_mixed_evidence_splits_at_the_midpoint_between_the_sides():
    claim = checkpointing(evidence=split_evidence())
    children = find_split(claim)
    assert children is not None
    below, above = children
    assert condition_text(below.condition) == "max_len < 1536"
    assert condition_text(above.condition) == "max_len >= 1536"
    assert below.direction == "hurts" and below.ratio < 1
    assert above.direction == "helps" and above.ratio > 1
    # each child's ratio is what its side measured
    assert below.ratio == pytest.approx((0.82 * 0.85 * 0.9) ** (1 / 3), abs=1e-3)
    assert above.ratio == pytest.approx((1.12 * 1.2 * 1.3) ** (1 / 3), abs=1e-3)
    for child in children:
        assert child.parent == "GC" and child.origin == "split" and child.knob == "gradient_checkpointing"
        assert child.value is True and child.evidence == () and child.active
    assert below.id != above.id != "GC"


def test_a_split_keeps_the_parents_condition():
    claim = checkpointing(condition=parse_condition("device_kind == cuda"), evidence=split_evidence())
    below, above = find_split(claim)
    assert condition_text(below.condition) == "device_kind == cuda and max_len < 1536"
    assert condition_text(above.condition) == "device_kind == cuda and max_len >= 1536"


def test_restructure_proposes_the_split_naming_the_feature_and_the_last_experiment():
    claim = checkpointing(evidence=split_evidence())
    (update,) = restructure(claim, "r#5")
    assert update.op == "split" and update.claim == "GC"
    assert "max_len" in update.reason and "1536" in update.reason and "r#5" in update.reason
    assert [condition_text(c.condition) for c in update.children] == ["max_len < 1536", "max_len >= 1536"]


def test_a_split_prefers_what_the_job_is_over_what_happens_to_vary_with_it():
    # headroom falls as rows get longer, so it separates the results as well as max_len does
    evidence = tuple(result(f"r#{n}", max_len, outcome, ratio, headroom=round(0.9 - n * 0.15, 2))
                     for n, (max_len, outcome, ratio) in enumerate(SPLIT_RESULTS))
    below, above = find_split(checkpointing(evidence=evidence))
    assert [c.feature for c in below.condition] == ["max_len"]


def test_a_split_can_be_on_a_word_feature():
    evidence = tuple(Evidence(f"r#{n}", ratio, outcome, {"device_kind": kind, "max_len": 1024})
                     for n, (kind, outcome, ratio) in enumerate([("cuda", "helps", 1.2), ("cuda", "helps", 1.3),
                                                                 ("cpu", "hurts", 0.8), ("cpu", "hurts", 0.9)]))
    children = find_split(checkpointing(id="PIN", knob="dataloader_pin_memory", evidence=evidence))
    assert children is not None
    by_direction = {c.direction: condition_text(c.condition) for c in children}
    assert by_direction["hurts"] in ("device_kind == cpu", "device_kind != cuda")
    assert by_direction["helps"] in ("device_kind == cuda", "device_kind != cpu")


@pytest.mark.parametrize("lo, hi", [(512, 513), (1000, 1001), (494.03, 494.1), (0.1001, 0.1002)])
def test_the_split_threshold_falls_between_the_two_sides(lo, hi):
    name = "max_len" if isinstance(lo, int) and lo > 1 else ("params_m" if lo > 1 else "headroom")
    evidence = tuple(Evidence(f"r#{n}", ratio, outcome, {name: value}) for n, (value, outcome, ratio) in
                     enumerate([(lo, "hurts", 0.9), (lo, "hurts", 0.85), (hi, "helps", 1.2), (hi, "helps", 1.3)]))
    children = find_split(checkpointing(evidence=evidence))
    assert children is not None, f"{name} {lo} | {hi} separates the results"
    below, above = children
    assert below.condition[-1].holds({name: lo}) and not below.condition[-1].holds({name: hi})
    assert above.condition[-1].holds({name: hi}) and not above.condition[-1].holds({name: lo})


def test_too_little_or_inseparable_evidence_does_not_split():
    assert find_split(checkpointing(evidence=split_evidence()[2:5])) is None    # three results
    # one on each side is not enough
    assert find_split(checkpointing(evidence=split_evidence()[2:4] + tuple(
        result(f"x#{i}", 4096, "helps", 1.2) for i in range(4)))) is None
    # the same features on both sides: nothing to split on
    same = tuple(result(f"s#{i}", 2048, outcome, ratio) for i, (outcome, ratio) in
                 enumerate([("helps", 1.2), ("hurts", 0.9), ("helps", 1.1), ("hurts", 0.8)]))
    assert find_split(checkpointing(evidence=same)) is None


def test_observing_results_one_by_one_ends_in_the_split():
    beliefs = Beliefs(priors=[checkpointing()])
    seen = []
    for n, (max_len, outcome, ratio) in enumerate(SPLIT_RESULTS):
        updates = observe(beliefs.claims(), observation(f"r#{n}", outcome, ratio, max_len=max_len))
        seen += [u.op for u in updates]
        beliefs.apply(updates)
    assert "split" in seen and "delete" not in seen
    assert beliefs.get("GC").status == "split"
    by_condition = {condition_text(c.condition): c for c in beliefs.claims()}
    assert set(by_condition) == {"max_len < 1536", "max_len >= 1536"}
    assert by_condition["max_len < 1536"].direction == "hurts"
    assert by_condition["max_len >= 1536"].direction == "helps"
    # every result ended up with the child whose condition it falls under
    assert {e.experiment for e in by_condition["max_len < 1536"].evidence} == {"r#0", "r#1", "r#2"}
    assert {e.experiment for e in by_condition["max_len >= 1536"].evidence} == {"r#3", "r#4", "r#5"}


# -- delete -----------------------------------------------------------------------------------------

def test_five_disagreeing_results_with_nothing_to_separate_them_delete_the_claim():
    evidence = tuple(result(f"r#{i}", 2048, "hurts", 0.9) for i in range(5))
    (update,) = restructure(checkpointing(evidence=evidence), "r#4")
    assert update.op == "delete" and update.claim == "GC" and "r#4" in update.reason
    assert update.children == ()


def test_four_disagreeing_results_are_not_yet_enough_to_delete():
    evidence = tuple(result(f"r#{i}", 2048, "hurts", 0.9) for i in range(4))
    assert restructure(checkpointing(evidence=evidence), "r#3") == []


def test_mixed_results_that_no_feature_separates_delete_the_claim():
    outcomes = ["hurts", "hurts", "helps", "hurts", "hurts", "hurts", "hurts"]
    evidence = tuple(result(f"r#{i}", 2048, o, 1.1 if o == "helps" else 0.9) for i, o in enumerate(outcomes))
    claim = checkpointing(evidence=evidence)
    assert find_split(claim) is None
    assert [u.op for u in restructure(claim, "r#6")] == ["delete"]


def test_a_coherent_claim_is_left_alone():
    evidence = tuple(result(f"r#{i}", 2048, "helps", 1.2) for i in range(6))
    assert restructure(checkpointing(evidence=evidence), "r#5") == []


def test_observing_disagreeing_results_ends_in_deletion():
    beliefs = Beliefs(priors=[checkpointing()])
    ops = []
    for i in range(5):
        updates = observe(beliefs.claims(), observation(f"r#{i}", "hurts", 0.85, max_len=2048))
        ops.append([u.op for u in updates])
        beliefs.apply(updates)
    assert ops[:4] == [["weaken"]] * 4 and ops[4] == ["weaken", "delete"]
    assert beliefs.get("GC").status == "deleted"
    assert "GC" not in {c.id for c in beliefs.claims()}


# -- learn ------------------------------------------------------------------------------------------

def test_a_change_no_claim_speaks_of_creates_a_learned_claim_for_this_kind_of_device():
    obs = observation("r#7", "helps", 1.08, [("dataloader_pin_memory", False, True)], max_len=1024)
    updates = observe([sdpa(), checkpointing()], obs)
    assert [u.op for u in updates] == ["create", "confirm"]
    create, confirm = updates
    (learned,) = create.children
    assert create.claim == learned.id == confirm.claim and "r#7" in create.reason
    assert learned.origin == "learned" and learned.knob == "dataloader_pin_memory" and learned.value is True
    assert learned.direction == "helps" and learned.ratio == pytest.approx(1.08)
    assert condition_text(learned.condition) == "device_kind == cuda"
    assert "r#7" in learned.source and confirm.evidence.experiment == "r#7"


def test_a_learned_claim_is_confirmed_not_created_again_on_the_same_kind_of_device():
    beliefs = Beliefs(priors=[])
    beliefs.apply(observe(beliefs.claims(), observation("r#1", "hurts", 0.9, [("per_device_train_batch_size", 2, 4)])))
    (learned,) = beliefs.claims()
    assert learned.value == "up" and learned.direction == "hurts" and learned.confidence == pytest.approx(2 / 3)
    again = observe(beliefs.claims(), observation("r#2", "hurts", 0.88, [("per_device_train_batch_size", 4, 8)]))
    assert [(u.op, u.claim) for u in again] == [("confirm", learned.id)]
    elsewhere = observe(beliefs.claims(), observation("r#3", "hurts", 0.9, [("per_device_train_batch_size", 2, 4)],
                                                      device_kind="cpu"))
    create = only(elsewhere, "create")
    assert create.claim != learned.id and condition_text(create.children[0].condition) == "device_kind == cpu"


def test_a_learned_claim_without_a_device_kind_has_no_condition():
    obs = Observation("r#1", (("optim", "adamw_torch", "adamw_torch_fused"),), {"max_len": 128}, 1.05, "helps")
    create = only(observe([], obs), "create")
    assert create.children[0].condition == ()
