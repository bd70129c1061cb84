"""Bookkeeping for the Ray executor that needs no ray: which GPU models the cluster's nodes carry,
each slot's own folder on its node (and the lock that says its slot is alive), and the archives the
run's inputs and a frame's outputs travel in between the driver and the nodes.

Runs on the driver and, imported by the slot actors in executors/ray.py, on every node.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from ..util.errors import AutotuneError
from ..util.io import lock, try_lock

LABEL = "accelerator_type:"
# Held by a slot for its lifetime inside its folder: a folder whose lock is free was left by a dead slot.
LOCK = ".slot.lock"


def cluster_models(nodes: Sequence[Mapping[str, object]]) -> dict[str, float]:
    """GPU model -> GPUs of that model over the cluster's alive nodes, from Ray's accelerator labels
    (`ray.nodes()`: Ray's own records, read for `Alive` and `Resources` only)."""
    models: dict[str, float] = {}
    for node in nodes:
        resources = node.get("Resources")
        if not node.get("Alive") or not isinstance(resources, Mapping):
            continue
        gpus = resources.get("GPU")
        for name in resources:
            if name.startswith(LABEL) and gpus:
                model = name[len(LABEL):]
                models[model] = models.get(model, 0.0) + float(gpus)
    return models


def pick_model(models: dict[str, float], wanted: str, address: str) -> str:
    """The job's GPU model among the cluster's: `gpu=` when given (case aside), else the only one there is."""
    if not models:
        raise AutotuneError(f"host=ray: the cluster at {address} has no GPU with an accelerator_type label")
    if wanted:
        match = next((m for m in models if m.lower() == wanted.lower()), None)
        if match is None:
            raise AutotuneError(f"gpu={wanted}: the cluster at {address} has GPUs of model "
                                f"{', '.join(sorted(models))}; name one of them with gpu=MODEL")
        return match
    if len(models) > 1:
        raise AutotuneError(f"host=ray: the cluster at {address} has GPUs of models {', '.join(sorted(models))}; "
                            "a comparison needs one model, name it with gpu=MODEL")
    return next(iter(models))


def slot_folder(base: Path) -> tuple[Path, int]:
    """A folder of its own for this slot under `base` (this user's, 0700), and the descriptor of the lock
    it holds on it for its lifetime. Folders whose lock is free belong to slots that are gone (an actor
    killed when its node was declared lost runs no cleanup, and the kernel drops its lock): they are
    removed first, so a node's disk does not fill over tunes. A lock, not a pid: pids are reused and
    differ across the process namespaces of containers that share /tmp."""
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(base)
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
        # Not ours to sweep (made by someone else, or a link): a plain temporary folder instead.
        base = Path(tempfile.gettempdir())
    else:
        os.chmod(base, 0o700)  # made before this rule, or under another umask
        for folder in base.iterdir():
            if _abandoned(folder):
                shutil.rmtree(folder, ignore_errors=True)
    root = Path(tempfile.mkdtemp(prefix="slot-", dir=base))
    return root, lock(root / LOCK)


def _abandoned(folder: Path) -> bool:
    """Whether a slot folder's lock is free: its slot is gone. A folder without a lock is being made."""
    return try_lock(folder / LOCK)


def pack_paths(paths: dict[str, Path]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, path in sorted(paths.items()):
            archive.add(path, arcname=name)
    return buffer.getvalue()


def pack(folder: Path) -> bytes:
    return pack_paths({path.name: path for path in folder.iterdir()})


def unpack(data: bytes, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        # The data filter (no links out, no absolute paths) where this Python has it (3.10.12+).
        archive.extractall(folder, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
