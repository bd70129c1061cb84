"""Measurement and Decision: typed views of the stored JSON, which old run folders still read as, and
which write back what they read, checked against the schemas where asked."""

import json
from pathlib import Path

import pytest

from autotune.config.measurement import Decision, Measurement, Parity
from autotune.config.records import TrialRecord
from autotune.util.errors import RecordError

OLD = sorted((Path(__file__).parents[1] / "data").glob("experiments_v1_*.jsonl"))


def old_records() -> list[dict]:
    return [json.loads(line) for path in OLD for line in path.read_text().splitlines()]


def test_every_measurement_of_an_old_run_folder_reads_typed_and_writes_back_in_its_order():
    records = old_records()
    assert records and any(r["measurements"] for r in records)
    for record in records:
        for stored in record["measurements"]:
            measurement = Measurement.from_dict(stored, validate=True)
            assert measurement.samples_per_s == stored["samples_per_s"] > 0
            assert list(measurement.step_times_s) == stored["step_times_s"]
            assert measurement.peak_memory is not None and measurement.peak_memory.bytes == stored["peak_memory"]["bytes"]
            written = measurement.to_dict(validate=True)
            assert written == stored and list(written) == list(stored)


def test_an_old_record_reads_its_measurements_and_its_decision_typed():
    for stored in old_records():
        record = TrialRecord.from_dict(stored, validate=True)
        assert [m.to_dict() for m in record.measurements] == stored["measurements"]
        decided = record.decided
        assert decided.decision == stored["decision"] and decided.ratio == stored["ratio"]
        assert (decided.parity is None) == (not stored.get("parity"))
        if decided.parity is not None:
            assert decided.parity.ok == stored["parity"]["ok"] and decided.parity.to_dict() == stored["parity"]
        again = decided.to_dict()
        assert {k: again[k] for k in again} == {k: stored.get(k) for k in again}


def test_a_measurement_that_no_run_can_make_is_refused_on_read_and_on_write():
    stored = next(m for r in old_records() for m in r["measurements"])
    with pytest.raises(RecordError, match="samples_per_s"):
        Measurement.from_dict({**stored, "samples_per_s": 0.0}, validate=True)
    slowed = Measurement.from_dict({**stored, "step_times_s": [0.1, -0.2]})  # read unchecked, as a test's table
    with pytest.raises(RecordError, match="step_times_s"):
        slowed.to_dict(validate=True)


def test_a_placement_set_since_is_written_after_what_was_read():
    measurement = Measurement.from_dict({"samples_per_s": 2.0, "step_times_s": [0.5, 0.5], "parity_losses": None})
    placed = measurement.placed({"node": "n", "gpu": "1"}).to_dict()
    assert list(placed) == ["samples_per_s", "step_times_s", "parity_losses", "placement"]
    assert placed["parity_losses"] is None and "ceiling" not in placed  # a null read stays; nothing is invented


def test_a_decision_says_its_interval_only_where_a_comparison_was_made():
    alone = Decision("discard", "crashed").to_dict()
    assert "interval" not in alone and alone["ratio"] is None and alone["parity"] is None
    compared = Decision("keep", "faster", 1.2, (1.1, 1.3), 0.99, 0.01, 10.0,
                        Parity(True, "same losses", {"ok": True, "worst": 0.0, "reason": "same losses"}))
    written = compared.to_dict()
    assert written["interval"] == [1.1, 1.3] and written["parity"] == {"ok": True, "worst": 0.0, "reason": "same losses"}
    assert Decision.from_dict(written) == compared
    assert Parity(True, "a", {"ok": True, "reason": "a", "worst": 0.0}).noted("; b").to_dict()["reason"] == "a; b"
