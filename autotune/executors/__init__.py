"""Where trials run: `get_executor(host)`."""

from __future__ import annotations

from ..errors import JobError
from .base import Executor
from .local import LocalExecutor


def get_executor(host: str, run: str = "", key: str = "", trust_new: bool = False, python: str = "python3") -> Executor:
    if host == "local":
        return LocalExecutor()
    if "@" not in host:
        raise JobError(f"host={host!r}: expected local or user@host[:port]")
    from .ssh import SSHExecutor  # paramiko only when a remote box is used

    return SSHExecutor(host, run, key=key, trust_new=trust_new, python=python)


__all__ = ["Executor", "LocalExecutor", "get_executor"]
