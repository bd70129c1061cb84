"""Where trials run: `get_executor(host)`."""

from __future__ import annotations

import os

from ..util.errors import JobError
from .base import Executor
from .local import LocalExecutor


def get_executor(host: str, run: str = "", key: str = "", trust_new: bool = False, python: str = "python3",
                 config: str = "") -> Executor:
    if host == "local":
        return LocalExecutor()
    if host == "ray" or host.startswith("ray://"):
        return _ray_executor(host)
    from ..util.extras import need

    need("paramiko", f"host={host} (the SSH executor)")
    from .ssh import SSHExecutor  # paramiko only when a remote box is used

    # user@ip[:port] or an alias: resolved through the SSH config (`config`, else ~/.ssh/config).
    return SSHExecutor(host, run, key=key, trust_new=trust_new, python=python, config=config)


def _ray_executor(host: str) -> Executor:
    """`host=ray` joins the cluster named by RAY_ADDRESS (as Ray's own tools do); `host=ray://HEAD:PORT`
    joins through Ray Client."""
    address = os.environ.get("RAY_ADDRESS", "") if host == "ray" else host
    if not address:
        raise JobError("host=ray: RAY_ADDRESS is not set; export RAY_ADDRESS=HEAD:6379 (the cluster's head) "
                       "or give host=ray://HEAD:10001")
    try:
        from .ray import RayExecutor  # ray only when a cluster is used
    except ImportError:
        raise JobError(f"host={host}: Ray is not installed; pip install 'autotune[ray]'") from None
    return RayExecutor(address)


__all__ = ["Executor", "LocalExecutor", "get_executor"]
