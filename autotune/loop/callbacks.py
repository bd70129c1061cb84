"""Observers of a tune for a library caller: `autotune.tune(job, callbacks=[...])`, as Optuna's or Ray
Tune's callbacks are. Each is called after the run folder holds what it is told about (the folder stays
the source of truth); an exception it raises ends the tune like any other, the records kept."""

from __future__ import annotations

from typing import Any

from ..config.records import TrialRecord
from .outcome import Outcome


class Callback:
    """Override what you need; every method does nothing by default."""

    def on_trial(self, record: TrialRecord) -> None:
        """After each trial (the baseline first) is written to the run folder and the knowledge base."""

    def on_end(self, outcome: Outcome) -> None:
        """Once, after the report and the best config are written (outcome.best_config holds the latter)."""

    def on_stop(self, error: BaseException) -> None:
        """When the tune ends early: an error, Ctrl-C or SIGTERM (`error` says which)."""


class CallbackTracker:
    """A Callback as one of the Tuner's trackers (the observers MLflow tracking uses too)."""

    def __init__(self, callback: Callback) -> None:
        self.callback = callback

    def trial(self, tuner: Any, record: Any) -> None:
        self.callback.on_trial(record if isinstance(record, TrialRecord) else TrialRecord.from_dict(record))

    def finish(self, tuner: Any, job: Any, outcome: Outcome, config: Any) -> None:
        self.callback.on_end(outcome)

    def stopped(self, tuner: Any, error: BaseException) -> None:
        self.callback.on_stop(error)
