"""What a tune tells as it goes, through `logging` (the logger "autotune"): a library caller configures
logging as for any other library (silent by default), and the CLI installs the console display as a
handler (display.ConsoleHandler) that draws the progress line and the trial table from the same events.

Each record carries its event in `record.autotune_event` as (method, arguments): a handler that knows the
display calls that method of it; any other handler formats the plain message.
"""

from __future__ import annotations

import logging
from typing import Any

from ..config.records import RecordLike
from .documents import LlmCall

LOGGER = logging.getLogger("autotune")
EVENT = "autotune_event"


def _emit(text: str, method: str, *args: Any) -> None:
    LOGGER.info("%s", text, extra={EVENT: (method, args)})


def trial_line(record: RecordLike) -> str:
    """One plain line per trial: number, change, speed, decision, reason."""
    speed = f"{record['samples_per_s']:.3f} samples/s" if record["samples_per_s"] else record["state"]
    ratio = f" x{record['ratio']:.3f}" if record.get("ratio") else ""
    return (f"trial {record['trial']}: {record['change'] or 'baseline'}: {speed}{ratio}, {record['decision']}: "
            f"{record['reason']}")


class Events:
    """The tuner's display: the Tuner and the API call these; each becomes one log record."""

    def running(self, trial: int | None, label: str) -> None:
        LOGGER.debug("%s", f"trial {trial}: {label}" if trial else label, extra={EVENT: ("running", (trial, label))})

    def finished(self, record: RecordLike) -> None:
        _emit(trial_line(record), "finished", record)

    def llm(self, call: LlmCall) -> None:
        proposed = ", ".join(a["change"] for a in call.get("accepted") or []) or "nothing usable"
        text = (f"LLM {call['model']}: no proposal ({call['error']})" if call["state"] == "failed"
                else f"LLM {call['model']}: proposes {proposed}")
        _emit(text, "llm", call)

    def note(self, text: str) -> None:
        _emit(text, "note", text)

    def final_table(self, outcome: Any, folder: str) -> None:
        _emit(f"baseline {outcome.baseline['samples_per_s']:.3f} samples/s -> best x{outcome.speedup:.2f} "
              f"(trial {outcome.best.trial}); report: {folder}/report.md", "final_table", outcome, folder)

    def close(self) -> None:
        LOGGER.debug("the tune's display closes", extra={EVENT: ("close", ())})
