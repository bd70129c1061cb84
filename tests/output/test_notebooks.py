"""The notebooks in notebooks/, executed against a knowledge base that real tuner runs filled, and the
helpers in autotune/output/notebook.py they are built on.

The runs cost no device time (TableExecutor answers from a table); each notebook is executed once per
knowledge base (a kernel start is seconds), and the tests read what a user would see in its outputs.
"""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path

import nbformat
import pytest
from conftest import tiny_job
from nbclient import NotebookClient
from tests.loop.test_tuner import TableExecutor

from autotune.output import notebook as nb
from autotune.kb.beliefs import Beliefs
from autotune.kb.claims import Claim, Evidence, Update, parse_condition
from autotune.kb.store import Store
from autotune.output.report import best_config, write_report
from autotune.loop.tuner import Tuner

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
PADDING_FREE = ("padding", "padding_free")


# ------------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> dict:
    """Two tuner runs into one knowledge base: padding_free helps in the first and hurts in the second,
    so the claims they test get evidence from both runs and the history has events of each."""
    root = tmp_path_factory.mktemp("notebooks")
    kb = root / "kb"
    records = {}
    for run, factors in (("first", {PADDING_FREE: 2.0}),
                         ("second", {PADDING_FREE: 0.8, ("per_device_train_batch_size", 2): 1.5})):
        # `fresh`: the same job on the same device would otherwise replay the first run's trials,
        # which adds no evidence.
        tuner = Tuner(tiny_job(kb=str(kb), max_trials=5, run=run), TableExecutor(factors), root / "runs",
                      fresh=run == "second")
        outcome = tuner.run()
        write_report(tuner.folder, tuner.job, outcome, best_config(tuner.job, outcome.best.knobs))
        records[run] = outcome.records
    return {"kb": kb, "runs": root / "runs", "records": records}


