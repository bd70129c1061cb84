"""The per-trial work folder of a script trial: a copy of the user's folder in which the script and its
config files carry this trial's edits (the configs' keys, the script's own calls' keywords), so the
script finds its files at the paths it expects and whatever it writes stays in the trial's folder."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ...util.errors import JobError

if TYPE_CHECKING:
    from ...config.messages import TrialSpec


def _edited(text: str, suffix: str, edits: list[tuple[list[str], Any]]) -> str:
    import json

    import yaml

    if suffix == ".py":
        from . import pyconfig

        return pyconfig.edit(text, edits)
    data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    for path, value in edits:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return json.dumps(data, indent=2) if suffix == ".json" else yaml.safe_dump(data, sort_keys=False)


def build_workdir(spec: TrialSpec) -> tuple[Path, Path, list[str], dict[str, Any]]:
    """The trial's copy of the user's folder: (its root, the script's copy, the argv, how it was copied)."""
    from . import tree

    from ...config.messages import thawed

    script = thawed(spec.script or {})   # plain lists and dicts, as the edits and YAML writers take them
    workdir = spec.work_folder
    cwd, mirror = Path(script["cwd"]), workdir / "tree"
    files: dict[Path, bytes] = {Path(script["path"]): Path(script["path"]).read_bytes()}
    if script.get("source_edits"):   # keywords of the script's own calls (workloads/script/frameworks.py)
        from .frameworks import edit_source

        files[Path(script["path"])] = edit_source(files[Path(script["path"])].decode(), script["source_edits"]).encode()
    for config in script["configs"]:
        original = Path(config["path"])
        text = original.read_text()
        edits = script["edits"].get(config["label"], [])
        files[original] = (_edited(text, original.suffix.lower(), edits) if edits else text).encode()
    placed: dict[Path, Path] = {}
    for original in files:
        inside = original.is_relative_to(cwd)
        placed[original] = mirror / (original.relative_to(cwd) if inside else Path("_outside", *original.parts[1:]))
    # A copy, never links: whatever the script writes, truncates or deletes stays in the trial's folder.
    try:
        copied = tree.copy(tree.plan(cwd, [Path(p) for p in script.get("exclude", [])] + [workdir]),
                           mirror)
    except JobError as error:
        from ...engine.train import TrialFault

        raise TrialFault("invalid", str(error)) from None
    for original, copy in placed.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.unlink(missing_ok=True)
        copy.write_bytes(files[original])
    # The user's own arguments may name a config by its original path: point them at the copy.
    renamed = {str(o): str(c) for o, c in placed.items()}

    def rename(word: str) -> str:
        option, eq, value = word.partition("=")
        return f"{option}={renamed.get(value, value)}" if eq and option.startswith("--") else renamed.get(word, word)

    argv = [rename(a) for a in script.get("args", [])] + list(spec.flags or ())
    return mirror, placed[Path(script["path"])], argv, copied


@contextmanager
def as_main(script: Path, argv: list[str], mirror: Path) -> Iterator[None]:
    """The process as `python script ARGV` run in the trial's copy would see it (argv, the script's folder
    first on sys.path, the copy as the working folder), put back after: the runner runs the script in
    its own process, then reads what it measured."""
    old_argv, old_path, old_cwd = sys.argv, list(sys.path), os.getcwd()
    sys.argv, sys.path[:0] = [str(script), *argv], [str(script.parent)]
    os.chdir(mirror)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        os.chdir(old_cwd)
