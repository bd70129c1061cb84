"""Where a trial's temporary files go, for the local executor and the SSH heartbeat alike: tempfile's,
multiprocessing's pymp-* and torch.compile's caches, in the trial's folder (`tmp` there) or, where that
path is too long for the sockets made in it, a short private folder under /tmp. Standard library only:
the heartbeat runs on the remote box."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

# AF_UNIX allows 107 bytes; multiprocessing and torch add ~40 of their own to the folder's path.
TMP_PATH_MAX = 64
# The caches torch.compile writes, by the variable that places each and its folder under TMPDIR.
CACHE_FOLDERS = (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"))
# Names the fork server's own folder to the server (forkserver_home.py), which removes it when it ends.
FORKSERVER_HOME_ENV = "AUTOTUNE_FORKSERVER_HOME"


def short_base() -> Path:
    """Where a folder goes when the trial's own path is too long: /tmp, or the system's temp folder."""
    import tempfile

    return Path("/tmp") if os.access("/tmp", os.W_OK) else Path(tempfile.gettempdir())


def placed_by_user(name: str, environ: Mapping[str, str]) -> bool:
    """Whether the cache variable `name` was set on purpose. The first compile in a process writes
    torch's own default (`<tmp>/torchinductor_<user>`) into os.environ, and every process started from it
    (a Ray node's workers, our fork server) inherits it: that value is torch's choice, not the user's."""
    value = environ.get(name, "")
    if not value:
        return False
    return not (name == "TORCHINDUCTOR_CACHE_DIR" and os.path.basename(value.rstrip("/")).startswith("torchinductor_"))


def tmp_env(tmp: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """TMPDIR and the compile caches pointed into `tmp`; a cache the user placed on purpose (set in
    `environ`) stays theirs."""
    return {"TMPDIR": str(tmp),
            **{name: str(tmp / folder) for name, folder in CACHE_FOLDERS if not placed_by_user(name, environ)}}
