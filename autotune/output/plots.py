"""The run's plots (PNG, in the run folder, linked from report.md): what people would rather see than read.

- `progress.png`: samples/s of every trial, kept and discarded marked, failed trials on the axis, the
  best so far as a step line, and the baseline's A/A noise band;
- `breakdown.png`: where the time goes, baseline against best;
- `memory.png`: peak memory of every trial against the memory limit and the worst-case readings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..config.records import TrialRecord
from ..config.types import JsonObject

PHASES = ("data_wait_share", "forward_share", "backward_share", "optimizer_share", "other_share")
# One colour per phase, the same in every bar: matplotlib's cycle would give each bar new ones.
PHASE_COLOURS = ("#8e9aaf", "#4c72b0", "#dd8452", "#55a868", "#c44e52")
COLOURS = {"baseline": "#555555", "keep": "#2e8b57", "discard": "#c0392b"}
# Bars this far below the limit would be invisible on a linear axis.
LOG_SCALE_BELOW = 0.05


def _pyplot() -> Any:
    from ..util.extras import need

    matplotlib = need("matplotlib", "the run's plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def progress(records: Sequence[TrialRecord], noise_floor: float, path: Path) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 4.5))
    baseline = records[0].samples_per_s or 0.0
    axes.axhspan(baseline * (1 - noise_floor), baseline * (1 + noise_floor), color="#dddddd",
                 label=f"baseline noise band (±{noise_floor:.1%})")
    best, steps = baseline, []
    for record in records:
        speed = record.samples_per_s
        if record.decision == "keep" and speed:
            best = speed
        steps.append(best)
        if speed is None:
            axes.scatter(record.trial, 0, marker="x", color="black")
            axes.annotate(record.state, (record.trial, 0), textcoords="offset points", xytext=(0, 6),
                          ha="center", fontsize=7)
            continue
        axes.scatter(record.trial, speed, color=COLOURS[record.decision], zorder=3, s=36)
        if record.decision == "keep":
            axes.annotate(record.change, (record.trial, speed), textcoords="offset points", xytext=(4, 6),
                          fontsize=7, color=COLOURS["keep"])
    axes.step([r.trial for r in records], steps, where="post", color="#2e8b57", alpha=0.6, label="best so far")
    for decision, colour in COLOURS.items():
        axes.scatter([], [], color=colour, label=decision)
    axes.set_xlabel("trial")
    axes.set_ylabel("samples/s")
    axes.set_title("samples/s per trial")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.set_xticks([r.trial for r in records])
    axes.set_ylim(bottom=0)
    figure.text(0.01, 0.01, "x on the axis: the trial ended without a measurement. Keep or discard is decided by "
                "interleaved runs beside the incumbent, not by these medians.", fontsize=7, color="#555555")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    return _save(plt, figure, path, layout=False)


def breakdown(baseline: JsonObject | None, best: JsonObject | None, path: Path) -> Path | None:
    """`baseline`, `best`: measurements' `breakdown` (each phase's share of a step), where profiled."""
    rows = [(label, shares) for label, shares in (("baseline", baseline), ("best", best)) if shares]
    if not rows:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 2.6))
    for index, (_, shares) in enumerate(rows):
        left = 0.0
        for phase, colour in zip(PHASES, PHASE_COLOURS):
            width = shares.get(phase) or 0.0
            axes.barh(index, width, left=left, color=colour,
                      label=phase.replace("_share", "").replace("_", " ") if index == 0 else None)
            if width >= 0.06:
                axes.text(left + width / 2, index, f"{width:.0%}", ha="center", va="center", fontsize=8, color="white")
            left += width
    labels = [f"{label}\n{shares['step_s'] * 1000:.0f} ms/step" if shares.get("step_s") else label
              for label, shares in rows]
    axes.set_yticks(range(len(rows)), labels)
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of a step's time")
    axes.legend(fontsize=8, ncol=len(PHASES), loc="upper center", bbox_to_anchor=(0.5, -0.35))
    axes.set_title("where the time goes")
    return _save(plt, figure, path)


def memory(records: Sequence[TrialRecord], limit: int | None, path: Path) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 4))
    mib = 2**20
    peaks = [r["peak_memory_bytes"] for r in records if r.get("peak_memory_bytes")]
    for record in records:
        if record.get("peak_memory_bytes"):
            value = record["peak_memory_bytes"] / mib
            axes.bar(record.trial, value, color=COLOURS[record.decision], alpha=0.8)
            axes.annotate(f"{value:.0f}", (record.trial, value), textcoords="offset points", xytext=(0, 2),
                          ha="center", fontsize=7)
        ceiling = record.get("ceiling")
        if ceiling and ceiling.get("bytes"):
            axes.scatter(record.trial, ceiling["bytes"] / mib, marker="_", s=300, color="black", zorder=3)
    if limit:
        axes.axhline(limit / mib, color="#c0392b", linestyle="--", label="memory limit (less the margin)")
    axes.scatter([], [], marker="_", s=300, color="black", label="worst-case batch")
    axes.set_xlabel("trial")
    log = bool(limit and peaks and max(peaks) < LOG_SCALE_BELOW * limit)
    if log:
        axes.set_yscale("log")
    axes.set_ylabel("MiB (log scale)" if log else "MiB")
    axes.set_title("peak memory per trial" + (f" (limit {limit / mib:,.0f} MiB)" if limit else ""))
    axes.legend(fontsize=8)
    axes.set_xticks([r.trial for r in records])
    return _save(plt, figure, path)


def _save(plt: Any, figure: Any, path: Path, layout: bool = True) -> Path:
    if layout:
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
    shares = breakdown(outcome.frame.get("breakdown"), (outcome.best_measurement.breakdown if outcome.best_measurement else None),
                       folder / "breakdown.png")
    return written + ([shares] if shares else [])
