"""The run folder `runs/RUN/`: job.json, experiments.jsonl (append-only, validated), state.json.

RUN is one path component (never `.` or `..`), so a run folder is always a child of the runs folder.
The folder is made private to the user (0700) and locked for the life of its tuner (`locked()`): a
second tuner, a `resume` or a `review` on a live run stops with one line naming the process holding it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..util.errors import JobError, RecordError
from ..config.inputs import check_run_name  # noqa: F401 - where runs/RUN/ names were checked before
from ..util.io import LockHeld, append_line, lock, write_json_atomic, write_text_atomic
from ..schemas import validate


LOCK_FILE = ".lock"


class RunFolder:
    def __init__(self, root: Path, run: str) -> None:
        self.path = Path(root) / check_run_name(run)
        self._lock_fd: int | None = None
        self._lock_depth = 0
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

    def check_new(self) -> None:
        """JobError where the folder already holds a run's records (they are kept)."""
        if self.experiments.exists() and self.experiments.stat().st_size:
            raise JobError(f"RUN {self.path.name!r}: {self.path} already holds a run; pick another RUN name "
                           "(its records are kept) or remove that folder")

    def create(self, job: dict[str, Any]) -> None:
        self.check_new()
        validate("job", job, str(self.job))
        self.make()
        write_json_atomic(self.job, job)
        # The same job as a file `config=` reads, written whole or not at all, private like the folder.
        from ..config.job import Job
        from ..config.job_files import job_yaml

        write_text_atomic(self.path / "job.yaml", job_yaml(Job.from_dict(dict(job))))

    def make(self) -> None:
        """The folder, private to the user: trials, records and the job may name private data and models."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(mode=0o700, exist_ok=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the run's lock for the block; JobError (exit 2, nothing written) if another process holds it.

        An flock on a file in the folder: the kernel drops it when the holder ends or dies, so a killed
        tuner never leaves a stale lock. Nested uses in one process (the CLI around the tuner it runs)
        share the one lock; the parallel drivers run inside it, so there is one lock per tune."""
        if self._lock_depth == 0:
            self._lock_fd = self._take_lock()
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0 and self._lock_fd is not None:
                os.close(self._lock_fd)  # the only descriptor of this open file: the lock goes with it
                self._lock_fd = None

    def _take_lock(self) -> int:
        self.make()
        try:
            fd = lock(self.path / LOCK_FILE, wait=False)
        except LockHeld as held:
            raise JobError(f"RUN {self.path.name!r} is in use by {held.holder or 'another process'} "
                           f"({self.path}); wait for it to end or stop it, then `autotune tune "
                           f"{self.path.name} resume` continues it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode(), 0)
        return fd

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


def _append_line(path: Path, schema: str, record: dict[str, Any]) -> None:
    """One validated line, appended whole or not at all (a full disk leaves the file as it was)."""
    validate(schema, record, str(path))
    run = path.parent.name
    append_line(path, (json.dumps(record) + "\n").encode(),
                f"free space and run `autotune tune {run} resume` (the trials recorded so far are kept)")
