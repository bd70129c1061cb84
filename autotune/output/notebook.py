"""Helpers for the notebooks in notebooks/: read a knowledge base into rows and figures.

The notebooks stay a few lines a cell; what needs testing lives here. Nothing here writes to the
knowledge base, and a folder that does not exist is read as "the shipped priors only", not created.
Figures are built on `matplotlib.figure.Figure`, not pyplot: `beliefs.draw` switches pyplot to Agg,
which would stop a kernel's inline display, so the notebooks show PNG bytes (`figure_png`) instead.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict, cast

from matplotlib.figure import Figure

from ..kb.beliefs import Beliefs, draw
from ..kb.claims import condition_text
from ..kb.folder import kb_folder
from ..kb.experience import Experience
from ..kb.rows import RunRow, TrialRow
from ..kb.store import Store

PRIOR = "prior"                       # the first column of a confidence-by-run table: before any run
RUN_PLOTS = ("progress.png", "breakdown.png", "memory.png")
COLOURS = {"baseline": "#555555", "keep": "#2e8b57", "discard": "#c0392b"}


def open_kb(folder: str | Path = "") -> tuple[Path, Store | None, Beliefs]:
    """The folder (autotune's default when empty), its store (None when the folder does not exist:
    reading must not create one) and the beliefs folded from it."""
    path = kb_folder(folder if isinstance(folder, str) else str(folder))
    store = Store(path) if path.is_dir() else None
    return path, store, Beliefs(store)


# ----------------------------------------------------------------------------------------- claims

class ClaimRow(TypedDict):
    """A claim as the notebooks' table shows it."""

    id: str
    change: str
    statement: str
    condition: str
    direction: str
    expected_ratio: float
    confidence: float
    evidence: int
    status: str
    origin: str
    parent: str


def claim_rows(beliefs: Beliefs) -> list[ClaimRow]:
    """One row per claim, split and deleted ones included (lineage needs them), most evidence first."""
    rows: list[ClaimRow] = []
    for claim in beliefs.claims(active_only=False):
        rows.append({"id": claim.id, "change": claim.change, "statement": claim.statement or "-",
                     "condition": condition_text(claim.condition) or "always", "direction": claim.direction,
                     "expected_ratio": round(claim.expected_ratio, 3), "confidence": round(claim.confidence, 3),
                     "evidence": len(claim.evidence), "status": claim.status, "origin": claim.origin,
                     "parent": claim.parent or ""})
    return sorted(rows, key=lambda r: (-r["evidence"], r["id"]))


def lineage_lines(beliefs: Beliefs) -> list[str]:
    """`child <- parent <- ...` for every claim with a parent, and `claim enables|conflicts change`."""
    lines = [" <- ".join(beliefs.lineage(c.id)) for c in beliefs.claims(active_only=False) if c.parent]
    lines += [f"{c.id} {kind} {change}" for c in beliefs.claims(active_only=False) for kind, change in c.relations]
    return lines


def graph_png(beliefs: Beliefs) -> bytes:
    """The belief graph as `autotune kb graph` draws it, as PNG bytes (drawn in a scratch folder)."""
    with tempfile.TemporaryDirectory() as scratch:
        return draw(beliefs, Path(scratch) / "graph.png").read_bytes()


@dataclass(frozen=True)
class ConfidenceByRun:
    runs: list[str]                       # PRIOR, then each run id in the order its events were applied
    confidence: dict[str, list[float]]    # claim id -> confidence after each entry of `runs` (nan: not yet)


def confidence_by_run(beliefs: Beliefs) -> ConfidenceByRun:
    """How each claim with evidence moved, run by run, replayed from the history.

    A claim's confidence depends only on its definition and its evidence, so the confidence after run
    k is the folded claim with only the evidence that had arrived by then: its own confirm/weaken
    events, and for a split's child the parent's evidence it inherited at the split.
    """
    runs: list[str] = [PRIOR]
    arrived: dict[str, dict[str, int]] = {}   # claim -> experiment -> index in runs where it arrived
    born: dict[str, int] = {}                 # claim -> index in runs where an event created it
    for event in beliefs.history():
        run = event.get("run") or "(no run)"  # an import or a hand-made event may carry none
        if run not in runs:
            runs.append(run)
        index = runs.index(run)
        evidence = event.get("evidence") or {}
        if event["op"] in ("confirm", "weaken") and evidence.get("experiment"):
            arrived.setdefault(event["claim"], {}).setdefault(evidence["experiment"], index)
        for child in event.get("children") or ():
            born.setdefault(child, index)
    confidence: dict[str, list[float]] = {}
    for claim in beliefs.claims(active_only=False):
        if not claim.evidence:
            continue
        start = born.get(claim.id, 0)
        own = arrived.get(claim.id, {})
        series = []
        for index in range(len(runs)):
            if index < start:
                series.append(math.nan)
                continue
            # Inherited evidence has no event of its own: it arrived when the claim was born.
            seen = tuple(e for e in claim.evidence if own.get(e.experiment, start) <= index)
            series.append(replace(claim, evidence=seen).confidence)
        confidence[claim.id] = series
    return ConfidenceByRun(runs, confidence)


