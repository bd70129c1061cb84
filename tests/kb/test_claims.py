"""Claims and their condition language; the shipped priors parse and cover the catalog."""

from __future__ import annotations

import json
from importlib import resources
from types import SimpleNamespace

import pytest

from autotune.util.errors import RecordError
from autotune.kb.beliefs import load_priors
from autotune.kb.claims import (Claim, Clause, ConditionError, Evidence, condition_text, describe,
                                parse_condition)
from autotune.kb.features import NUMERIC, context
from autotune.config.knobs import CATALOG, Knobs, parse_knob_value


def holds(text: str, **features) -> bool:
    return all(clause.holds(features) for clause in parse_condition(text))


# -- parsing ----------------------------------------------------------------------------------------

def test_a_condition_parses_into_clauses_with_typed_values():
    clauses = parse_condition("max_len >= 2048 and headroom < 0.3 and bf16_supported == true "
                              "and padding == longest and device_kind != cpu")
    assert clauses == (Clause("max_len", ">=", 2048), Clause("headroom", "<", 0.3),
                       Clause("bf16_supported", "==", True), Clause("padding", "==", "longest"),
                       Clause("device_kind", "!=", "cpu"))
    assert type(clauses[0].value) is int and type(clauses[1].value) is float
    assert clauses[2].value is True


@pytest.mark.parametrize("text, value", [("x == 4096", 4096), ("x == 0.25", 0.25), ("x == -1", -1),
                                         ("x == 1e3", 1000), ("x == 2.0", 2.0), ("x == False", False),
                                         ("x == TRUE", True), ("x == flash_attention_2", "flash_attention_2")])
def test_values_are_numbers_booleans_or_bare_words(text, value):
    (clause,) = parse_condition(text)
    assert clause.value == value and type(clause.value) is type(value)


def test_spacing_is_free_and_an_empty_condition_always_holds():
    assert parse_condition("max_len>=2048  and   padding==longest") == parse_condition(
        "max_len >= 2048 and padding == longest")
    assert parse_condition("") == parse_condition("   ") == ()
    assert holds("") and holds("", max_len=1)


@pytest.mark.parametrize("text", [
    "max_len => 2048", "max_len >> 2048", "max_len", "max_len >=", ">= 2048", "max_len >= 2048 or padding == longest",
    "max_len >= 2048 and", "max_len >= 20 48", "MaxLen >= 2048", "padding == 'longest'x y", "max_len = 2048",
])
def test_a_bad_condition_raises_a_clear_error_naming_it(text):
    with pytest.raises(ConditionError) as error:
        parse_condition(text)
    message = str(error.value)
    assert repr(text) in message
    assert "feature op value" in message
    assert isinstance(error.value, RecordError)


@pytest.mark.parametrize("text", ["padding >= longest", "max_len >= 2048 and bf16_supported > false",
                                  "device_kind < cuda"])
def test_ordering_a_word_or_boolean_is_refused_rather_than_never_holding(text):
    with pytest.raises(ConditionError, match="orders a non-number") as error:
        parse_condition(text)
    assert repr(text) in str(error.value)


def test_a_claim_definition_with_a_bad_condition_is_refused_when_read():
    definition = {"id": "X1", "knob": "padding", "value": "longest", "direction": "helps", "ratio": 1.2,
                  "condition": "padding_share => 0.3"}
    with pytest.raises(ConditionError, match="padding_share => 0.3"):
        Claim.from_definition(definition)


def test_conditions_print_back_to_text_that_parses_to_the_same_clauses():
    text = "max_len >= 2048 and headroom < 0.3 and bf16_supported == true and padding == padding_free"
    clauses = parse_condition(text)
    assert condition_text(clauses) == text
    assert parse_condition(condition_text(clauses)) == clauses


# -- evaluation -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, features, expected", [
    ("max_len >= 2048", {"max_len": 2048}, True),
    ("max_len >= 2048", {"max_len": 2047}, False),
    ("max_len > 2048", {"max_len": 2048}, False),
    ("max_len < 2048", {"max_len": 1024}, True),
    ("max_len <= 2048", {"max_len": 2048}, True),
    ("max_len == 2048", {"max_len": 2048.0}, True),
    ("max_len != 2048", {"max_len": 4096}, True),
    ("headroom < 0.3", {"headroom": 0.29}, True),
    ("headroom < 0.3", {"headroom": 0.3}, False),
    ("bf16_supported == true", {"bf16_supported": True}, True),
    ("bf16_supported == true", {"bf16_supported": False}, False),
    ("bf16_supported != true", {"bf16_supported": False}, True),
    ("bf16_supported == false", {"bf16_supported": False}, True),
    ("padding == longest", {"padding": "longest"}, True),
    ("padding == longest", {"padding": "max_length"}, False),
    ("padding != longest", {"padding": "max_length"}, True),
    ("device_kind == cuda", {"device_kind": "CUDA"}, True),
    ("device_kind == cuda and max_len >= 2048", {"device_kind": "cuda", "max_len": 4096}, True),
    ("device_kind == cuda and max_len >= 2048", {"device_kind": "cuda", "max_len": 512}, False),
])
def test_clauses_evaluate_against_features(text, features, expected):
    assert holds(text, **features) is expected


