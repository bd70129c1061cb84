"""The run folder: experiments.jsonl is append-only, validated, and refuses torn lines loudly."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from autotune.util.errors import JobError, RecordError
from autotune import job_from_dict
from autotune.config.knobs import Knobs
from autotune.output.records import RunFolder


def _schema(name: str) -> dict:
    return json.loads(resources.files("autotune.schemas").joinpath(f"{name}.json").read_text())


def minimal_measurement() -> dict:
    """Every field measurement.json requires, and nothing else."""
    values = {
        "device": "cpu", "samples_per_s": 12.5, "tokens_per_s": 3100.0, "step_times_s": [0.31, 0.32],
        "peak_memory": {"kind": "cpu_peak_rss", "bytes": 123456},
        "parity_losses": {"step1": [2.5, 2.6], "step2": [2.4, 2.5]},
    }
    return {k: values[k] for k in _schema("measurement")["required"]}


def minimal_experiment(trial: int = 0) -> dict:
    """Every field experiment.json requires (schema_version and finished_at are added on append)."""
    values = {
        "schema_version": 1, "run": "r", "trial": trial, "change": None if trial == 0 else "padding=longest",
        "knobs": Knobs().to_dict(), "state": "complete", "decision": "baseline" if trial == 0 else "keep",
        "reason": "baseline", "measurements": [minimal_measurement()], "samples_per_s": 12.5,
        "ratio": 1.0, "wall_s": 3.2,
    }
    required = _schema("experiment")["required"]
    assert set(required) <= set(values), set(required) - set(values)
    return {k: values[k] for k in required}


@pytest.fixture
def folder(tmp_path):
    run = RunFolder(tmp_path / "runs", "r")
    job = job_from_dict("r", {"smoke": True})
    run.create(job.to_dict())
    return run


def test_create_writes_a_job_json(folder):
    stored = json.loads(folder.job.read_text())
    assert stored["run"] == "r" and stored["smoke"] is True
    assert not folder.experiments.exists()


def test_append_writes_one_validated_json_line_per_record(folder):
    folder.append_experiment(minimal_experiment(0))
    folder.append_experiment(minimal_experiment(1))
    lines = folder.experiments.read_text().splitlines()
    assert len(lines) == 2
    parsed = [json.loads(line) for line in lines]
    assert [p["trial"] for p in parsed] == [0, 1]
    assert all(p["schema_version"] == 1 and p["finished_at"] for p in parsed)
    assert folder.experiments.read_text().endswith("\n")
    records = folder.read_experiments()  # typed views of the lines, which they give back unchanged
    assert [r.to_dict() for r in records] == parsed
    assert records[1].change == "padding=longest" and records[1].trial == 1


@pytest.mark.parametrize("breakage", [
    lambda r: r.pop("knobs"),
    lambda r: r.update(state="exploded"),
    lambda r: r.update(trial=-1),
    lambda r: r.update(unexpected="field"),
    lambda r: r["knobs"].update(padding="zero"),
    lambda r: r["measurements"][0].update(samples_per_s=0),
])
def test_an_invalid_record_raises_and_writes_nothing(folder, breakage):
    folder.append_experiment(minimal_experiment(0))
    before = folder.experiments.read_bytes()
    record = minimal_experiment(1)
    breakage(record)
    with pytest.raises(RecordError, match="experiments.jsonl"):
        folder.append_experiment(record)
    assert folder.experiments.read_bytes() == before


def test_an_invalid_first_record_does_not_even_create_the_file(folder):
    record = minimal_experiment(0)
    record["decision"] = "maybe"
    with pytest.raises(RecordError):
        folder.append_experiment(record)
    assert not folder.experiments.exists()


def test_a_torn_line_names_the_file_and_line(folder):
    folder.append_experiment(minimal_experiment(0))
    folder.append_experiment(minimal_experiment(1))
    text = folder.experiments.read_text()
    folder.experiments.write_text(text + text.splitlines()[1][:40])  # a half-written third line
    with pytest.raises(RecordError) as error:
        folder.read_experiments()
    message = str(error.value)
    assert f"{folder.experiments}:3" in message
    assert "torn" in message


def test_a_valid_json_line_that_breaks_the_schema_names_the_file_and_line(folder):
    folder.append_experiment(minimal_experiment(0))
    with open(folder.experiments, "a") as handle:
        handle.write(json.dumps({"trial": 1}) + "\n")
    with pytest.raises(RecordError, match=f"{folder.experiments}:2"):
        folder.read_experiments()


def test_reading_a_run_with_no_experiments_is_empty(folder):
    assert folder.read_experiments() == []


def test_create_refuses_a_folder_that_already_holds_experiments(folder):
    folder.append_experiment(minimal_experiment(0))
    before = folder.experiments.read_bytes()
    job = job_from_dict("r", {"smoke": True, "max_len": 64})
    again = RunFolder(folder.path.parent, "r")
    with pytest.raises(JobError, match="already holds a run"):
        again.create(job.to_dict())
    assert folder.experiments.read_bytes() == before
    assert json.loads(folder.job.read_text())["max_len"] == 512


def test_create_rejects_an_invalid_job(tmp_path):
    job = job_from_dict("r", {"smoke": True})
    data = job.to_dict()
    data["max_len"] = 4
    run = RunFolder(tmp_path, "r")
    with pytest.raises(RecordError, match="max_len"):
        run.create(data)
    assert not run.job.exists()
