"""A trial's own copy of the user's folder: every input the script reads is at its relative path, and
nothing the script writes, truncates, renames or deletes there can reach the user's files.

The folder the tune runs from is copied whole into the trial's `tree/` (a reflink where the file system
can share blocks, btrfs or XFS, else a plain copy), leaving out what is never an input: `.git`,
`__pycache__` and the runs folder itself where it sits inside. A link inside the folder is copied as
what it points to (a write through a link would reach its target); a dangling or looping one is left
out (a write through it would create its target; there is nothing to read through a loop). The copy has a cap, checked when the job is read and again by
each trial: AUTOTUNE_TREE_CAP_MB (default 2048) of files and AUTOTUNE_TREE_CAP_FILES (default 100000)
files and folders. FIFOs, sockets and devices are never copied (reading one could block a trial).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ...util.errors import JobError

CAP_MB_ENV, CAP_FILES_ENV = "AUTOTUNE_TREE_CAP_MB", "AUTOTUNE_TREE_CAP_FILES"
CAP_MB, CAP_FILES = 2048, 100_000
SKIPPED = (".git", "__pycache__")
_FICLONE = 0x40049409   # linux/fs.h: the new file shares the source's blocks until either is written


@dataclass
class Plan:
    root: Path
    files: list[tuple[Path, Path]] = field(default_factory=list)   # (the user's file, its place under the copy)
    folders: list[Path] = field(default_factory=list)              # relative, parents first
    size: int = 0


def _cap(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise JobError(f"{name}={text!r}: expected a whole number >= 1")
    return int(text)


def _refuse(root: Path, what: str) -> JobError:
    return JobError(f"{root} holds {what} to copy for each trial (trials run on a copy, so the script cannot "
                    f"change your files); run from a smaller folder (large inputs moved out and named by absolute "
                    f"path), or raise {CAP_MB_ENV} / {CAP_FILES_ENV}")


def plan(root: Path, exclude: list[Path] | tuple[Path, ...] = ()) -> Plan:
    """What a copy of `root` holds, within the caps (JobError naming the way out past them)."""
    root = Path(root).resolve()
    # realpath, not Path.resolve: on Python < 3.13 resolve raises RuntimeError on a link that loops.
    left_out = {Path(os.path.realpath(p)) for p in exclude}
    cap_bytes, cap_files = _cap(CAP_MB_ENV, CAP_MB) * 2 ** 20, _cap(CAP_FILES_ENV, CAP_FILES)
    out = Plan(root)
    seen: set[tuple[int, int]] = set()   # folders by (device, inode): a link back up is not followed round
    pending = [(root, Path())]
    while pending:
        folder, relative = pending.pop()
        info = folder.stat()
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        out.folders.append(relative)
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            path = Path(entry.path)
            if entry.name in SKIPPED or Path(os.path.realpath(path)) in left_out or path in left_out:
                continue
            try:
                target = path.stat()   # follows a link: its target is what the script would read
            except OSError:
                continue               # a dangling or looping link: nothing to read; a write could create its target
            if len(out.files) + len(out.folders) > cap_files:
                raise _refuse(root, f"more than {cap_files} files and folders")
            if stat.S_ISDIR(target.st_mode):
                pending.append((path, relative / entry.name))
            elif stat.S_ISREG(target.st_mode):
                out.files.append((path, relative / entry.name))
                out.size += target.st_size
    if out.size > cap_bytes:
        raise _refuse(root, f"{out.size / 2 ** 20:.0f} MB (over {CAP_MB_ENV}={cap_bytes // 2 ** 20})")
    out.folders.sort(key=lambda p: len(p.parts))
    return out


def _clone(source: Path, target: Path) -> bool:
    """A reflink of `source` at `target`; False where the file system cannot share blocks."""
    import fcntl

    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            return True
        except OSError as error:
            if error.errno in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.EBADF, errno.ENOSYS):
                return False
            raise


def copy(source: Plan, target: Path) -> dict[str, object]:
    """The copy of a planned folder at `target`; how it was made (`method`: reflink or copy), its size."""
    for folder in source.folders:
        (target / folder).mkdir(parents=True, exist_ok=True)
    reflink = True
    copied = 0
    for original, relative in source.files:
        place = target / relative
        if not (reflink and _clone(original, place)):
            reflink = False
            shutil.copyfile(original, place)
            copied += 1
        shutil.copymode(original, place)
    method = "reflink" if source.files and not copied else "copy"
    return {"method": method, "files": len(source.files), "bytes": source.size}
