"""Where the knowledge base lives, and the cache of measured device peaks kept in it.

Folder: `kb=PATH`, else `$AUTOTUNE_KB`, else `~/.autotune/kb`. Updates are read-modify-write under an
exclusive file lock and land by atomic rename, so two tuners sharing a folder lose nothing.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..config.types import JsonObject
from ..util.errors import RecordError
from ..util.io import locked, write_json_atomic

PEAKS_FILE = "device_peaks.json"


def kb_folder(job_kb: str = "") -> Path:
    return Path(job_kb or os.environ.get("AUTOTUNE_KB") or Path.home() / ".autotune" / "kb").expanduser()


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with locked(folder / ".lock"):
        yield


def read_peak_cache(folder: Path) -> JsonObject:
    """Measured peaks by device fingerprint, each entry as the device probe reported it (an open set of facts)."""
    path = folder / PEAKS_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise RecordError(f"{path} is corrupt ({error.msg}); delete it and the peaks are measured again") from error
    peaks: JsonObject = data.get("peaks", {})
    return peaks


def remember_peaks(folder: Path, peaks: Mapping[str, Any]) -> None:
    if peaks.get("cached"):
        return
    entry = {k: v for k, v in peaks.items() if k != "cached"}
    with _locked(folder):
        known = read_peak_cache(folder)
        known[entry["fingerprint"]] = entry
        write_json_atomic(folder / PEAKS_FILE, {"schema_version": 1, "peaks": known})
