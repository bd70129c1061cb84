"""Beliefs: folded from priors, definitions and history; apply() persists; splits keep lineage; sharing."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.util.errors import RecordError
from autotune.kb.beliefs import Beliefs, load_priors
from autotune.kb.claims import Claim, Evidence, Update, condition_text
from autotune.kb.store import Store
from autotune.reasoner import restructure

FEATURES = {"device_kind": "cuda", "gpu_mem_gb": 24, "bf16_supported": True, "method": "sft"}
SPLIT_RESULTS = [(256, "hurts", 0.82), (512, "hurts", 0.85), (1024, "hurts", 0.9),
                 (2048, "helps", 1.12), (4096, "helps", 1.2), (8192, "helps", 1.3)]


def checkpointing() -> Claim:
    return Claim(id="GC", knob="gradient_checkpointing", value=True, direction="helps", ratio=1.1,
                 statement="gradient_checkpointing=True helps")


def evidence(experiment: str, outcome: str = "helps", ratio: float = 1.5, **features) -> Evidence:
    return Evidence(experiment, ratio, outcome, {**FEATURES, **features})


def confirm(claim: str, experiment: str, ratio: float = 1.5) -> Update:
    return Update("confirm", claim, f"{experiment} agrees", evidence=evidence(experiment, "helps", ratio))


def weaken(claim: str, experiment: str, ratio: float = 0.8) -> Update:
    return Update("weaken", claim, f"{experiment} disagrees", evidence=evidence(experiment, "hurts", ratio))


def folded(beliefs: Beliefs) -> dict[str, tuple]:
    return {c.id: (c.status, round(c.confidence, 9), len(c.evidence), condition_text(c.condition))
            for c in beliefs.claims(active_only=False)}


# -- persistence --------------------------------------------------------------------------------------

def test_without_a_store_the_beliefs_are_the_shipped_priors():
    beliefs = Beliefs()
    assert [c.id for c in beliefs.claims()] == [c.id for c in load_priors()]
    assert all(c.evidence == () and c.active for c in beliefs.claims())


def test_apply_writes_events_to_the_store_and_a_new_beliefs_reads_the_same_confidences(tmp_path: Path):
    beliefs = Beliefs(Store(tmp_path))
    before = beliefs.get("P18").confidence
    applied = beliefs.apply([confirm("P18", "run-a#1"), confirm("P18", "run-a#2"), weaken("P13", "run-a#3")],
                            run="run-a")
    assert [e["op"] for e in applied] == ["confirm", "confirm", "weaken"]
    history = Store(tmp_path).all("claim_history")
    assert [(e["op"], e["claim"], e["evidence"]["experiment"], e["run"]) for e in history] == [
        ("confirm", "P18", "run-a#1", "run-a"), ("confirm", "P18", "run-a#2", "run-a"),
        ("weaken", "P13", "run-a#3", "run-a")]
    assert beliefs.get("P18").confidence > before
    again = Beliefs(Store(tmp_path))
    assert folded(again) == folded(beliefs)
    assert again.get("P18").confidence == pytest.approx((6 + 2) / (8 + 2))
    assert again.get("P13").confidence == pytest.approx(3 / (4.5 + 1))
    assert [e.experiment for e in again.get("P18").evidence] == ["run-a#1", "run-a#2"]


def test_the_same_evidence_applied_twice_counts_once(tmp_path: Path):
    beliefs = Beliefs(Store(tmp_path))
    assert len(beliefs.apply([confirm("P18", "run-a#1")])) == 1
    assert beliefs.apply([confirm("P18", "run-a#1")]) == []
    assert len(Store(tmp_path).all("claim_history")) == 1
    # a tuner that reads the folder later, and applies it once more
    later = Beliefs(Store(tmp_path))
    assert later.apply([confirm("P18", "run-a#1", ratio=1.7)]) == []
    for view in (beliefs, later, Beliefs(Store(tmp_path))):
        assert len(view.get("P18").evidence) == 1
        assert view.get("P18").confidence == pytest.approx(7 / 9)


def test_the_same_evidence_twice_in_one_batch_is_written_once(tmp_path: Path):
    beliefs = Beliefs(Store(tmp_path))
    applied = beliefs.apply([confirm("P18", "run-a#1"), confirm("P18", "run-a#1"), confirm("P18", "run-a#2")])
    assert [e["evidence"]["experiment"] for e in applied] == ["run-a#1", "run-a#2"]
    assert [e["evidence"]["experiment"] for e in Store(tmp_path).all("claim_history")] == ["run-a#1", "run-a#2"]


def test_the_same_evidence_from_two_tuners_that_had_not_seen_each_other_counts_once(tmp_path: Path):
    first, second = Beliefs(Store(tmp_path)), Beliefs(Store(tmp_path))
    first.apply([confirm("P18", "run-a#1")])
    second.apply([confirm("P18", "run-a#1")])     # a replayed trial: the same experiment id
    assert Beliefs(Store(tmp_path)).get("P18").confidence == pytest.approx(7 / 9)


def test_an_update_for_an_unknown_claim_is_refused_and_nothing_is_written(tmp_path: Path):
    beliefs = Beliefs(Store(tmp_path))
    with pytest.raises(RecordError, match="NOPE"):
        beliefs.apply([confirm("P18", "run-a#1"), confirm("NOPE", "run-a#2")])
    assert Store(tmp_path).all("claim_history") == []
    assert beliefs.get("P18").evidence == ()


def _confirm_many(folder: str, tag: str, count: int, barrier) -> None:
    beliefs = Beliefs(Store(folder))
    barrier.wait()
    for i in range(count):
        beliefs.apply([confirm("P18", f"{tag}#{i}")], run=tag)


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_two_processes_confirming_one_claim_at_once_both_count(tmp_path: Path, method: str):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} here")
    context = multiprocessing.get_context(method)
    barrier = context.Barrier(2)
    count = 15
    workers = [context.Process(target=_confirm_many, args=(str(tmp_path), tag, count, barrier))
               for tag in ("run-a", "run-b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    claim = Beliefs(Store(tmp_path)).get("P18")
    assert len(claim.evidence) == 2 * count
    assert {e.experiment.split("#")[0] for e in claim.evidence} == {"run-a", "run-b"}
    assert claim.confidence == pytest.approx((6 + 2 * count) / (8 + 2 * count))


# -- learned claims -----------------------------------------------------------------------------------

def test_a_created_claim_is_stored_and_read_back(tmp_path: Path):
    learned = Claim(id="L-test", knob="dataloader_pin_memory", value=True, direction="helps", ratio=1.06,
                    condition=(), origin="learned", source="measured: run-a#4")
    beliefs = Beliefs(Store(tmp_path))
    beliefs.apply([Update("create", "L-test", "learned", children=(learned,)), confirm("L-test", "run-a#4", 1.06)])
    again = Beliefs(Store(tmp_path))
    claim = again.get("L-test")
    assert claim.origin == "learned" and claim.active and len(claim.evidence) == 1
    assert claim.confidence == pytest.approx(2 / 3)
    assert [c["id"] for c in again.export()["claims"]] == ["L-test"]   # what `kb export` shares


# -- split ----------------------------------------------------------------------------------------------

def split_beliefs(store: Store | None) -> Beliefs:
    """The checkpointing claim with results that help on long rows and hurt on short ones, then split."""
    beliefs = Beliefs(store, priors=[checkpointing()])
    beliefs.apply([Update("confirm" if outcome == "helps" else "weaken", "GC", f"r#{n}",
                          evidence=evidence(f"r#{n}", outcome, ratio, max_len=max_len))
                   for n, (max_len, outcome, ratio) in enumerate(SPLIT_RESULTS)])
    updates = restructure(beliefs.get("GC"), "r#5")
    assert [u.op for u in updates] == ["split"]
    beliefs.apply(updates)
    return beliefs


def children(beliefs: Beliefs) -> dict[str, Claim]:
    return {condition_text(c.condition): c for c in beliefs.claims() if c.parent == "GC"}


def test_a_split_retires_the_parent_and_its_children_inherit_the_evidence_under_their_conditions(tmp_path: Path):
    beliefs = split_beliefs(Store(tmp_path))
    parent = beliefs.get("GC")
    assert parent.status == "split" and not parent.active and "max_len" in parent.status_reason
    assert "GC" not in {c.id for c in beliefs.claims()}
    assert "GC" in {c.id for c in beliefs.claims(active_only=False)}
    kids = children(beliefs)
    assert set(kids) == {"max_len < 1536", "max_len >= 1536"}
    below, above = kids["max_len < 1536"], kids["max_len >= 1536"]
    assert (below.direction, above.direction) == ("hurts", "helps")
    assert [e.features["max_len"] for e in below.evidence] == [256, 512, 1024]
    assert [e.features["max_len"] for e in above.evidence] == [2048, 4096, 8192]
    # each child agrees with all that it inherited: it is surer than the parent was
    assert below.confidence == pytest.approx(4 / 5) and above.confidence == pytest.approx(4 / 5)
    assert below.confidence > parent.confidence
    assert beliefs.matching("gradient_checkpointing", True, False, {"max_len": 4096}) == [above]
    assert beliefs.matching("gradient_checkpointing", True, False, {"max_len": 512}) == [below]


def test_a_split_keeps_lineage_in_the_graph_and_the_history(tmp_path: Path):
    beliefs = split_beliefs(Store(tmp_path))
    below = children(beliefs)["max_len < 1536"]
    assert beliefs.lineage(below.id) == [below.id, "GC"]
    graph = beliefs.graph
    assert graph.edges[below.id, "GC"]["kind"] == "split_from"
    assert graph.nodes["GC"]["status"] == "split" and graph.nodes[below.id]["origin"] == "split"
    split_events = [e for e in beliefs.history("GC") if e["op"] == "split"]
    assert len(split_events) == 1 and set(split_events[0]["children"]) == {c.id for c in children(beliefs).values()}
    assert split_events[0] in beliefs.history(below.id)            # the event that created the child
    assert sum(e["op"] in ("confirm", "weaken") for e in beliefs.history("GC")) == 6


def test_a_split_reads_back_the_same_from_the_store(tmp_path: Path):
    beliefs = split_beliefs(Store(tmp_path))
    again = Beliefs(Store(tmp_path), priors=[checkpointing()])
    assert folded(again) == folded(beliefs)
    below = children(again)["max_len < 1536"]
    assert again.lineage(below.id) == [below.id, "GC"]
    assert [e.features["max_len"] for e in below.evidence] == [256, 512, 1024]


def test_applying_a_split_twice_changes_nothing(tmp_path: Path):
    beliefs = split_beliefs(Store(tmp_path))
    before = folded(beliefs)
    parent = beliefs.get("GC")
    assert beliefs.apply(restructure(replace(parent, status="active"), "r#5")) == []
    assert folded(beliefs) == before == folded(Beliefs(Store(tmp_path), priors=[checkpointing()]))


# -- delete ---------------------------------------------------------------------------------------------

def test_a_deleted_claim_stays_in_the_history_but_is_no_longer_believed(tmp_path: Path):
    beliefs = Beliefs(Store(tmp_path), priors=[checkpointing()])
    beliefs.apply([weaken("GC", f"r#{i}") for i in range(5)])
    (update,) = restructure(beliefs.get("GC"), "r#4")
    assert update.op == "delete"
    beliefs.apply([update])
    for view in (beliefs, Beliefs(Store(tmp_path), priors=[checkpointing()])):
        assert view.get("GC").status == "deleted"
        assert "GC" not in {c.id for c in view.claims()}
        assert view.matching("gradient_checkpointing", True, False, FEATURES) == []
        assert [e["op"] for e in view.history("GC")] == ["weaken"] * 5 + ["delete"]
        assert view.graph.nodes["GC"]["status"] == "deleted"


def test_a_cycle_of_parents_already_in_a_store_ends_the_lineage(tmp_path):
    """A store written before `kb import` refused cycles (or by hand): `kb show` must still return."""
    base = Beliefs(None).claims()[0].to_dict()
    definition = {k: v for k, v in base.items() if k not in ("confidence", "posterior", "expected_ratio", "evidence")}
    Store(tmp_path).extend("claims", [{**definition, "id": "C1", "parent": "C2", "origin": "learned"},
                                      {**definition, "id": "C2", "parent": "C1", "origin": "learned"}])
    beliefs = Beliefs(Store(tmp_path))
    assert beliefs.lineage("C1") == ["C1", "C2"] and beliefs.lineage("C2") == ["C2", "C1"]
