"""`autotune kb repair`: remove the torn last line a killed append left, and only that."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..util.io import truncate_durably
from .files import SUFFIX, locked


@dataclass(frozen=True)
class Repair:
    """What `repair` removed from one file: the torn last line (never a complete record)."""

    path: Path
    line: int
    removed_bytes: int
    preview: str

    def __str__(self) -> str:
        return (f"{self.path}: removed torn line {self.line} ({self.removed_bytes} bytes, "
                f"an append that never completed): {self.preview}")


def repair(folder: Path | str, dry_run: bool = False) -> list[Repair]:
    """Remove the torn last line of each table file in `folder` and say what was removed.

    Only a last line without its end of line is removed (an append that never completed); complete
    lines, valid or not, are never touched. Runs under the exclusive lock, so it is safe while other
    tuners use the folder. Returns one Repair per file changed (none when nothing was torn); with
    `dry_run`, the same list and nothing changed.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return []
    done: list[Repair] = []
    with locked(folder, exclusive=not dry_run):
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            with open(path, "rb") as handle:
                data = handle.read()
                if not data or data.endswith(b"\n"):
                    continue
                keep = data.rfind(b"\n") + 1
                tail = data[keep:]
            if not dry_run:
                truncate_durably(path, keep)
            preview = tail[:60].decode("utf-8", "replace") + ("..." if len(tail) > 60 else "")
            done.append(Repair(path, data.count(b"\n", 0, keep) + 1, len(tail), repr(preview)))
        for temp in () if dry_run else folder.glob(".*.checked.json.*.tmp"):
            temp.unlink(missing_ok=True)  # a cache file whose writer was killed before it renamed it
    return done
