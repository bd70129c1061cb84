"""The knowledge-base folder of the `autotune kb ...` commands (`--kb`): the one place that checks it,
for kb_commands.py and kb_import.py alike."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..util.errors import JobError
from ..config.inputs import check_writable_folder
from ..kb.folder import kb_folder
from ..kb.store import Store


def folder_of(args: argparse.Namespace) -> Path:
    return kb_folder(args.kb or "")


def store_of(args: argparse.Namespace, writing: bool = False) -> Store | None:
    """The folder's store; None for a folder that does not exist yet and is only read (not created)."""
    folder = folder_of(args)
    if writing:
        check_writable_folder(folder, f"--kb {folder}")
    elif folder.exists() and not folder.is_dir():
        raise JobError(f"--kb {folder}: is a file, not a knowledge-base folder; give its folder")
    return Store(folder) if writing or folder.is_dir() else None
