"""The knowledge-base store: append-only tables of validated records, safe under kills and sharing.

The only module that imports tinydb. On disk a knowledge-base folder holds one JSON-lines file per
table and a lock file:

    <folder>/runs.jsonl            {"id":1,"record":{"schema_version":1,...}}\\n  one record a line
    <folder>/trials.jsonl          ids count up from 1 within a table and are never reused
    <folder>/claims.jsonl
    <folder>/claim_history.jsonl
    <folder>/.store.lock           flock: exclusive to append or repair, shared to read
    <folder>/.runs.checked.json    a cache: "the first N bytes of runs.jsonl, sha256 H, passed these schemas"

Why appending and not "temp file, fsync, rename": a rename rewrites the whole table on every record
(10,000 records → 10,000 rewrites of a growing file). An append is one `os.write` of the complete line
on an O_APPEND descriptor, then `fsync`, under the exclusive lock; `append` returns only after both.
A SIGKILL or a power cut can therefore leave at most one unfinished line, the last one, which never
ends in a newline (json escapes newlines inside a record, so the line's only newline is its last
byte). Earlier lines are never touched again: nothing is rewritten in place. Readers take the shared
lock, so they never see a line that is still being written.

Every record carries `schema_version` and is checked against `autotune/schemas/kb_<table>.json` (via
TABLES) before it is written and again when it is read back. A torn last line raises TornLineError and
a bad line raises CorruptFileError; both name the file, the line and the way to recover, and neither
ever yields a silently empty or shortened knowledge base. `repair(folder)` removes a torn last line,
and only that, and says what it removed.

Queries run over the records held in memory through tinydb (a read-only storage fed by the files);
each read first loads whatever other processes have appended since the last read, and only that.
The checked-prefix cache that spares re-checking old records is described in `files.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any, Iterable, Mapping

from tinydb import TinyDB, where
from tinydb.storages import Storage

from ..config.types import JsonObject, JsonValue
from ..util.errors import RecordError
from ..util.io import DiskError, fsync_dir, write_all
from ..schemas import violation
from .files import SUFFIX, checked_prefix, cut, locked, marker_path, write_mark
from .repair import Repair, repair

# table name -> schema file (without .json) in autotune/schemas/
TABLES: dict[str, str] = {
    "runs": "kb_run",
    "trials": "kb_trial",
    "claims": "kb_claim",
    "claim_history": "kb_claim_history",
}
DISK_HINT = ("free space and run the command again; nothing of this write was kept (a tune goes on with "
             "`autotune tune RUN resume`)")
MARK_EVERY = 256  # newly checked lines before the checked-prefix cache is brought up to date


class InvalidRecordError(RecordError):
    """A record offered to `append` or `extend` is not valid for its table; nothing was written."""


class CorruptFileError(RecordError):
    """A table file holds a line that is not a valid record. Names the file, the line and the fix."""

    def __init__(self, path: Path, line: int, message: str):
        super().__init__(message)
        self.path = Path(path)
        self.line = line


class TornLineError(CorruptFileError):
    """The last line of a table file was cut off by a crash; `repair(folder)` removes it."""


# ---------------------------------------------------------------------------------------------- storage

class _ReadOnlyStorage(Storage):
    """tinydb storage over the records the Store loaded from the files; tinydb never writes through it."""

    def __init__(self, tables: dict[str, dict[int, JsonObject]]):
        super().__init__()
        self._tables = tables

    def read(self) -> dict[str, dict[int, JsonObject]]:  # type: ignore[override]  # tinydb's stub: str ids
        return self._tables

    def write(self, data: Any) -> None:
        raise RecordError("knowledge-base records are only appended, through Store.append; tinydb may not rewrite them")


@dataclass
class _Table:
    path: Path
    schema: str
    offset: int = 0            # bytes of the file parsed so far (always just after a newline)
    lines: int = 0             # lines parsed so far (blank ones included)
    last_id: int = 0
    identity: tuple[int, int, int] | None = None  # (device, inode, mtime_ns) when last in step with the file
    hasher: Any = field(default_factory=hashlib.sha256)  # sha256 of the `offset` bytes parsed so far
    unchecked: int = 0         # lines schema-checked since the checked-prefix cache was last written
    docs: dict[int, JsonObject] = field(default_factory=dict)  # id -> record, what tinydb queries
    raw: dict[int, bytes] = field(default_factory=dict)             # id -> its line, to hand out fresh copies


# ------------------------------------------------------------------------------------------------ store

class Store:
    """Append-only tables of schema-checked records in a knowledge-base folder.

    `Store(folder)`; `append(table, record) -> id`, `extend(table, records) -> ids`; `all(table)`,
    `search(table, **equals)`, `items(table, **equals)` (id, record) pairs, `get(table, id)`; `repair()`.
    Every read first takes in what other processes appended. Records handed out are fresh copies:
    changing one changes nothing. A hand edit of earlier lines made while a Store is open is seen by
    the next Store opened, not always by that one.
    """

    def __init__(self, folder: Path | str, tables: Mapping[str, str] | None = None):
        self.folder = Path(folder).expanduser()
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # private: the user's models, data, results
        self._tables = {name: _Table(self.folder / f"{name}{SUFFIX}", schema)
                        for name, schema in (TABLES if tables is None else tables).items()}
        for name in self._tables:
            if not name.replace("_", "").isalnum():
                raise RecordError(f"table name {name!r}: use letters, digits and _ only")
        self._docs = {name: table.docs for name, table in self._tables.items()}
        self._db = TinyDB(self._docs, storage=_ReadOnlyStorage)
        self._mutex = threading.RLock()

    def __repr__(self) -> str:
        return f"Store({str(self.folder)!r})"

    # -------------------------------------------------------------------------------------- writing

    def append(self, table: str, record: Mapping[str, object]) -> int:
        """Validate `record`, append it durably, and return its id (1, 2, ... within the table).

        Raises InvalidRecordError (nothing written) for a record its schema refuses or that is not
        plain JSON, and TornLineError / CorruptFileError (nothing written) when the file is damaged.
        """
        return self.extend(table, [record])[0]

    def extend(self, table: str, records: Iterable[Mapping[str, object]]) -> list[int]:
        """Append many records with one write and one fsync (an import); returns their ids in order.

        Every record is checked before anything is written: one bad record and none is written. A
        crash during the write can leave a prefix of the batch in place (complete lines, then at most
        one torn line), never a damaged earlier record.
        """
        return self.extend_all({table: records})[table]

    def extend_all(self, batches: Mapping[str, Iterable[Mapping[str, object]]]) -> dict[str, list[int]]:
        """Append to several tables as one change (an import): {table: records} -> {table: ids}.

        Every record of every table is checked first, then all are written under one exclusive lock;
        a failed write (a full disk, an interrupt) cuts every table this call wrote back to where it
        was, so nothing of the change stays. Only a SIGKILL or a power cut between two tables can keep
        the tables written before it (whole lines; `kb import` run again skips them).
        """
        plan = []
        for table, records in batches.items():
            state = self._table(table)
            plan.append((table, state, [self._checked(table, state, record, n) for n, record in enumerate(records)]))
        result: dict[str, list[int]] = {table: [] for table, _, _ in plan}
        plan = [(table, state, checked) for table, state, checked in plan if checked]
        if not plan:
            return result
        with self._mutex, locked(self.folder, exclusive=True):
            written = []
            try:
                for table, state, checked in plan:
                    written.append((table, state, checked, *self._write(table, state, checked)))
            except BaseException:
                for _, state, _, _, _, _, start in written:
                    cut(state.path, start)
                raise
            for table, state, checked, ids, lines, stat, _ in written:
                for record_id, record, line in zip(ids, checked, lines):
                    state.docs[record_id] = record
                    state.raw[record_id] = line
                    state.hasher.update(line)
                state.offset += sum(len(line) for line in lines)
                state.lines += len(lines)
                state.unchecked += len(lines)
                state.last_id = ids[-1]
                state.identity = (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
                self._db.table(table).clear_cache()
                self._mark(state)
                result[table] = ids
        return result

    def _write(self, table: str, state: _Table, checked: list[JsonObject]) -> tuple[list[int], list[bytes], os.stat_result, int]:
        """Append checked records to one table file (under the exclusive lock): (ids, lines, stat, start)."""
        self._refresh(table, state)
        ids = list(range(state.last_id + 1, state.last_id + 1 + len(checked)))
        lines = [json.dumps({"id": i, "record": record}, separators=(",", ":")).encode() + b"\n"
                 for i, record in zip(ids, checked)]
        created = not state.path.exists()
        try:
            fd = os.open(state.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise DiskError(state.path, error, DISK_HINT) from None
        try:
            start = os.fstat(fd).st_size
            if start != state.offset:
                raise CorruptFileError(state.path, state.lines + 1, (
                    f"{state.path} changed while the lock was held ({start} bytes, {state.offset} "
                    f"expected): something writes to it without the lock; nothing was written"))
            if created:
                fsync_dir(self.folder)
            # A failed append (disk full, an interrupt) takes its partial lines back with it.
            write_all(fd, b"".join(lines), state.path, start, DISK_HINT)
            return ids, lines, os.fstat(fd), start
        finally:
            os.close(fd)

    def repair(self) -> list[Repair]:
        """Remove a torn last line from every table file of this folder; see `repair(folder)`."""
        with self._mutex:
            done = repair(self.folder)
            for table in self._tables.values():
                table.identity = None  # read every file again from the start
            return done

    # -------------------------------------------------------------------------------------- reading

    def all(self, table: str) -> list[JsonObject]:
        """Every record of the table, oldest first."""
        return [record for _, record in self.items(table)]

    def view(self, table: str) -> list[JsonObject]:
        """Every record, oldest first, as held in memory: no copy, so twice as fast as `all` for a
        reader that only reads (the beliefs fold). Changing one changes what this Store hands out."""
        state = self._table(table)
        with self._mutex:
            self._read(table, state)
            return list(state.docs.values())

    def search(self, table: str, /, **equals: JsonValue) -> list[JsonObject]:
        """Records whose top-level fields equal the given values, oldest first.

        `store.search("runs", job_fingerprint=j, device_fingerprint=d)` is the experience lookup.
        """
        return [record for _, record in self.items(table, **equals)]

    def items(self, table: str, /, **equals: JsonValue) -> list[tuple[int, JsonObject]]:
        """(id, record) pairs of the records matching `equals` (all of them when none is given)."""
        state = self._table(table)
        with self._mutex:
            self._read(table, state)
            if equals:
                query = reduce(lambda a, b: a & b, (where(key) == value for key, value in equals.items()))
                ids = sorted(doc.doc_id for doc in self._db.table(table).search(query))
            else:
                ids = list(state.docs)
            return [(i, json.loads(state.raw[i])["record"]) for i in ids]

    def get(self, table: str, record_id: int) -> JsonObject | None:
        """The record with this id, or None."""
        state = self._table(table)
        with self._mutex:
            self._read(table, state)
            raw = state.raw.get(record_id)
            return None if raw is None else json.loads(raw)["record"]

    # ------------------------------------------------------------------------------------- internals

    def _checked(self, table: str, state: _Table, record: object, n: int) -> JsonObject:
        """The record as a reader will get it back (plain JSON), once its schema accepts it."""
        which = f"{table} record" if n == 0 else f"{table} record #{n + 1} of the batch"
        if not isinstance(record, Mapping):
            raise InvalidRecordError(
                f"{which} must be a JSON object, not {type(record).__name__}; nothing was written")
        try:
            plain: JsonObject = json.loads(json.dumps(record, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise InvalidRecordError(f"{which} is not plain JSON ({error}); nothing was written") from None
        problem = violation(state.schema, plain)
        if problem:
            raise InvalidRecordError(f"{which} is {problem}; nothing was written")
        return plain

    def _table(self, table: str) -> _Table:
        try:
            return self._tables[table]
        except KeyError:
            raise RecordError(f"unknown knowledge-base table {table!r}; known: {', '.join(self._tables)}") from None

    def _read(self, table: str, state: _Table) -> None:
        with locked(self.folder, exclusive=False):
            self._refresh(table, state)

    def _forget(self, table: str, state: _Table) -> None:
        state.offset = state.lines = state.last_id = state.unchecked = 0
        state.identity = None
        state.hasher = hashlib.sha256()
        state.docs.clear()
        state.raw.clear()
        self._db.table(table).clear_cache()

    def _refresh(self, table: str, state: _Table) -> None:
        """Take in what was appended since the last look (under the lock); all of it if the file was replaced."""
        try:
            stat = os.stat(state.path)
        except FileNotFoundError:
            if state.offset:
                self._forget(table, state)
            return
        identity = (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
        if identity == state.identity and stat.st_size == state.offset:
            return
        if (state.identity is None or identity[:2] != state.identity[:2] or stat.st_size <= state.offset):
            self._forget(table, state)  # a new file, or one edited or cut: read it all again
        with open(state.path, "rb") as handle:
            handle.seek(max(state.offset - 1, 0))
            data = handle.read()
        if state.offset:
            if data[:1] != b"\n":  # what we read before is not what is there now
                self._forget(table, state)
                self._refresh(table, state)
                return
            data = data[1:]
            trusted = 0
        else:
            trusted = self._checked_prefix(state, data)
        try:
            self._parse(table, state, data, trusted)
        finally:
            self._mark(state)
        state.identity = identity

    def _checked_prefix(self, state: _Table, data: bytes) -> int:
        return checked_prefix(marker_path(self.folder, state.path), state.schema, data)

    def _mark(self, state: _Table) -> None:
        """Remember (under the lock) that the parsed prefix passed the schemas, once enough is new."""
        if state.unchecked >= MARK_EVERY and write_mark(marker_path(self.folder, state.path), state.schema,
                                                        state.offset, state.hasher.hexdigest()):
            state.unchecked = 0

    def _parse(self, table: str, state: _Table, data: bytes, trusted: int = 0) -> None:
        end = data.rfind(b"\n") + 1  # complete lines end there; anything after is a torn tail
        position = 0
        while position < end:
            stop = data.index(b"\n", position)
            line = data[position:stop + 1]
            number = state.lines + 1
            if line.strip():
                checked = stop < trusted
                record_id, record = self._check_line(state, number, line, checked)
                state.unchecked += not checked
                state.docs[record_id] = record
                state.raw[record_id] = line
                state.last_id = record_id
            state.lines = number
            state.offset += len(line)
            state.hasher.update(line)
            position = stop + 1
        if end:
            self._db.table(table).clear_cache()
        tail = data[end:]
        if tail:
            number = state.lines + 1
            preview = tail[:60].decode("utf-8", "replace") + ("..." if len(tail) > 60 else "")
            raise TornLineError(state.path, number, (
                f"{state.path}, line {number}: the last line is torn ({len(tail)} bytes with no end of line: "
                f"{preview!r}): an append was cut off by a crash or a kill before it completed, so no finished "
                f"record is lost. To recover, run `autotune kb repair --kb {shlex.quote(str(self.folder))}` "
                f"(add --dry-run to see it first), which removes only that line (or delete that last line by hand)"))

    def _check_line(self, state: _Table, number: int, line: bytes, checked: bool) -> tuple[int, JsonObject]:
        def corrupt(why: str) -> CorruptFileError:
            return CorruptFileError(state.path, number, (
                f"{state.path}, line {number}: {why}. The other lines are intact. To recover, correct that line "
                f"by hand, or delete it if its record may be lost, or restore the file from a copy; "
                f"`autotune kb repair` does not remove complete lines"))

        try:
            entry = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise corrupt(f"not JSON ({getattr(error, 'msg', error)})") from None
        if not (isinstance(entry, dict) and set(entry) == {"id", "record"}):
            raise corrupt('not a record line (expected {"id": N, "record": {...}})')
        record_id = entry["id"]
        if not isinstance(record_id, int) or isinstance(record_id, bool) or record_id <= state.last_id:
            raise corrupt(f"id {record_id!r} does not follow id {state.last_id} (ids must count up)")
        problem = None if checked else violation(state.schema, entry["record"])
        if problem:
            raise corrupt(f"record {record_id} is {problem}")
        return record_id, entry["record"]


__all__ = ["TABLES", "Store", "Repair", "repair", "InvalidRecordError", "CorruptFileError", "TornLineError"]