def run_labels(runs: list[str]) -> list[str]:
    """Tick labels: a run id is `name@time-hex`; its name says enough unless two runs share it."""
    names = [r.split("@")[0] for r in runs]
    return [name if names.count(name) == 1 else run for name, run in zip(names, runs)]


def confidence_figure(data: ConfidenceByRun) -> Figure:
    """One line per claim with evidence across the runs, so a claim that a run changed shows a step."""
    figure = Figure(figsize=(10, 4.5))
    axes = figure.subplots()
    x = list(range(len(data.runs)))
    for claim_id, series in sorted(data.confidence.items()):
        axes.plot(x, series, marker="o", label=claim_id)
    if not data.confidence:
        axes.text(0.5, 0.5, "no claim has evidence yet", ha="center", va="center", transform=axes.transAxes)
    else:
        axes.legend(fontsize=7, ncol=max(1, len(data.confidence) // 12), loc="center left", bbox_to_anchor=(1, 0.5))
    axes.set_xticks(x, run_labels(data.runs), rotation=20, ha="right", fontsize=8)
    axes.set_ylim(0, 1)
    axes.set_ylabel("confidence (Beta mean)")
    axes.set_title("confidence of each claim with evidence, after each run")
    figure.tight_layout()
    return figure


def figure_png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


# ------------------------------------------------------------------------------------------- runs

class RunName(TypedDict):
    """A run the knowledge base holds trials of but no run record (killed before its end)."""

    run_id: str
    run: str


def find_run(store: Store | None, wanted: str = "") -> RunRow | RunName | None:
    """The run record whose run_id or run name is `wanted` (the latest of that name), or the latest
    run when `wanted` is empty. A run killed before its end has trials but no run record: it is
    found from its trials, as {"run_id", "run"}."""
    if store is None:
        return None
    experience = Experience(store)
    runs = experience.runs()
    if not wanted:
        return runs[-1] if runs else None
    matches = [r for r in runs if wanted in (r.get("run_id"), r.get("run"))]
    if matches:
        return matches[-1]
    trials = [t for t in experience.trials() if wanted in (t.get("run_id"), t.get("run"))]
    return {"run_id": trials[-1]["run_id"], "run": trials[-1]["run"]} if trials else None


def _peak_mib(trial: TrialRow) -> float | None:
    peaks = [(m.get("peak_memory") or {}).get("bytes") for m in trial.get("measurements") or []]
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return round(max(peaks) / 2**20, 1) if peaks else None


class TrialLine(TypedDict):
    """A trial as the notebooks' table and figure show it."""

    trial: int
    change: str
    state: str
    decision: str
    samples_per_s: float | None
    ratio: float | None
    peak_memory_mib: float | None
    reason: str


def trial_rows(store: Store, run_id: str) -> list[TrialLine]:
    """The run's trials as recorded in the knowledge base, in trial order."""
    found = cast("list[TrialRow]", store.search("trials", run_id=run_id))  # experience.py's rows (kb/rows.py)
    trials = sorted(found, key=lambda t: t["trial"])
    return [{"trial": t["trial"], "change": t.get("change") or "(baseline)", "state": t["state"],
             "decision": t["decision"], "samples_per_s": t.get("samples_per_s"), "ratio": t.get("ratio"),
             "peak_memory_mib": _peak_mib(t), "reason": t.get("reason", "")} for t in trials]


def trials_figure(rows: list[TrialLine], title: str = "") -> Figure:
    """samples/s per trial, coloured by decision; a trial without a measurement is an x on the axis."""
    figure = Figure(figsize=(9, 4.5))
    axes = figure.subplots()
    for row in rows:
        speed = row["samples_per_s"]
        if speed is None:
            axes.scatter(row["trial"], 0, marker="x", color="black")
            axes.annotate(row["state"], (row["trial"], 0), textcoords="offset points", xytext=(0, 6),
                          ha="center", fontsize=7)
        else:
            axes.scatter(row["trial"], speed, color=COLOURS.get(row["decision"], "#3b6fb6"), s=36, zorder=3)
            # The change beside its point: trial numbers alone send the reader back to the table.
            axes.annotate(row["change"], (row["trial"], speed), textcoords="offset points", xytext=(4, 4),
                          fontsize=7, rotation=20)
    for decision, colour in COLOURS.items():
        axes.scatter([], [], color=colour, label=decision)
    # From zero, with room above the fastest point and beside the last one for their labels.
    axes.set_ylim(0, 1.3 * max([r["samples_per_s"] or 0.0 for r in rows], default=0.0) or 1.0)
    axes.margins(x=0.12)
    axes.set_xticks([r["trial"] for r in rows])
    axes.set_xlabel("trial")
    axes.set_ylabel("samples/s")
    axes.set_title(title or "samples/s per trial (x: ended without a measurement)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


def run_folder(run: RunRow | RunName, folder: str | Path = "") -> Path:
    """The run's folder: `folder` when given, else where `autotune tune` puts it ($AUTOTUNE_RUNS or runs/)."""
    if folder:
        return Path(folder).expanduser()
    return Path(os.environ.get("AUTOTUNE_RUNS", "runs")).expanduser() / str(run.get("run", ""))


def run_plots(folder: Path) -> list[Path]:
    """The run's PNGs that exist, in the order the report shows them."""
    return [folder / name for name in RUN_PLOTS if (folder / name).is_file()]
