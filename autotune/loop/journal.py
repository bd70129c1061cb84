"""One journal: a trial is written once, and everything that keeps it is written from that one call.

`write` puts the record in the run folder's experiments.jsonl first (the source of truth, which
`resume` reads), then the knowledge base's copy and the beliefs' evidence (`Memory.plan` / `commit`),
then tells the display and the trackers. The belief events the record lists are planned before the
append, so the folder's line is whole on its own; a kill after it and before the knowledge base's
writes is mended by resume from the folder (`Memory.sync`), never measured again.
"""

from __future__ import annotations

from typing import Any

from ..config.knobs import Knobs
from ..reasoner import Hypothesis


def write(tuner: Any, record: dict[str, Any], incumbent: Knobs | None = None, hypothesis: Hypothesis | None = None,
          profile: dict[str, Any] | None = None) -> None:
    """Journal `record`, a trial of `hypothesis` on `incumbent` (whose latest ceiling and breakdown are
    `profile`); with no `incumbent`, a record that teaches nothing (a baseline that did not run)."""
    lesson = None
    if incumbent is not None:
        if hypothesis is not None:
            record["hypothesis"] = hypothesis.to_dict()
        lesson = tuner.memory.plan(record, incumbent, tuner.memory.features(incumbent, profile), hypothesis)
        record["beliefs"] = lesson.events
    tuner.folder.append_experiment(record)
    tuner.state.records.append(record)
    if lesson is not None:
        tuner.memory.commit(lesson)
    if tuner.display:
        tuner.display.finished(record)
    for tracker in tuner.trackers:  # after the run folder has it: the folder is the source of truth
        tracker.trial(tuner, record)