@pytest.mark.parametrize("text", ["gpu_mem_gb <= 24", "gpu_mem_gb > 24", "device_kind == cuda", "device_kind != cuda",
                                  "bf16_supported == false", "bf16_supported != true"])
def test_a_clause_on_a_feature_the_job_does_not_know_does_not_hold(text):
    # `suggest` without gpu_mem, a CPU-only frame: a claim applies only where it is known to.
    assert holds(text, max_len=4096, padding="longest") is False
    assert holds(text, gpu_mem_gb=None, device_kind=None, bf16_supported=None) is False


def test_a_number_clause_never_holds_for_words_or_booleans():
    assert holds("headroom < 0.3", headroom="low") is False
    assert holds("micro_batch >= 1", micro_batch=True) is False


def test_a_claim_matches_only_its_change_from_its_start_where_its_condition_holds():
    claim = Claim(id="X1", knob="padding", value="padding_free", direction="helps", ratio=1.8, start="max_length",
                  condition=parse_condition("padding_share >= 0.3"))
    assert claim.matches("padding", "padding_free", "max_length", {"padding_share": 0.5})
    assert not claim.matches("padding", "padding_free", "max_length", {"padding_share": 0.1})
    assert not claim.matches("padding", "padding_free", "max_length", {})
    assert not claim.matches("padding", "padding_free", "longest", {"padding_share": 0.5})
    assert not claim.matches("padding", "longest", "max_length", {"padding_share": 0.5})


def test_integer_knob_claims_speak_of_up_or_down():
    up = Claim(id="X1", knob="per_device_train_batch_size", value="up", direction="helps", ratio=1.3)
    assert up.matches("per_device_train_batch_size", 4, 2, {})
    assert up.matches("per_device_train_batch_size", 3, 2, {})
    assert not up.matches("per_device_train_batch_size", 1, 2, {})
    with pytest.raises(RecordError, match="up or down"):
        Claim(id="X2", knob="per_device_train_batch_size", value=4, direction="helps", ratio=1.3)


@pytest.mark.parametrize("fields, words", [({"knob": "learning_rate"}, "unknown knob"),
                                           ({"direction": "maybe"}, "direction"), ({"ratio": 0}, "> 0"),
                                           ({"alpha": 0}, "> 0")])
def test_a_bad_claim_is_refused(fields, words):
    base = {"id": "X1", "knob": "padding", "value": "longest", "direction": "helps", "ratio": 1.2}
    with pytest.raises(RecordError, match=words):
        Claim(**{**base, **fields})


# -- confidence -------------------------------------------------------------------------------------

def evidence(experiment: str, outcome: str, ratio: float, **features) -> Evidence:
    return Evidence(experiment, ratio, outcome, features)


def test_confidence_is_the_beta_mean_and_moves_with_agreeing_and_disagreeing_results():
    claim = Claim(id="X1", knob="padding", value="longest", direction="helps", ratio=1.3, alpha=3, beta=1)
    assert claim.confidence == pytest.approx(0.75)
    confirmed = claim.with_evidence(evidence("r#1", "helps", 1.4))
    weakened = claim.with_evidence(evidence("r#1", "hurts", 0.9))
    neutral = claim.with_evidence(evidence("r#1", "neutral", 1.0))
    assert confirmed.confidence == pytest.approx(4 / 5) and confirmed.confidence > claim.confidence
    assert weakened.confidence == pytest.approx(3 / 5) and weakened.confidence < claim.confidence
    assert neutral.confidence == pytest.approx(3 / 5)   # "helps" is not shown by a neutral result
    assert confirmed.uncertainty < claim.uncertainty


def test_a_hurts_claim_is_confirmed_by_a_result_that_hurts():
    claim = Claim(id="X1", knob="gradient_checkpointing", value=True, direction="hurts", ratio=0.8)
    assert claim.with_evidence(evidence("r#1", "hurts", 0.8)).confidence > claim.confidence
    assert claim.with_evidence(evidence("r#1", "helps", 1.1)).confidence < claim.confidence


def test_the_same_experiment_counts_once():
    claim = Claim(id="X1", knob="padding", value="longest", direction="helps", ratio=1.3)
    once = claim.with_evidence(evidence("r#1", "helps", 1.4))
    twice = once.with_evidence(evidence("r#1", "helps", 1.4), evidence("r#1", "helps", 1.5))
    assert len(twice.evidence) == 1 and twice.confidence == once.confidence


