"""The run folder `runs/RUN/`: job.json, experiments.jsonl (append-only, validated), state.json."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .errors import JobError, RecordError
from .io import append_line, write_json_atomic
from .schemas import validate


class RunFolder:
    def __init__(self, root: Path, run: str) -> None:
        self.path = Path(root) / run
        self.job = self.path / "job.json"
        self.experiments = self.path / "experiments.jsonl"
        self.results = self.path / "results.tsv"
        self.best = self.path / "best_config.json"
        self.report = self.path / "report.md"
        self.state = self.path / "state.json"
        self.frame = self.path / "frame.json"
        self.rows = self.path / "rows.json"
        self.model_config = self.path / "model_config.json"
        self.llm = self.path / "llm.jsonl"

    def trial_dir(self, name: str) -> Path:
        return self.path / "trials" / name

    def create(self, job: dict[str, Any]) -> None:
        if self.experiments.exists() and self.experiments.stat().st_size:
            raise JobError(f"RUN {self.path.name!r}: {self.path} already holds a run; pick another RUN name "
                           "(its records are kept) or remove that folder")
        validate("job", job, str(self.job))
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.job, job)

    def append_experiment(self, record: dict[str, Any]) -> None:
        record = {**record, "schema_version": 1, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        _append_line(self.experiments, "experiment", record)

    def append_llm_call(self, record: dict[str, Any]) -> None:
        _append_line(self.llm, "llm_call", {**record, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def read_llm_calls(self) -> list[dict[str, Any]]:
        if not self.llm.exists():
            return []
        # A torn last line (a kill mid-write) loses that call's log, never the run.
        calls = []
        for line in self.llm.read_text().splitlines():
            try:
                calls.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return calls

    def read_experiments(self) -> list[dict[str, Any]]:
        records = []
        if not self.experiments.exists():
            return records
        for number, line in enumerate(self.experiments.read_text().splitlines(), 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise RecordError(f"{self.experiments}:{number} is torn or corrupt ({error.msg}); "
                                  "remove that line to recover the rest") from error
            validate("experiment", record, f"{self.experiments}:{number}")
            records.append(record)
        return records

    def write_state(self, state: dict[str, Any]) -> None:
        write_json_atomic(self.state, {"schema_version": 1, **state})


def _append_line(path: Path, schema: str, record: dict[str, Any]) -> None:
    """One validated line, appended whole or not at all (a full disk leaves the file as it was)."""
    validate(schema, record, str(path))
    run = path.parent.name
    append_line(path, (json.dumps(record) + "\n").encode(),
                f"free space and run `autotune tune {run} resume` (the trials recorded so far are kept)")
