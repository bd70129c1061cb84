"""Live progress while trials run, and the final table (rich)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

DECISION_STYLE = {"keep": "bold green", "discard": "dim", "baseline": "cyan"}


class Progress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.status = None
        self.started = time.monotonic()

    def _elapsed(self) -> str:
        return f"[{time.monotonic() - self.started:5.0f}s]"

    def running(self, trial: int | None, label: str) -> None:
        text = f"{self._elapsed()} {'trial ' + str(trial) + ': ' if trial else ''}{label}"
        if self.status is None:
            self.status = self.console.status(text)
            self.status.start()
        else:
            self.status.update(text)

    def finished(self, record: dict[str, Any]) -> None:
        speed = f"{record['samples_per_s']:.3f} samples/s" if record["samples_per_s"] else record["state"]
        ratio = f" x{record['ratio']:.3f}" if record.get("ratio") else ""
        style = DECISION_STYLE.get(record["decision"], "")
        change = record["change"] or "baseline"
        self.console.print(f"{self._elapsed()} #{record['trial']:<3} {change:<40} {speed}{ratio}  "
                           f"[{style}]{record['decision']}[/{style}]  {record['reason']}", highlight=False)

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def final_table(self, outcome: Any, folder: str) -> None:
        self.close()
        table = Table(title=f"autotune: {len(outcome.records) - 1} trials, stopped: {outcome.stop_reason}")
        for column in ("#", "change", "state", "decision", "samples/s", "ratio", "peak MiB"):
            table.add_column(column, justify="right" if column in ("#", "samples/s", "ratio", "peak MiB") else "left")
        for r in outcome.records:
            peak = r.get("peak_memory_bytes")
            style = DECISION_STYLE.get(r["decision"], "")
            table.add_row(str(r["trial"]), r["change"] or "baseline", r["state"], f"[{style}]{r['decision']}[/{style}]",
                          f"{r['samples_per_s']:.3f}" if r["samples_per_s"] else "-",
                          f"{r['ratio']:.3f}" if r["ratio"] else "-", f"{peak / 2**20:.0f}" if peak else "-")
        self.console.print(table)
        baseline, best = outcome.baseline["samples_per_s"], outcome.best_speed
        self.console.print(f"baseline {baseline:.3f} samples/s -> best {best:.3f} samples/s "
                           f"([bold]x{outcome.speedup:.2f}[/bold] by interleaved comparisons); "
                           f"report: {folder}/report.md", highlight=False)
