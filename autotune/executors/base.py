"""Where a trial runs. An executor takes a spec, runs a runner in a child process, returns a result.

Expected failures come back as states on the result (oom, crash, timeout, invalid), never raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..config.types import JsonObject


class Executor(Protocol):
    def run(self, spec: JsonObject, trial_dir: Path, timeout_s: float) -> JsonObject:
        """Run `spec` with its runner; return the runner's result plus `wall_s` and `exit_code`."""
        raise NotImplementedError  # abstract
