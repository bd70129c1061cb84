"""Files written so that a crash leaves either the old content or the new, never half of either.

Two ways: `write_json_atomic` (temp file, fsync, rename) for files rewritten whole, and
`append_line` / `write_all` for append-only files (one line per record), where a failed write is
taken back to the end of the previous line. Both raise DiskError, one line naming the file, when the
disk refuses (full, read-only, I/O error).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import AutotuneError

RESUME_HINT = "free space and run the command again"


class DiskError(AutotuneError):
    """A write the disk refused (full, read-only, I/O error); the file is left as it was before it."""

    def __init__(self, path: Path, error: BaseException, fix: str = RESUME_HINT) -> None:
        why = (error.strerror or str(error)) if isinstance(error, OSError) else str(error)
        super().__init__(f"could not write {path}: {why}; {fix}")
        self.path = Path(path)


def write_all(fd: int, data: bytes, path: Path, start: int, fix: str = RESUME_HINT) -> None:
    """Write every byte of `data` to `fd` (an O_APPEND file that was `start` bytes long), then fsync.

    os.write may write less than it was given (a full disk, a signal): it is called again for the
    rest, and a call that writes nothing is a full disk. On any failure, or an interrupt, the file
    is cut back to `start`, so it never keeps part of a line; then DiskError (or the interrupt).
    """
    try:
        written = 0
        while written < len(data):
            count = os.write(fd, data[written:])
            if count <= 0:
                raise OSError(28, os.strerror(28))  # ENOSPC: no progress and no error from the call
            written += count
        os.fsync(fd)
    except BaseException as error:
        try:
            os.ftruncate(fd, start)
            os.fsync(fd)
        except OSError as undo:
            raise DiskError(path, error, f"{fix}; cutting the file back to {start} bytes also failed "
                                         f"({undo.strerror}), so its last line may be torn") from None
        if isinstance(error, OSError):
            raise DiskError(path, error, fix) from None
        raise


def append_line(path: Path, data: bytes, fix: str = RESUME_HINT, mode: int = 0o600) -> None:
    """Append `data` (whole lines) to `path` durably: all of it, or nothing (see `write_all`)."""
    path = Path(path)
    if not data.endswith(b"\n"):
        raise ValueError(f"append_line writes whole lines; {len(data)} bytes to {path} do not end one")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, mode)
    except OSError as error:
        raise DiskError(path, error, fix) from None
    try:
        write_all(fd, data, path, os.fstat(fd).st_size, fix)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str, fix: str = RESUME_HINT) -> None:
    """The whole of `text` or the old file, never half: a temp file, fsync, rename. Private (0600): run
    folders and knowledge bases hold the user's job, data paths and results. A full disk leaves the old
    file in place and no temp file behind (DiskError)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise DiskError(path, error, fix) from None


def write_json_atomic(path: Path, data: dict[str, Any], indent: int | None = 1, fix: str = RESUME_HINT) -> None:
    """`indent=None` for bulk data (token rows), where one value per line would multiply the size."""
    # A value JSON cannot hold fails here, before any file is touched.
    write_text_atomic(path, json.dumps(data, indent=indent), fix)