def execute(name: str, **parameters: str) -> dict[str, nbformat.NotebookNode]:
    """Run a notebook with its parameters set (a cell after the `parameters` one, as papermill does);
    returns its cells by id. A cell that raises fails the test (CellExecutionError)."""
    book = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    at = next(i for i, c in enumerate(book.cells) if "parameters" in c.metadata.get("tags", ()))
    book.cells.insert(at + 1, nbformat.v4.new_code_cell(
        "\n".join(f"{key} = {value!r}" for key, value in parameters.items()), id="injected-parameters"))
    NotebookClient(book, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    return {cell.id: cell for cell in book.cells}


@pytest.fixture(scope="module")
def overview(tuned) -> dict:
    return execute("kb_overview", KB=str(tuned["kb"]))


@pytest.fixture(scope="module")
def explorer(tuned) -> dict:
    # RUN left empty: the latest run, "second".
    return execute("run_explorer", KB=str(tuned["kb"]), RUN_FOLDER=str(tuned["runs"] / "second"))


def text(cell: nbformat.NotebookNode) -> str:
    """Everything a cell printed or displayed as text (tables as their HTML)."""
    parts = []
    for output in cell.outputs:
        parts.append(output.get("text", ""))
        data = output.get("data", {})
        parts.append(data.get("text/html") or data.get("text/plain", ""))
    return "\n".join(parts)


def images(cell: nbformat.NotebookNode) -> list[bytes]:
    return [base64.b64decode(o["data"]["image/png"]) for o in cell.outputs if "image/png" in o.get("data", {})]


def table_row(html: str, key: str) -> dict[str, str]:
    """One row of a displayed DataFrame, by its index value: column -> cell text."""
    header = re.search(r"<thead>.*?<tr[^>]*>(.*?)</tr>", html, re.S).group(1)
    columns = [re.sub(r"<.*?>", "", c).strip() for c in re.findall(r"<th[^>]*>(.*?)</th>", header, re.S)][1:]
    row = re.search(rf"<tr>\s*<th>{re.escape(key)}</th>(.*?)</tr>", html, re.S)
    assert row, f"no row {key!r} in the table"
    return dict(zip(columns, [c.strip() for c in re.findall(r"<td>(.*?)</td>", row.group(1), re.S)]))


# ------------------------------------------------------------------------------------- kb_overview

def test_overview_lists_the_claims_the_runs_gave_evidence_with_its_count(tuned, overview):
    beliefs = Beliefs(Store(tuned["kb"]))
    padding = next(c for c in beliefs.claims() if c.change == "padding=padding_free" and c.evidence)
    runs = {e["run"].split("@")[0] for e in beliefs.history(padding.id)}
    assert runs == {"first", "second"}  # the claim moved in both runs
    row = table_row(text(overview["claims"]), padding.id)
    assert row["evidence"] == str(len(padding.evidence)) and len(padding.evidence) >= 2
    assert row["origin"] == "prior" and row["status"] == "active" and row["direction"] == "helps"
    assert float(row["confidence"]) == pytest.approx(padding.confidence, abs=1e-3)
    learned = next(c for c in beliefs.claims() if c.origin == "learned")
    assert table_row(text(overview["claims"]), learned.id)["origin"] == "learned"
    assert f"{padding.id} ({len(padding.evidence)} results)" in text(overview["claims"])


def test_overview_draws_the_belief_graph_and_lists_its_relations(overview):
    [graph] = images(overview["graph"])
    assert graph[:8] == PNG and len(graph) > 20_000
    assert "enables per_device_train_batch_size=up" in text(overview["graph"])


def test_overview_plots_confidence_after_each_run(tuned, overview):
    [plot] = images(overview["confidence"])
    assert plot[:8] == PNG and len(plot) > 10_000
    beliefs = Beliefs(Store(tuned["kb"]))
    moves = nb.confidence_by_run(beliefs)
    assert nb.run_labels(moves.runs) == ["prior", "first", "second"]
    padding = next(c for c in beliefs.claims() if c.change == "padding=padding_free" and c.evidence)
    row = table_row(text(overview["confidence"]), padding.id)
    assert list(row) == ["prior", "first", "second"]
    confidence = [float(v) for v in row.values()]
    assert confidence == pytest.approx(moves.confidence[padding.id], abs=1e-3)
    assert confidence[1] > confidence[0] > confidence[2]  # helped in the first run, hurt in the second


def test_overview_runs_on_a_knowledge_base_with_only_the_priors(isolated_kb):
    cells = execute("kb_overview", KB=str(isolated_kb))
    assert "0 history events, 0 runs" in text(cells["load"])
    assert "0 claim(s) with evidence: none yet" in text(cells["claims"])
    assert table_row(text(cells["claims"]), "P01")["origin"] == "prior"
    assert images(cells["graph"]) and images(cells["confidence"])
    assert "no claim has evidence yet" in text(cells["confidence"])


# ------------------------------------------------------------------------------------ run_explorer

def test_explorer_shows_the_latest_runs_trials_and_plots(tuned, explorer):
    assert "run second (second@" in text(explorer["load"])
    shown = text(explorer["trials"])
    tried = [r["change"] for r in tuned["records"]["second"] if r["trial"] > 0]
    assert f"tried: {', '.join(tried)}" in shown
    for record in tuned["records"]["second"]:
        row = table_row(shown, str(record["trial"]))
        assert row["change"] == (record["change"] or "(baseline)") and row["decision"] == record["decision"]
    assert "kept:  per_device_train_batch_size=2" in shown
    [plot] = images(explorer["trials-plot"])
    assert plot[:8] == PNG
    pngs = sorted(p.name for p in (tuned["runs"] / "second").glob("*.png"))
    assert {"progress.png", "memory.png"} <= set(pngs)
    assert [p[:8] for p in images(explorer["plots"])] == [PNG] * len(pngs)
    assert all(name in text(explorer["plots"]) for name in pngs)


# ---------------------------------------------------------------------------- autotune/output/notebook.py

def test_open_kb_reads_a_missing_folder_as_the_priors_without_creating_it(tmp_path):
    folder, store, beliefs = nb.open_kb(tmp_path / "none")
    assert store is None and not folder.exists()
    assert {r["origin"] for r in nb.claim_rows(beliefs)} == {"prior"}
    assert nb.confidence_by_run(beliefs) == nb.ConfidenceByRun(["prior"], {})
    assert nb.find_run(store) is None


def test_confidence_by_run_replays_evidence_and_splits_in_order():
    parent = Claim("C", "padding", "padding_free", "helps", 1.5)
    long_rows = Claim("C-long", "padding", "padding_free", "helps", 1.5, condition=parse_condition("max_len >= 512"),
                      parent="C", origin="split")
    short_rows = Claim("C-short", "padding", "padding_free", "hurts", 0.9, condition=parse_condition("max_len < 512"),
                       parent="C", origin="split")
    beliefs = Beliefs(priors=[parent])

    def seen(experiment: str, outcome: str, max_len: int) -> Evidence:
        return Evidence(experiment, 1.6 if outcome == "helps" else 0.8, outcome, {"max_len": max_len})

    beliefs.apply([Update("confirm", "C", "", seen("r1#1", "helps", 1024)),
                   Update("weaken", "C", "", seen("r1#2", "hurts", 128)),
                   Update("confirm", "C", "", seen("r1#3", "helps", 2048))], run="r1@1")
    beliefs.apply([Update("split", "C", "mixed", children=(long_rows, short_rows))], run="r2@2")
    beliefs.apply([Update("confirm", "C-long", "", seen("r3#1", "helps", 4096))], run="r3@3")
    moves = nb.confidence_by_run(beliefs)
    assert moves.runs == ["prior", "r1@1", "r2@2", "r3@3"] and nb.run_labels(moves.runs) == ["prior", "r1", "r2", "r3"]
    assert moves.confidence["C"] == pytest.approx([0.5, 0.6, 0.6, 0.6])  # Beta(1+2, 1+1) after r1, then retired
    long_, short = moves.confidence["C-long"], moves.confidence["C-short"]
    assert math.isnan(long_[1]) and long_[2:] == pytest.approx([3 / 4, 4 / 5])  # inherits r1#1, r1#3 at the split
    assert math.isnan(short[1]) and short[2:] == pytest.approx([2 / 3, 2 / 3])  # inherits r1#2, which agrees
    assert "C-long <- C" in nb.lineage_lines(beliefs)
    rows = {r["id"]: r for r in nb.claim_rows(beliefs)}
    assert rows["C"]["status"] == "split" and rows["C-short"]["parent"] == "C" and rows["C-long"]["evidence"] == 3
    assert nb.figure_png(nb.confidence_figure(moves))[:8] == PNG


def test_find_run_by_name_id_or_latest_and_its_trial_rows(tuned, tmp_path):
    store = Store(tuned["kb"])
    first = nb.find_run(store, "first")
    assert nb.find_run(store)["run"] == "second" and nb.find_run(store, first["run_id"]) == first
    assert nb.find_run(store, "never") is None
    rows = nb.trial_rows(store, first["run_id"])
    assert [r["change"] for r in rows] == [r["change"] or "(baseline)" for r in tuned["records"]["first"]]
    assert rows[0]["peak_memory_mib"] == 1024.0 and rows[1]["decision"] == "keep"
    assert nb.figure_png(nb.trials_figure(rows))[:8] == PNG
    assert nb.run_folder(first, tmp_path) == tmp_path
    assert nb.run_folder(first).parts[-1] == "first"
    # A run killed before its end has trials and no run record: it is still found.
    killed = Store(tmp_path / "kb")
    killed.append("trials", {"schema_version": 1, "run_id": "k@1", "run": "k", "trial": 0})
    assert nb.find_run(killed, "k") == {"run_id": "k@1", "run": "k"}


def test_explorer_says_so_when_the_knowledge_base_has_no_run(isolated_kb):
    cells = execute("run_explorer", KB=str(isolated_kb))
    assert f"no run recorded in {isolated_kb}: nothing to show" in text(cells["load"])
    assert not any(cells[i].outputs for i in ("trials", "trials-plot", "plots"))
