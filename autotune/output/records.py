"""The run folder `runs/RUN/`: job.json, experiments.jsonl (append-only, validated), state.json.

RUN is one path component (never `.` or `..`), so a run folder is always a child of the runs folder.
The folder is made private to the user (0700) and locked for the life of its tuner (`locked()`): a
second tuner, a `resume` or a `review` on a live run stops with one line naming the process holding it.

The folder is autotune's own (`check_own`): a symbolic link in it (planted, or copied in) would send a
write or a truncation outside, and a FIFO or a device where a record is expected would hang the read,
so either is refused with one line before anything is read or written; the trials' own work trees
(trials/*/work, the script's inputs) are the workload's and are not looked into.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, cast

from ..util.errors import DamagedRunError, JobError, RecordError
from ..config.inputs import check_run_name  # noqa: F401 - where runs/RUN/ names were checked before
from ..config.inputs import read_text, special
from ..util.io import LockHeld, append_line, lock, write_json_atomic, write_text_atomic
from ..schemas import validate
from ..config.records import TrialRecord
from ..config.types import JsonObject
from .documents import LlmCall


LOCK_FILE = ".lock"
WORK_DIR = "work"      # trials/NAME/work: the script's working tree, the workload's to lay out
MAX_ENTRIES = 200_000  # a run folder has a few files per trial; more is not a folder autotune made


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

    def create(self, job: JsonObject) -> None:
        """job.json (schema job: `Job.to_dict()`, with `fresh` where the user said it) and job.yaml."""
        self.check_new()
        validate("job", job, str(self.job))
        self.make()
        write_json_atomic(self.job, job)
        # The same job as a file `config=` reads, written whole or not at all, private like the folder.
        from ..config.job import Job
        from ..config.job_files import job_yaml

        write_text_atomic(self.path / "job.yaml", job_yaml(Job.from_dict({k: v for k, v in job.items() if k != "fresh"})))

    def make(self) -> None:
        """The folder, private to the user: trials, records and the job may name private data and models.
        One that exists is checked (`check_own`) and made private again (0700), or refused."""
        self.check_own()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(self.path)
        if info.st_uid != os.geteuid():
            raise JobError(f"RUN {self.path.name!r}: {self.path} belongs to another user; pick another RUN name")
        if stat.S_IMODE(info.st_mode) != 0o700:
            try:
                os.chmod(self.path, 0o700)
            except OSError as error:
                raise JobError(f"RUN {self.path.name!r}: {self.path} cannot be made private ({error.strerror}); "
                               "pick another RUN name") from None

    def check_own(self) -> None:
        """JobError (one line, nothing touched) if the folder is a link, or holds a symbolic link, a FIFO,
        a device or a socket, or a folder where one of its files belongs: autotune never follows or
        reads one. A folder that does not exist yet passes."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        run = self.path.name
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else (special(info.st_mode) or "a file")
            raise JobError(f"RUN {run!r}: {self.path} is {what}, not a run folder autotune made; pick another "
                           "RUN name (or remove it)")
        files = {p.name for p in (self.job, self.experiments, self.state, self.frame, self.rows, self.llm,
                                  self.results, self.best, self.report, self.model_config)} | {LOCK_FILE}
        seen = 0
        for root, folders, names in os.walk(self.path):
            here = Path(root)
            if here.parent.name == "trials" and here.parent.parent == self.path:
                folders[:] = [f for f in folders if f != WORK_DIR]
            for name in folders + names:
                seen += 1
                path = here / name
                mode = os.lstat(path).st_mode
                what = ("a symbolic link" if stat.S_ISLNK(mode) else special(mode)
                        or ("a folder" if here == self.path and name in files and stat.S_ISDIR(mode) else ""))
                if what:
                    raise JobError(f"RUN {run!r}: {path} is {what}; a run folder holds only the files autotune "
                                   "writes, so it is not followed or read: remove it (or start a new RUN)")
            if seen > MAX_ENTRIES:
                raise JobError(f"RUN {run!r}: {self.path} holds more than {MAX_ENTRIES} entries; not a run "
                               "folder autotune made: start a new RUN")

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

    def append_experiment(self, record: JsonObject) -> None:
        """One trial's record (schema experiment), as the loop built it; TrialRecord reads it back."""
        record = {**record, "schema_version": 1, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        _append_line(self.experiments, "experiment", record)

    def append_llm_call(self, record: JsonObject) -> None:
        _append_line(self.llm, "llm_call", {**record, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def read_llm_calls(self) -> list[LlmCall]:
        if not self.llm.exists():
            return []
        # A torn last line (a kill mid-write) loses that call's log, never the run.
        calls: list[LlmCall] = []
        for line in self.llm.read_text().splitlines():
            try:
                calls.append(cast(LlmCall, json.loads(line)))  # written whole, checked by its schema
            except json.JSONDecodeError:
                continue
        return calls

    def read_experiments(self) -> list[TrialRecord]:
        """The trials' records, each checked against schema experiment (DamagedRunError where one fails)."""
        records: list[TrialRecord] = []
        if not self.experiments.exists():
            return records
        text = read_text(self.experiments, f"RUN {self.path.name!r}", 2**31, RecordError, follow=False)
        for number, line in enumerate(text.splitlines(), 1):
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as error:
                raise DamagedRunError(f"{self.experiments}:{number} is torn or corrupt "
                                      f"({getattr(error, 'msg', 'nests too deeply')}); remove that line to recover "
                                      "the rest") from None
            try:
                validate("experiment", record, f"{self.experiments}:{number}")
            except RecordError as error:  # edited by hand, or from another tool: the run's input is bad
                raise DamagedRunError(str(error)) from None
            records.append(TrialRecord.from_dict(record))
        return records


def _append_line(path: Path, schema: str, record: JsonObject) -> None:
    """One validated line, appended whole or not at all (a full disk leaves the file as it was)."""
    validate(schema, record, str(path))
    run = path.parent.name
    append_line(path, (json.dumps(record) + "\n").encode(),
                f"free space and run `autotune tune {run} resume` (the trials recorded so far are kept)")
