"""Where trials run: `get_executor(host)`."""

from __future__ import annotations

from ..errors import JobError
from .base import Executor
from .local import LocalExecutor


def get_executor(host: str) -> Executor:
    if host == "local":
        return LocalExecutor()
    raise JobError(f"host={host!r}: remote hosts over SSH are not available in this version; use host=local")


__all__ = ["Executor", "LocalExecutor", "get_executor"]
