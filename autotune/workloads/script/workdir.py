"""The per-trial work folder of a script trial: a mirror of the user's folder in which the script and its
config files are copies (the configs with this trial's edits, the script with its own calls' keywords
edited), everything else a link to the original, so the script finds its files at the paths it expects."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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


def build_workdir(spec: dict[str, Any]) -> tuple[Path, Path, list[str]]:
    """The mirror of the user's folder for this trial: (its root, the script's copy, the argv)."""
    script = spec["script"]
    cwd, mirror = Path(script["cwd"]), Path(spec["workdir"]) / "tree"
    exclude = {Path(p) for p in script.get("exclude", [])}
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
    needed = {cwd}
    for original in files:
        if original.is_relative_to(cwd):
            needed.update(p for p in original.parents if p.is_relative_to(cwd))
    for folder in sorted(needed):
        target = mirror / folder.relative_to(cwd)
        target.mkdir(parents=True, exist_ok=True)
        for entry in folder.iterdir():
            if entry in exclude or entry in needed or entry in files or (target / entry.name).exists():
                continue
            (target / entry.name).symlink_to(entry)
    for original, copy in placed.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(files[original])
    # The user's own arguments may name a config by its original path: point them at the copy.
    renamed = {str(o): str(c) for o, c in placed.items()}

    def rename(word: str) -> str:
        option, eq, value = word.partition("=")
        return f"{option}={renamed.get(value, value)}" if eq and option.startswith("--") else renamed.get(word, word)

    argv = [rename(a) for a in script.get("args", [])] + list(spec.get("flags", []))
    return mirror, placed[Path(script["path"])], argv