def test_expected_ratio_moves_from_the_prior_toward_what_was_measured_where_it_agreed():
    claim = Claim(id="X1", knob="padding", value="longest", direction="helps", ratio=1.2, alpha=1, beta=1)
    measured = claim.with_evidence(*[evidence(f"r#{i}", "helps", 1.6) for i in range(8)])
    assert 1.2 < measured.expected_ratio < 1.6
    assert measured.expected_ratio == pytest.approx((1.2 ** 2 * 1.6 ** 8) ** 0.1)
    # a result that disagreed says nothing about the size of the gain where it helps
    assert claim.with_evidence(evidence("r#9", "hurts", 0.5)).expected_ratio == pytest.approx(1.2)
    assert "confidence" in describe(measured) and "8 result(s)" in describe(measured)


# -- the shipped priors -------------------------------------------------------------------------------

def raw_priors() -> list[dict]:
    return json.loads(resources.files("autotune.kb").joinpath("priors.json").read_text())["claims"]


def known_features() -> set[str]:
    """Every feature kb.features.context can produce, from a job, frame and measurement that have it all."""
    job = SimpleNamespace(max_len=1024, effective_batch=16, method="sft")
    frame = {"model": {"params": 5e8, "layers": 24, "hidden": 896, "vocab": 151936, "model_type": "qwen2_vl",
                       "vision": {"params": 6e8, "trainable_params": 6e8}},
             "data": {"padding_share": 0.4, "p50_len": 200, "p90_len": 600, "mean_len": 250,
                      "image_token_share": 0.5, "images_per_row": 1.0},
             "device": {"kind": "cuda", "bf16": True, "memory_bytes": 24e9}}
    measurement = {"breakdown": {"data_wait_share": 0.1, "optimizer_share": 0.1},
                   "ceiling": {"bytes": 10e9, "limit_bytes": 24e9}}
    return set(context(job, frame, Knobs(), measurement))


def test_there_are_at_least_twenty_priors_with_unique_ids():
    claims = load_priors()
    assert len(claims) >= 20
    ids = [c.id for c in claims]
    assert len(set(ids)) == len(ids)


def test_every_prior_cites_a_source_a_reader_can_find():
    """A file of notes outside the repository (REFERENCE.md) is no source: the paper, page or issue is."""
    for entry in raw_priors():
        assert "REFERENCE.md" not in entry["source"], entry["id"]
        assert entry["source"].strip(), entry["id"]


def test_every_prior_parses_and_names_a_catalog_knob():
    for entry in raw_priors():
        claim = Claim.from_definition(entry)  # raises on a bad condition or knob
        assert claim.knob in CATALOG, entry["id"]
        assert parse_condition(condition_text(claim.condition)) == claim.condition, entry["id"]


def test_every_catalog_knob_has_a_prior():
    covered = {c.knob for c in load_priors()}
    assert set(CATALOG) <= covered, f"no prior speaks of {sorted(set(CATALOG) - covered)}"


def test_prior_values_and_starts_are_values_the_knob_takes():
    for claim in load_priors():
        knob = CATALOG[claim.knob]
        for value in (claim.value, claim.start):
            if value is None or knob.kind == "int":
                continue
            assert parse_knob_value(claim.knob, str(value)) == value, (claim.id, value)


def test_prior_relations_name_changes_of_catalog_knobs():
    for claim in load_priors():
        for kind, change in claim.relations:
            assert kind in ("enables", "conflicts"), claim.id
            knob, _, value = change.partition("=")
            assert knob in CATALOG, (claim.id, change)
            if CATALOG[knob].kind == "int":
                assert value in ("up", "down"), (claim.id, change)
            else:
                parse_knob_value(knob, value)


def test_prior_conditions_speak_only_of_features_a_job_has():
    features = known_features()
    for claim in load_priors():
        for clause in claim.condition:
            assert clause.feature in features, f"{claim.id}: {clause.feature} is not a job feature"
            if isinstance(clause.value, (int, float)) and not isinstance(clause.value, bool):
                assert clause.feature in NUMERIC, f"{claim.id}: {clause} compares a non-numeric feature"
            elif clause.feature in CATALOG and CATALOG[clause.feature].kind == "choice":
                assert clause.value in CATALOG[clause.feature].choices, f"{claim.id}: {clause}"
            elif clause.feature in ("method",):
                assert clause.value in ("sft", "lora"), f"{claim.id}: {clause}"
            elif clause.feature == "device_kind":
                assert clause.value in ("cuda", "cpu", "mps"), f"{claim.id}: {clause}"


def test_prior_ratios_point_the_way_the_claim_does():
    for claim in load_priors():
        assert (claim.ratio > 1) == (claim.direction == "helps"), claim.id
        assert claim.origin == "prior" and claim.source and claim.statement, claim.id
