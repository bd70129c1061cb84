"""`autotune kb ...` over a knowledge base built by hand in tmp_path: no training, no device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli.main import main
from autotune.kb.beliefs import Beliefs, load_priors
from autotune.kb.claims import Evidence, Update
from autotune.kb.experience import Experience, Identity
from autotune.kb.store import Store
from autotune.reasoner.revise import find_split

IDENTITY = {"job_fingerprint": "job0123456789abc", "device_fingerprint": "dev0123456789abc",
            "software": {"torch": "2.4.0"}}


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["kb", *args])
    out, err = capsys.readouterr()
    return code, out, err


def evidence(n: int, outcome: str, max_len: int, ratio: float) -> Evidence:
    return Evidence(f"r@1#{n}", ratio, outcome, {"max_len": max_len})


def with_split(folder: Path) -> Beliefs:
    """P25 (gradient checkpointing hurts, no condition): hurts at max_len 512, helps at 4096, then split."""
    beliefs = Beliefs(Store(folder))
    results = [evidence(1, "hurts", 512, 0.8), evidence(2, "hurts", 512, 0.82),
               evidence(3, "helps", 4096, 1.2), evidence(4, "helps", 4096, 1.25)]
    beliefs.apply([Update("confirm" if e.outcome == "hurts" else "weaken", "P25", f"{e.experiment} measured",
                          evidence=e, run="r") for e in results])
    children = find_split(beliefs.get("P25"))
    assert children is not None and children[0].condition[-1].feature == "max_len"
    beliefs.apply([Update("split", "P25", "mixed evidence separates at max_len", children=children, run="r")])
    return beliefs


def record_run(folder: Path, run: str = "r1") -> str:
    run_id = f"{run}@20250101T000000-abcdef"
    store = Store(folder)
    job = {"run": run, "model": "tiny-qwen2", "max_len": 64, "effective_batch": 4, "method": "sft"}
    Experience(store).record_run(run_id, Identity(**IDENTITY), job, {"max_len": 64}, {}, {
        "baseline": {"knobs": {}, "samples_per_s": 12.5},
        "best": {"knobs": {"bf16": True}, "trial": 2, "speedup": 1.42},
        "trials": [{"trial": 0}, {"trial": 1}, {"trial": 2}], "trials_to_best": 2, "stop_reason": "budget"})
    store.extend("trials", [{"schema_version": 1, "run_id": run_id, "run": run, "trial": n, **IDENTITY,
                             "knobs": {}, "state": "complete"} for n in range(3)])
    return run_id


def test_list_shows_the_priors_of_an_empty_kb_and_json_parses(capsys, tmp_path):
    empty = tmp_path / "never-made"
    code, out, _ = run_cli(capsys, "list", "--kb", str(empty))
    assert code == 0 and all(f"{c.id} " in out for c in load_priors()) and "per_device_train_batch_size=up" in out
    assert not empty.exists()  # reading does not create the folder
    code, out, _ = run_cli(capsys, "list", "--json")  # $AUTOTUNE_KB, the isolated one
    claims = json.loads(out)
    assert code == 0 and len(claims) == len(load_priors()) and {"id", "confidence", "evidence", "status"} <= set(claims[0])
    code, out, _ = run_cli(capsys, "list", "--json", "--knob", "optim")
    assert {c["knob"] for c in json.loads(out)} == {"optim"}


def test_show_a_claim_with_evidence(capsys, isolated_kb):
    beliefs = Beliefs(Store(isolated_kb))
    beliefs.apply([Update("confirm", "P18", "bf16 measured", evidence=Evidence("r@1#3", 1.6, "helps", {})),
                   Update("weaken", "P18", "bf16 measured", evidence=Evidence("r@1#4", 0.97, "hurts", {}))])
    code, out, _ = run_cli(capsys, "show", "P18")
    assert code == 0
    for text in ("precision=bf16", "Beta(6, 2)", "Beta(7, 3)", "confidence:", "0.700", "source:",
                 "r@1#3  x1.600  helps    agrees", "r@1#4  x0.970  hurts    disagrees", "evidence (2, 1 agree)"):
        assert text in out, text
    code, out, _ = run_cli(capsys, "show", "P18", "--json")
    assert json.loads(out)["posterior"] == [7.0, 3.0]


def test_show_an_unknown_claim_is_one_line_and_exit_2(capsys):
    code, out, err = run_cli(capsys, "show", "NOPE")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "NOPE" in err and "autotune kb list" in err and "Traceback" not in err


def test_history_of_a_split_claim_and_its_child(capsys, isolated_kb):
    beliefs = with_split(isolated_kb)
    code, out, _ = run_cli(capsys, "history", "P25")
    assert code == 0 and "5 event(s)" in out
    ops = [line.split()[2] for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert ops == ["confirm", "confirm", "weaken", "weaken", "split"]
    assert "evidence r@1#3 x1.200 helps" in out
    child = next(c for c in beliefs.claims() if c.parent == "P25")
    code, out, _ = run_cli(capsys, "history", child.id)
    assert code == 0 and "split of P25 (created this claim)" in out
    code, out, _ = run_cli(capsys, "show", child.id)
    assert f"{child.id} <- P25" in out and "evidence (2, 2 agree)" in out
    code, out, _ = run_cli(capsys, "history", "P25", "--json")
    assert [e["op"] for e in json.loads(out)][-1] == "split"
    code, out, _ = run_cli(capsys, "list")
    assert "P25 " not in out and child.id in out  # the split parent is no longer active
    code, out, _ = run_cli(capsys, "list", "--all")
    assert "P25 " in out and "split" in out


def test_graph_writes_a_png(capsys, isolated_kb, tmp_path, monkeypatch):
    with_split(isolated_kb)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(capsys, "graph")
    png = tmp_path / "kb_graph.png"
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(png) in out and "nodes" in out and "edges" in out


def test_runs_lists_a_recorded_run(capsys, isolated_kb):
    code, out, _ = run_cli(capsys, "runs")
    assert code == 0 and "no runs recorded" in out
    run_id = record_run(isolated_kb)
    code, out, _ = run_cli(capsys, "runs")
    assert code == 0 and run_id in out and "tiny-qwen2" in out and "x1.42" in out and "12.500" in out
    code, out, _ = run_cli(capsys, "runs", "--json")
    assert [r["run_id"] for r in json.loads(out)] == [run_id]


def test_export_then_import_reproduces_the_claims_and_twice_adds_nothing(capsys, isolated_kb, tmp_path):
    with_split(isolated_kb)
    record_run(isolated_kb)
    exported = tmp_path / "out" / "kb.json"
    code, out, _ = run_cli(capsys, "export", str(exported))
    data = json.loads(exported.read_text())
    assert code == 0 and data["schema_version"] == 1 and len(data["claims"]) == 2 and len(data["runs"]) == 1
    assert len(data["claim_history"]) == 5 and len(data["trials"]) == 3

    other = tmp_path / "other"
    code, out, _ = run_cli(capsys, "import", str(exported), "--kb", str(other))
    assert code == 0 and "2 added" in out and "5 events applied" in out
    here, there = Beliefs(Store(isolated_kb)), Beliefs(Store(other))
    assert ({c.id: (c.status, round(c.confidence, 9), len(c.evidence)) for c in here.claims(False)}
            == {c.id: (c.status, round(c.confidence, 9), len(c.evidence)) for c in there.claims(False)})
    sizes = {t: len(Store(other).all(t)) for t in ("runs", "trials", "claims", "claim_history")}
    assert sizes == {"runs": 1, "trials": 3, "claims": 2, "claim_history": 5}

    code, out, _ = run_cli(capsys, "import", str(exported), "--kb", str(other))
    assert code == 0 and "0 added" in out and "0 events applied" in out
    assert {t: len(Store(other).all(t)) for t in sizes} == sizes


@pytest.mark.parametrize("content", [None, "not json {", '{"schema_version": 1, "claims": 3}', "[1, 2]",
                                     '{"schema_version": 1, "runs": [{"schema_version": 1, "run_id": "x"}]}',
                                     '{"schema_version": 1, "claims": [{"schema_version": 1, "id": "X"}]}'])
def test_import_of_a_bad_file_exits_2(capsys, isolated_kb, tmp_path, content):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    code, out, err = run_cli(capsys, "import", str(path))
    assert code == 2 and err.startswith("autotune: kb import:") and err.count("\n") == 1
    assert all(Store(isolated_kb).all(t) == [] for t in ("runs", "claims", "claim_history"))


def test_prune_deletes_a_claim_whose_evidence_all_disagrees(capsys, isolated_kb):
    beliefs = Beliefs(Store(isolated_kb))
    beliefs.apply([Update("weaken", "P01", "slower", evidence=Evidence(f"r@1#{n}", 0.9, "hurts", {"max_len": 512}))
                   for n in range(5)])
    code, out, _ = run_cli(capsys, "prune", "--dry-run")
    assert code == 0 and "would apply 1" in out and "delete P01" in out
    assert Beliefs(Store(isolated_kb)).get("P01").active
    code, out, _ = run_cli(capsys, "prune")
    assert code == 0 and "applied 1" in out and "delete P01" in out
    assert not Beliefs(Store(isolated_kb)).get("P01").active
    code, out, _ = run_cli(capsys, "list")
    assert "P01 " not in out
    code, out, _ = run_cli(capsys, "prune")
    assert "nothing to prune" in out


def kb_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_an_import_with_one_bad_run_writes_nothing_at_all(capsys, isolated_kb, tmp_path):
    with_split(isolated_kb)
    record_run(isolated_kb)
    exported = tmp_path / "kb.json"
    assert run_cli(capsys, "export", str(exported))[0] == 0
    data = json.loads(exported.read_text())
    new_claim = {**data["claims"][0], "id": "X-new", "parent": None, "origin": "imported"}
    data["claims"].append(new_claim)
    data["claim_history"].append({**data["claim_history"][0], "claim": "X-new", "children": []})
    data["runs"].append({**data["runs"][0], "run_id": "other@1", "baseline": {"samples_per_s": float("nan")}})
    exported.write_text(json.dumps(data))                 # json writes the NaN as NaN, which it reads back
    before = kb_bytes(isolated_kb)
    code, out, err = run_cli(capsys, "import", str(exported))
    assert code == 2 and err.count("\n") == 1 and "nothing was written" in err and "runs record" in err
    assert kb_bytes(isolated_kb) == before                 # claims.jsonl and every other file
    assert "X-new" not in Beliefs(Store(isolated_kb))


@pytest.mark.parametrize("where", ["claim id", "history run", "run name", "trial run_id"])
def test_ids_with_escape_bytes_are_refused_in_one_line_and_never_printed_raw(capsys, isolated_kb, tmp_path, where):
    with_split(isolated_kb)
    record_run(isolated_kb)
    exported = tmp_path / "kb.json"
    run_cli(capsys, "export", str(exported))
    data = json.loads(exported.read_text())
    hostile = "P25\x1b[2J\x1b]0;owned\x07"
    if where == "claim id":
        data["claims"][0]["id"] = hostile
    elif where == "history run":
        data["claim_history"][0]["run"] = hostile
    elif where == "run name":
        data["runs"][0]["run"] = hostile
    else:
        data["trials"][0]["run_id"] = hostile
    exported.write_text(json.dumps(data))
    other = tmp_path / "other"
    code, out, err = run_cli(capsys, "import", str(exported), "--kb", str(other))
    assert code == 2 and err.count("\n") == 1 and "printable" in err
    assert "\x1b" not in err + out and "\\x1b" in err
    assert all(not p.read_bytes() for p in other.glob("*.jsonl"))


def test_a_claim_text_with_escape_bytes_is_shown_escaped(capsys, isolated_kb):
    from autotune.kb.claims import Claim

    claim = Claim(id="L-text", knob="torch_compile", value=True, direction="helps", ratio=1.2,
                  statement="compile helps\x1b[31m red", origin="learned")
    Beliefs(Store(isolated_kb)).apply([Update("create", claim.id, "made\x1b[2J", children=(claim,))])
    for args in (("show", "L-text"), ("history", "L-text"), ("list", "--knob", "torch_compile")):
        code, out, err = run_cli(capsys, *args)
        assert code == 0 and "\x1b" not in out and "L-text" in out


def test_repair_dry_run_changes_nothing_and_repair_removes_only_the_torn_line(capsys, isolated_kb):
    record_run(isolated_kb)
    path = isolated_kb / "runs.jsonl"
    intact, torn = path.read_bytes(), b'{"id":2,"record":{"schema_ver'
    path.write_bytes(intact + torn)                                  # a writer killed mid-append
    code, out, err = run_cli(capsys, "runs")
    assert code == 1 and f"autotune kb repair --kb {isolated_kb}" in err and err.count("\n") == 1
    before = kb_bytes(isolated_kb)
    code, out, _ = run_cli(capsys, "repair", "--dry-run")
    assert code == 0 and "would remove torn line 2 of" in out and "nothing was changed" in out
    assert kb_bytes(isolated_kb) == before
    code, out, _ = run_cli(capsys, "repair")
    assert code == 0 and "removed torn line 2 of" in out and f"({len(torn)} bytes" in out
    assert path.read_bytes() == intact and len(Store(isolated_kb).all("runs")) == 1
    assert run_cli(capsys, "runs")[0] == 0
    code, out, _ = run_cli(capsys, "repair")
    assert code == 0 and "nothing to repair" in out
