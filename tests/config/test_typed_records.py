"""Typed records: a stored trial reads back with its fallbacks in one place, and writes back unchanged."""

import json

import pytest

from autotune.config.knobs import Knobs
from autotune.config.records import UNSPLIT_SOURCES, Source, TrialRecord, parse_change
from autotune.reasoner import Hypothesis
from autotune.util.errors import RecordError

STORED = {"schema_version": 1, "run": "r", "measurements": [], "wall_s": 1.0, "trial": 3, "change": "padding=longest+group_by_length=True", "knobs": Knobs().to_dict(),
          "state": "replayed", "replayed_state": "complete", "decision": "discard", "reason": "slower",
          "ratio": 0.9, "interval": [0.85, 0.95], "noise_floor": 0.01, "samples_per_s": 10.0,
          "hypothesis": {"change": "padding=longest+group_by_length=True", "source": "pooled"}}


def test_a_stored_record_reads_typed_and_writes_back_as_it_was():
    record = TrialRecord.from_dict(STORED)
    assert record.outcome == "complete"                      # a replay is judged by what it replays
    assert record.changes == (("padding", "longest"), ("group_by_length", "True")) and record.combined
    assert record.source is Source.POOLED and record.source in UNSPLIT_SOURCES
    assert record.lost                                       # 0.95 < 1 - 0.01
    assert record.to_dict() == STORED


def test_a_record_from_before_sources_or_intervals_still_reads():
    old = {k: v for k, v in STORED.items() if k not in ("hypothesis", "interval", "replayed_state")}
    record = TrialRecord.from_dict(old)
    assert record.source is None and record.interval is None and not record.lost and record.outcome == "replayed"


def test_a_record_read_back_from_a_file_is_checked_against_its_schema():
    assert TrialRecord.from_dict(STORED, validate=True).to_dict() == STORED
    with pytest.raises(RecordError, match="experiment.json: at decision"):
        TrialRecord.from_dict({**STORED, "decision": 7}, validate=True)


def test_a_hypothesis_source_is_the_enum_and_its_record_the_word():
    hypothesis = Hypothesis("padding", "longest", "why", also=(("group_by_length", True),), source="pooled")
    assert hypothesis.source is Source.POOLED
    assert json.loads(json.dumps(hypothesis.to_dict()))["source"] == "pooled"
    assert parse_change(hypothesis.change) == (("padding", "longest"), ("group_by_length", "True"))
    assert parse_change(None) == ()


def test_a_recorded_hypothesis_reads_back_typed():
    made = Hypothesis("per_device_train_batch_size", 4, "why", p_helps=0.7, also=(("group_by_length", True),),
                      claims=("C1",), source=Source.WARM_START)
    again = Hypothesis.from_dict(json.loads(json.dumps(made.to_dict())))
    assert again.changes == (("per_device_train_batch_size", 4), ("group_by_length", True))
    assert again.source is Source.WARM_START and again.claims == ("C1",) and again.reason == "why"
    assert again.apply(Knobs()) == made.apply(Knobs())
