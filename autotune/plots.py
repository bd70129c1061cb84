"""The run's plots (PNG, in the run folder, linked from report.md): what people would rather see than read.

- `progress.png`: samples/s of every trial, kept and discarded marked, failed trials on the axis, the
  best so far as a step line, and the baseline's A/A noise band;
- `breakdown.png`: where the time goes, baseline against best;
- `memory.png`: peak memory of every trial against the memory limit and the worst-case readings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PHASES = ("data_wait_share", "forward_share", "backward_share", "optimizer_share", "other_share")
COLOURS = {"baseline": "#555555", "keep": "#2e8b57", "discard": "#c0392b"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def progress(records: list[dict[str, Any]], noise_floor: float, path: Path) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 4.5))
    baseline = records[0]["samples_per_s"] or 0.0
    axes.axhspan(baseline * (1 - noise_floor), baseline * (1 + noise_floor), color="#dddddd",
                 label=f"baseline noise band (±{noise_floor:.1%})")
    best, steps = baseline, []
    for record in records:
        speed = record["samples_per_s"]
        if record["decision"] == "keep" and speed:
            best = speed
        steps.append(best)
        if speed is None:
            axes.scatter(record["trial"], 0, marker="x", color="black")
            axes.annotate(record["state"], (record["trial"], 0), textcoords="offset points", xytext=(0, 6),
                          ha="center", fontsize=7)
            continue
        axes.scatter(record["trial"], speed, color=COLOURS[record["decision"]], zorder=3, s=36)
    axes.step([r["trial"] for r in records], steps, where="post", color="#2e8b57", alpha=0.6, label="best so far")
    for decision, colour in COLOURS.items():
        axes.scatter([], [], color=colour, label=decision)
    axes.set_xlabel("trial")
    axes.set_ylabel("samples/s")
    axes.set_title("samples/s per trial (x: ended without a measurement); keep or discard is decided by "
                   "interleaved runs beside the incumbent, not by these medians", fontsize=9)
    axes.legend(fontsize=8, loc="best")
    axes.set_xticks([r["trial"] for r in records])
    return _save(plt, figure, path)


def breakdown(baseline: dict[str, Any] | None, best: dict[str, Any] | None, path: Path) -> Path | None:
    rows = [(label, shares) for label, shares in (("baseline", baseline), ("best", best)) if shares]
    if not rows:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 2.6))
    for index, (label, shares) in enumerate(rows):
        left = 0.0
        for phase in PHASES:
            width = shares.get(phase) or 0.0
            axes.barh(index, width, left=left, label=phase.replace("_share", "") if index == 0 else None)
            left += width
    axes.set_yticks(range(len(rows)), [label for label, _ in rows])
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of a step's time")
    axes.legend(fontsize=8, ncol=len(PHASES), loc="upper center", bbox_to_anchor=(0.5, -0.35))
    axes.set_title("where the time goes")
    return _save(plt, figure, path)


def memory(records: list[dict[str, Any]], limit: int | None, path: Path) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 4))
    mib = 2**20
    for record in records:
        if record.get("peak_memory_bytes"):
            axes.bar(record["trial"], record["peak_memory_bytes"] / mib, color=COLOURS[record["decision"]], alpha=0.8)
        ceiling = record.get("ceiling")
        if ceiling and ceiling.get("bytes"):
            axes.scatter(record["trial"], ceiling["bytes"] / mib, marker="_", s=300, color="black", zorder=3)
    if limit:
        axes.axhline(limit / mib, color="#c0392b", linestyle="--", label="memory limit (less the margin)")
    axes.scatter([], [], marker="_", s=300, color="black", label="worst-case batch")
    axes.set_xlabel("trial")
    axes.set_ylabel("MiB")
    axes.set_title("peak memory per trial")
    axes.legend(fontsize=8)
    axes.set_xticks([r["trial"] for r in records])
    return _save(plt, figure, path)


def _save(plt: Any, figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_plots(folder: Path, outcome: Any) -> list[Path]:
    """The three plots of a run; returns the files written."""
    records = outcome.records
    limit = (outcome.frame.get("ceiling") or {}).get("limit_bytes")
    written = [progress(records, outcome.noise_floor, folder / "progress.png"),
               memory(records, limit, folder / "memory.png")]
    shares = breakdown(outcome.frame.get("breakdown"), (outcome.best_measurement or {}).get("breakdown"),
                       folder / "breakdown.png")
    return written + ([shares] if shares else [])
