"""A local dataset is checked for usable rows in the parent, before the frame starts a child.

Without it an empty or malformed file fails inside the frame, in `datasets`, as `StopIteration` or
`DatasetGenerationError` naming no file. Here it is one `JobError` line naming the file and the line.
Cheap: each file is read up to SCAN_BYTES (every line of most datasets; the head of a huge one, whose
later lines the frame's own reader checks), a folder up to SCAN_ENTRIES entries, nothing is imported
but the standard library (and pyarrow's metadata reader for a parquet file).
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Iterator

from ..util.errors import JobError
from .inputs import check_not_special

DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")
SCAN_BYTES = 32 * 2**20
SCAN_ENTRIES = 10_000
MAX_FILES = 8  # data files of a folder checked; a sharded dataset's first shards stand for the rest


def _usable(row: Any) -> bool:
    """A row the runners can train on: an object with a text column or chat messages (engine/data.py)."""
    return isinstance(row, dict) and (isinstance(row.get("messages"), list)
                                      or isinstance(row.get("conversations"), list)
                                      or any(isinstance(v, str) and v.strip() for v in row.values()))


def _head(path: Path, label: str) -> tuple[str, bool]:
    """The first SCAN_BYTES of a text file, cut at a line end, and whether that is all of it."""
    check_not_special(path, label)  # a FIFO would wait for a writer forever, a device never end
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            data = handle.read(SCAN_BYTES + 1)
    except OSError as error:
        raise JobError(f"{label}: cannot read {path} ({error.strerror or error})") from None
    whole = len(data) <= SCAN_BYTES
    if not whole:
        data = data[:data.rfind(b"\n") + 1]
    try:
        return data.decode("utf-8"), whole
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise JobError(f"{label}: line {line} of {path} is not UTF-8 text; save the file as UTF-8") from None


def _json_lines(text: str, path: Path, label: str) -> Iterator[Any]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as error:
            why = getattr(error, "msg", None) or ("nests too deeply" if isinstance(error, RecursionError) else str(error))
            raise JobError(f"{label}: line {number} of {path} is not JSON ({why}); fix or remove that line") from None
        if not isinstance(row, dict):
            raise JobError(f"{label}: line {number} of {path} is a JSON {type(row).__name__}, not an object "
                           'of columns such as {"text": ...}; fix or remove that line')
        yield row


def _rows(path: Path, label: str) -> Iterator[Any]:
    """The rows of one data file that the scan reaches."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from _parquet(path, label)
        return
    text, whole = _head(path, label)
    if suffix == ".jsonl":
        yield from _json_lines(text, path, label)
    elif suffix == ".json":
        try:
            data = json.loads(text) if whole else None
        except (ValueError, RecursionError):
            data = None  # JSON lines in a .json file (datasets reads both): checked line by line
        if isinstance(data, list):
            yield from data
        elif isinstance(data, dict):  # columns: {"text": [...], ...}
            columns = [v for v in data.values() if isinstance(v, list)]
            for values in zip(*columns):
                yield dict(zip(data, values))
        else:
            yield from _json_lines(text, path, label)
    elif suffix == ".csv":
        yield from _csv_rows(text, path, label)
    else:  # .txt: one row per line that holds text
        yield from ({"text": line} for line in text.splitlines() if line.strip())


def _csv_rows(text: str, path: Path, label: str) -> Iterator[Any]:
    """The rows of a CSV file's head. A field may be as long as the scan (the csv module's default limit
    of 128 KiB refuses a long document that the frame's reader takes); a malformed line is one line."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, SCAN_BYTES))
    try:
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        for values in reader:
            yield dict(zip(header or (), values))
    except csv.Error as error:
        raise JobError(f"{label}: line {reader.line_num} of {path} is not CSV ({error}); fix or remove that "
                       "line") from None
    finally:
        csv.field_size_limit(limit)


def _parquet(path: Path, label: str) -> Iterator[Any]:
    try:
        import pyarrow.parquet as parquet

        rows = parquet.read_metadata(str(path)).num_rows
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a file that is not parquet
        raise JobError(f"{label}: {path} is not a parquet file pyarrow reads ({type(error).__name__}: "
                       f"{str(error).splitlines()[0] if str(error) else ''})") from None
    if rows:
        yield {"text": "(parquet rows)"}  # the columns are the frame's to read; the count is what is checked


def _files(folder: Path, label: str) -> tuple[list[Path], bool]:
    """(data files, whether the folder holds images) of a folder, visiting at most SCAN_ENTRIES entries."""
    files, images, seen = [], False, 0
    for root, folders, names in os.walk(folder):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(names):
            seen += 1
            suffix = Path(name).suffix.lower()
            if suffix in DATA_SUFFIXES and not name.startswith("."):
                files.append(Path(root) / name)
            images = images or suffix in IMAGE_SUFFIXES
        if seen > SCAN_ENTRIES:
            break
    return files, images


# Files whose rows passed in this process, as they were then (path, size, modification time).
_PASSED: set[tuple[tuple[str, int, int], ...]] = set()


def _identity(files: list[Path]) -> tuple[tuple[str, int, int], ...]:
    out = []
    for file in files:
        try:
            stat = file.stat()
        except OSError:
            return ()   # unreadable: the scan says why
        out.append((str(file.resolve()), stat.st_size, stat.st_mtime_ns))
    return tuple(out)


def check_rows(value: str, label: str = "") -> None:
    """`dataset=value` (a local file or folder that exists) holds at least one usable row; else one line."""
    label = label or f"dataset={value}"
    path = Path(value).expanduser()
    if path.is_dir():
        if (path / "dataset_info.json").exists():  # written by `save_to_disk`: datasets' own format
            return
        files, images = _files(path, label)
        if not files:
            if images:  # an image folder (datasets' imagefolder): rows are its images
                return
            raise JobError(f"{label}: the folder holds no data file ({', '.join(DATA_SUFFIXES)}) and no "
                           "images; give a file or a folder with one")
        checked = files[:MAX_FILES]
    else:
        checked = [path]
    seen = _identity(checked)
    if seen and seen in _PASSED:
        return  # the words' check and autotune.tune's, in one process: the scan once
    total = usable = 0
    for file in checked:  # every row the scan reaches: a malformed line after good ones fails the frame too
        for row in _rows(file, label):
            total += 1
            usable += _usable(row)
    if usable:
        if seen:
            _PASSED.add(seen)
        return
    where = str(checked[0]) if len(checked) == 1 else f"the {len(checked)} data files of {path}"
    if not total:
        raise JobError(f"{label}: {where} holds no rows; give a dataset with at least one")
    raise JobError(f"{label}: none of the {total} rows of {where} has a text column (text, messages, "
                   "prompt/completion or any column of text); give a dataset with one")
