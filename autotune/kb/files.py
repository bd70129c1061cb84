"""The knowledge-base folder's file discipline: one lock, directory fsync, cutting a table back, and
the checked-prefix cache (`.<table>.checked.json`: the first N bytes of a table passed these schemas).

Shared by the store (appends, reads) and `repair`, so both take the same lock the same way.

Checking every record against its schema costs far more than parsing it (about 0.1 ms a record, so a
second for 10,000). A `.<table>.checked.json` file remembers a prefix of the table file that has
passed the current schemas, by length and sha256; a later open still parses every line and checks ids,
but skips the schema check for lines inside a prefix whose bytes and schemas hash the same. Any edit
inside the prefix, or any change to a schema file, changes a hash and everything is checked again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..util.io import DiskError, lock, truncate_durably
from ..schemas import digest as schemas_digest

SUFFIX = ".jsonl"
LOCK_FILE = ".store.lock"


@contextmanager
def locked(folder: Path, exclusive: bool) -> Iterator[None]:
    try:
        fd = lock(folder / LOCK_FILE, exclusive)
    except OSError:
        if exclusive or os.access(folder, os.W_OK):
            raise
        fd = None  # a read-only folder that nobody can append to: reading needs no lock
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the only descriptor of this open file releases the lock


def cut(path: Path, size: int) -> None:
    """Take a table file back to `size` bytes: undoes this change's append to it."""
    try:
        truncate_durably(path, size)
    except OSError as error:
        raise DiskError(path, error, f"cutting it back to {size} bytes failed, so it may keep part of an "
                                     f"unfinished change; `autotune kb repair` removes a torn last line") from None


def marker_path(folder: Path, table_path: Path) -> Path:
    return folder / f".{table_path.stem}.checked.json"


def checked_prefix(marker: Path, schema: str, data: bytes) -> int:
    """How many leading bytes of `data` (a whole table file) already passed the current schemas."""
    # No cache, or an unreadable one: check everything (0).
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        mark = json.loads(marker.read_text())
        size = mark["bytes"]
        if (mark["schemas"] == schemas_digest() and mark["schema"] == schema
                and isinstance(size, int) and 0 < size <= len(data) and data[size - 1:size] == b"\n"
                and hashlib.sha256(data[:size]).hexdigest() == mark["sha256"]):
            return size
    return 0


def write_mark(marker: Path, schema: str, size: int, sha256: str) -> bool:
    """Write the cache atomically (no fsync: a lost one is rebuilt); False in a read-only folder."""
    mark = {"schema_version": 1, "schema": schema, "schemas": schemas_digest(), "bytes": size, "sha256": sha256}
    temp = marker.with_name(f"{marker.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "w") as out:
            out.write(json.dumps(mark))
        os.replace(temp, marker)
        return True
    except OSError:
        temp.unlink(missing_ok=True)  # records still load, only slower
        return False
