"""Files written so that a crash leaves either the old content or the new, never half of either."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: dict[str, Any], indent: int | None = 1) -> None:
    """`indent=None` for bulk data (token rows), where one value per line would multiply the size."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=indent)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
