"""Live progress while trials run, and the final table (rich).

On a terminal a live line shows the trial (of how many), what is measured now, the time spent and
the best so far, with one line printed per finished trial above it. When output is not a terminal
(a log file, nohup, CI) nothing live is drawn: no spinner, no redraws, no colour codes, only the
plain line per finished trial and the final table.
"""

from __future__ import annotations

import errno
import logging
import time
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.table import Table

from ..config.records import RecordLike, Source, typed
from .documents import LlmCall

DECISION_STYLE = {"keep": "bold green", "discard": "dim", "baseline": "cyan"}


class _Console(Console):
    """rich's Console, whose closed stdout is Python's BrokenPipeError: rich's own answer is SystemExit(1),
    an exit 1 with no line, where the command's other writes end in the quiet exit of a reader gone."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written through it (the Live's last refresh included)
        raise BrokenPipeError(errno.EPIPE, "the reader of stdout has gone")


def new_console(**options: Any) -> Console:
    """The console every command prints through (tables, progress, suggestions)."""
    return _Console(**options)


def shown(value: Any) -> str:
    """Text from a record, a script or the user as printed: control characters escaped (an escape code a
    crashing script wrote, or one given in gpu=, is shown, never sent to the terminal) and rich markup
    quoted (`[bold]` in a reason is text, and `[/x]` no error)."""
    text = str(value)
    return escape(text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text))


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    def __init__(self, console: Console | None = None, max_trials: int | None = None,
                 time_budget_s: float | None = None) -> None:
        if console is None:
            console = new_console()
            if not console.is_terminal:
                # A log has no width: 80 columns would cut the table's changes and wrap every line.
                console = new_console(width=160)
        self.console = console
        self.max_trials, self.time_budget_s = max_trials, time_budget_s
        self.started = time.monotonic()
        self.live: Live | None = None
        self.trial: int | None = None
        self.label = ""
        self.spinner = Spinner("dots")
        self.baseline: float | None = None
        self.best: float | None = None
        self.best_trial = 0
        self.speedup = 1.0

    @property
    def interactive(self) -> bool:
        return self.console.is_terminal

    def _elapsed(self) -> str:
        return f"[{time.monotonic() - self.started:5.0f}s]"

    def status_line(self) -> str:
        """trial i of n, what runs now, time spent (of the budget), best so far."""
        parts = []
        if self.trial:
            parts.append(f"trial {self.trial}" + (f" of {self.max_trials}" if self.max_trials else ""))
        parts.append(shown(self.label))
        elapsed = _duration(time.monotonic() - self.started)
        parts.append(f"{elapsed} of {_duration(self.time_budget_s)}" if self.time_budget_s else elapsed)
        if self.best is not None:
            parts.append(f"best x{self.speedup:.2f} ({self.best:.3f} samples/s, "
                         + (f"trial {self.best_trial})" if self.best_trial else "baseline)"))
        return " · ".join(parts)

    def __rich__(self) -> RenderableType:
        # Rendered on every refresh, so the elapsed time moves while a trial runs.
        self.spinner.update(text=self.status_line())
        return self.spinner

    def running(self, trial: int | None, label: str) -> None:
        self.trial, self.label = trial or self.trial, label
        if not self.interactive:
            return
        if self.live is None:
            self.live = Live(self, console=self.console, refresh_per_second=4, transient=True)
            self.live.start()

    def finished(self, stored: RecordLike) -> None:
        """A trial's line; `stored`: its record as the tuner appended it, or as `resume` read it back."""
        record = typed([stored])[0]
        if record.decision == "baseline":
            self.baseline = self.best = record.samples_per_s
        elif record.decision == "keep" and record.ratio:
            self.speedup *= record.ratio
            self.best, self.best_trial = record.samples_per_s, record.trial
        speed = f"{record.samples_per_s:.3f} samples/s" if record.samples_per_s else record.state
        ratio = f" x{record.ratio:.3f}" if record.ratio else ""
        style = DECISION_STYLE.get(record.decision, "")
        change = shown(record.change or "baseline")
        source = " (LLM)" if record.source == Source.LLM else ""
        self.console.print(f"{self._elapsed()} #{record.trial:<3} {change + source:<40} {speed}{ratio}  "
                           f"[{style}]{record.decision}[/{style}]  {shown(record.reason)}", highlight=False,
                           soft_wrap=not self.interactive)  # a log line stays one line, whatever the width

    def llm(self, call: LlmCall) -> None:
        """One line per LLM call: what it proposed that passed, what was rejected, or why it failed."""
        if call["state"] == "failed":
            text = f"LLM {call['model']}: no proposal ({call['error']}); using the ranking"
        else:
            accepted = ", ".join(a["change"] for a in call["accepted"]) or "nothing usable"
            text = (f"LLM {call['model']}: proposes {accepted}"
                    + (f"; {len(call['rejected'])} rejected (see llm.jsonl)" if call["rejected"] else "")
                    + (f"; {len(call['claims'])} new claim(s)" if call["claims"] else ""))
        self.console.print(f"{self._elapsed()} {shown(text)}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        self.console.print(shown(text), highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def final_table(self, outcome: Any, folder: str) -> None:
        self.close()
        table = Table(title=f"autotune: {len(outcome.records) - 1} trials, stopped: {shown(outcome.stop_reason)}")
        for column in ("#", "change", "state", "decision", "samples/s", "ratio", "peak MiB"):
            table.add_column(column, justify="right" if column in ("#", "samples/s", "ratio", "peak MiB") else "left")
        for r in outcome.records:
            peak = r.get("peak_memory_bytes")
            style = DECISION_STYLE.get(r["decision"], "")
            table.add_row(str(r["trial"]), shown(r["change"] or "baseline"), shown(r["state"]), f"[{style}]{r['decision']}[/{style}]",
                          f"{r['samples_per_s']:.3f}" if r["samples_per_s"] else "-",
                          f"{r['ratio']:.3f}" if r["ratio"] else "-", f"{peak / 2**20:.0f}" if peak else "-")
        self.console.print(table)
        baseline, best = outcome.baseline["samples_per_s"], outcome.best_speed
        self.console.print(f"baseline {baseline:.3f} samples/s -> best {best:.3f} samples/s "
                           f"([bold]x{outcome.speedup:.2f}[/bold] by interleaved comparisons) in "
                           f"{outcome.device_runs} device runs, {outcome.device_s:.0f}s; "
                           f"report: {shown(folder)}/report.md", highlight=False, soft_wrap=not self.interactive)


class ConsoleHandler(logging.Handler):
    """The console display as a logging handler, installed by the CLI on the "autotune" logger: each
    event the tune logs (events.py) calls the Progress method it names; any other record is a line.
    Nothing is caught here: a closed stdout ends the command as it would without logging between."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.INFO)
        self.progress = progress

    def handle(self, record: logging.LogRecord) -> bool:
        # Events below INFO (the live line's "running") are the display's too: the level is for others.
        event = getattr(record, "autotune_event", None)
        if event is not None:
            method, args = event
            getattr(self.progress, method)(*args)
            return True
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        self.progress.note(record.getMessage())
