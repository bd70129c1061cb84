"""Files written so that a crash leaves either the old content or the new, never half of either, and
the locks around them: the one module that fsyncs, renames over and flocks.

Two ways to write: `write_json_atomic` / `write_text_atomic` / `write_bytes_atomic` (temp file, fsync,
rename) for files rewritten whole, and `append_line` / `write_all` for append-only files (one line per
record), where a failed write is taken back to the end of the previous line (`truncate_durably`). They
raise DiskError, one line naming the file, when the disk refuses (full, read-only, I/O error).
`fsync_dir` makes a new name durable; `locked` / `lock` / `try_lock` are flock on a lock file.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from .errors import AutotuneError, JobError

RESUME_HINT = "free space and run the command again"
# Files autotune writes are opened without following a last-name link: one planted in a run folder or
# a knowledge base (`.lock` -> a user's file) would have the write, the truncation or the lock land there.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _open_own(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open of a file of autotune's own, refusing a symbolic link (JobError, one line) instead of
    following it."""
    try:
        return os.open(path, flags | NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise JobError(f"{path} is a symbolic link; autotune's folders hold only the files it writes, so it "
                           "is not followed: remove the link") from None
        raise


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
        fd = _open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
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
        with os.fdopen(_open_own(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise DiskError(path, error, fix) from None


def write_json_atomic(path: Path, data: Mapping[str, object], indent: int | None = 1, fix: str = RESUME_HINT) -> None:
    """`indent=None` for bulk data (token rows), where one value per line would multiply the size."""
    # A value JSON cannot hold fails here, before any file is touched.
    write_text_atomic(path, json.dumps(data, indent=indent), fix)


def write_bytes_atomic(path: Path, chunks: Iterable[bytes]) -> list[int]:
    """`chunks` back to back as the whole of `path`, or the old file: temp file, fsync, rename. Returns
    the end offset of each chunk (where one ends in the file). OSError as raised: the caller words it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    ends, total = [], 0
    try:
        with os.fdopen(_open_own(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as handle:
            for data in chunks:
                handle.write(data)
                total += len(data)
                ends.append(total)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ends


def truncate_durably(path: Path, size: int) -> None:
    """Cut `path` back to `size` bytes and fsync it (undoing a torn or unfinished append)."""
    with open(path, "r+b") as handle:
        handle.truncate(size)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_dir(folder: Path) -> None:
    """Make the names in `folder` durable (a new file, a rename): fsync the directory itself."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LockHeld(Exception):
    """`lock(..., wait=False)` found the lock taken; `holder` is what its holder wrote in the file."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


def lock(path: Path, exclusive: bool = True, wait: bool = True) -> int:
    """Open (creating, 0600) the lock file `path` and flock it; the descriptor holds the lock until it
    is closed (os.close), also when the process dies, and O_CLOEXEC keeps a trial's child from
    inheriting it. Opened per use, never kept across a fork: a child sharing the parent's descriptor
    would share its lock. `wait=False`: LockHeld at once when another holds it."""
    fd = _open_own(path, (os.O_RDWR if exclusive else os.O_RDONLY) | os.O_CREAT)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        holder = "".join(c for c in os.pread(fd, 512, 0).decode(errors="replace").strip() if c.isprintable())
        os.close(fd)
        raise LockHeld(holder) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def try_lock(path: Path) -> bool:
    """Whether the lock file `path` is free (nobody holds it): taken and let go at once. False also when
    there is no such file (its owner is still making it)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@contextmanager
def locked(path: Path, exclusive: bool = True) -> Iterator[None]:
    """Hold the flock of the lock file `path` for the block (exclusive, or shared for readers)."""
    fd = lock(path, exclusive)
    try:
        yield
    finally:
        os.close(fd)  # closing the only descriptor of this open file releases the lock
