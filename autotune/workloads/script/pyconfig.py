"""Python config files (nanoGPT's `config/train_*.py`) and a script's module globals, read by AST and
edited as text: autotune never executes a user's Python.

A setting is a module-level `name = <literal>`; anything computed (`dtype = 'bf16' if ... else ...`)
is not a setting autotune can read, and is left alone. An edit replaces the literal's own characters
(comments and layout stay as they were), or appends `name = value` where the file lacks the name: a
config file is run top to bottom, so the last assignment is what the script sees.
"""

from __future__ import annotations

import ast
from typing import Any

from ...util.errors import JobError


def _tree(text: str, label: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as error:
        raise JobError(f"{label}: not valid Python ({error.msg}, line {error.lineno}); fix the file") from None


def assignments(tree: ast.Module) -> dict[str, tuple[object, ast.expr]]:
    """name -> (literal value, value node) for each module-level `name = literal` (the last one wins)."""
    found: dict[str, tuple[object, ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        try:
            found[target] = (ast.literal_eval(value), value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            found.pop(target, None)  # computed: what the file says is no literal autotune can read
    return found


def read(text: str, label: str) -> dict[str, object]:
    """A Python config file's literal settings (the user's own: any literal, of any type)."""
    return {name: value for name, (value, _) in assignments(_tree(text, label)).items()}


def edit(text: str, edits: list[tuple[list[str], Any]]) -> str:
    """The file with each `name` set to `value`, by replacing the literal's characters in place."""
    tree = _tree(text, "config")
    found = assignments(tree)
    # AST columns count UTF-8 bytes, so the splice is done on bytes.
    data = text.encode()
    offsets = [0]
    for line in data.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    spans = []
    appended = []
    for path, value in edits:
        name = path[-1]
        if name in found:
            node = found[name][1]
            start = offsets[node.lineno - 1] + node.col_offset
            end = offsets[(node.end_lineno or node.lineno) - 1] + (node.end_col_offset or 0)
            spans.append((start, end, repr(value).encode()))
        else:
            appended.append(f"{name} = {value!r}\n")
    for start, end, new in sorted(spans, reverse=True):
        data = data[:start] + new + data[end:]
    text = data.decode()
    if appended:
        text += ("" if text.endswith("\n") or not text else "\n") + "".join(appended)
    return text
