"""How a script takes its settings, read from its source (never run), and what its command line says.

Styles, each found in the script's AST:
- `dataclass`: `HfArgumentParser((...))` or `TrlParser((...))` over dataclasses. Fields of library
  classes (`TrainingArguments`, `SFTConfig`, `ModelConfig`) and their defaults come from the installed
  class, built once with no user value: what its `__post_init__` resolves (SFTConfig's bf16 where fp16
  is off) is what the parser would use for an absent key. Fields of the script's own dataclasses are
  read from their annotations.
- `configurator`: module globals overridden by `exec(open(...).read())` of a configurator that takes
  Python config files and `--key=value` flags (nanoGPT).
- `argparse`: `add_argument` calls (read in discover.py).
A JSON or YAML file given as the one argument, or with `--config`, and a Python config given as a
positional argument to a configurator script, are config files the script reads.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PARSERS = ("HfArgumentParser", "TrlParser")
# Classes are imported only from these libraries: autotune never imports a user's module.
LIBRARIES = ("transformers", "trl", "peft")
CONFIG_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class Style:
    kind: str                                  # "dataclass" | "configurator" | "argparse" | "plain"
    classes: tuple[str, ...] = ()              # the dataclasses handed to the parser, in order


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def style_of(tree: ast.Module) -> Style:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in PARSERS and node.args:
            first = node.args[0]
            items = first.elts if isinstance(first, (ast.Tuple, ast.List)) else [first]
            return Style("dataclass", tuple(n for n in (_name(i) for i in items) if n))
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _name(node.value.func) == "exec":
            return Style("configurator")
    if any(isinstance(n, ast.Call) and _name(n.func) == "add_argument" for n in ast.walk(tree)):
        return Style("argparse")
    return Style("plain")


def read_args(args: list[str]) -> tuple[list[tuple[str, str | bool, str]], list[str]]:
    """The flags the user's arguments set, as (option, value, form) with value True for a bare flag and
    form "=" or " "; and the config files they name (`--config X`, or a positional config file)."""
    flags: list[tuple[str, str | bool, str]] = []
    configs: list[str] = []
    position = 0
    while position < len(args):
        word = args[position]
        if word.startswith("--") and len(word) > 2:
            name, eq, inline = word.partition("=")
            value: str | bool
            if eq:
                value, form = inline, "="
            elif position + 1 < len(args) and not args[position + 1].startswith("--"):
                position += 1
                value, form = args[position], " "
            else:
                value, form = True, " "
            if name == "--config" and isinstance(value, str):
                configs.append(value)
            else:
                flags.append((name, value, form))
        elif Path(word).suffix.lower() in CONFIG_SUFFIXES + (".py",):
            configs.append(word)
        position += 1
    return flags, configs


def _imports(tree: ast.Module) -> dict[str, str]:
    """name -> the library module it is imported from (`from trl import SFTConfig`)."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LIBRARIES:
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
    return found


def _plain(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


def library_defaults(module: str, name: str) -> dict[str, object]:
    """Each field of an installed library dataclass and the value the parser gives it when absent (the
    library's own values, of any type: discovery keeps the simple ones)."""
    cls = getattr(importlib.import_module(module), name, None)
    if cls is None or not dataclasses.is_dataclass(cls):
        return {}
    declared: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            declared[f.name] = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            declared[f.name] = None
    unresolved = [name for name, value in declared.items() if value is None]
    resolved = _resolved(cls, unresolved) if unresolved else {}
    return {**declared, **resolved}


def _resolved(cls: Any, names: list[str]) -> dict[str, object]:
    """What the class's `__post_init__` makes of the defaults it leaves None (SFTConfig: bf16 = not fp16,
    activation checkpointing on). Built on the CPU (`use_cpu`, which alone changes pin_memory and the
    device: those come from the declared defaults), with the process's environment and accelerate's
    shared state put back, so that nothing of it stays in autotune's own process."""
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, str | bool] = {}
    if "output_dir" in fields:
        kwargs["output_dir"] = tempfile.gettempdir()
    if "use_cpu" in fields:
        kwargs["use_cpu"] = True
    environment = dict(os.environ)
    try:
        from accelerate.state import PartialState

        state_before = dict(PartialState._shared_state)
    except Exception:  # accelerate absent or reorganised: nothing of its state to put back
        PartialState, state_before = None, {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # its deprecation notices are not the user's concern here
            built = cls(**kwargs)
        return {name: _plain(getattr(built, name, None)) for name in names if name not in kwargs}
    except Exception:  # a class that cannot be built here: its declared defaults are the best reading
        return {}
    finally:
        os.environ.clear()
        os.environ.update(environment)
        if PartialState is not None:
            PartialState._shared_state.clear()
            PartialState._shared_state.update(state_before)


def _own_fields(node: ast.ClassDef) -> dict[str, object]:
    """field -> its default as a literal in the source (None where it has none)."""
    values: dict[str, object] = {}
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        value = item.value
        if isinstance(value, ast.Call) and _name(value.func) == "field":
            value = next((k.value for k in value.keywords if k.arg == "default"), None)
        try:
            values[item.target.id] = ast.literal_eval(value) if value is not None else None
        except (ValueError, TypeError, SyntaxError):
            continue
    return values


def dataclass_fields(tree: ast.Module, classes: tuple[str, ...]) -> dict[str, tuple[str, object]]:
    """field -> (the class that declares it, its default) over the parser's dataclasses."""
    imports = _imports(tree)
    defined = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    fields: dict[str, tuple[str, object]] = {}

    def add(name: str, seen: frozenset[str] = frozenset()) -> None:
        if name in seen:
            return
        if name in defined:
            for base in defined[name].bases:
                if (base_name := _name(base)) is not None:
                    add(base_name, seen | {name})
            for field_name, value in _own_fields(defined[name]).items():
                fields[field_name] = (name, value)
        elif name in imports:
            for field_name, value in library_defaults(imports[name], name).items():
                fields.setdefault(field_name, (name, value))

    for name in classes:
        add(name)
    return fields


def needs_parse(tree: ast.Module) -> bool:
    """Whether reading the source falls short of what the script's parser returns: dataclasses handed
    to the parser by a name that is no class (`TrlParser(dataclass_types)`, built in a function), or an
    argparse default for a setting autotune reads that is not a literal (`default=int(os.environ[...])`).
    Such a script is run until its parser returns (parsed.py)."""
    style = style_of(tree)
    if style.kind == "dataclass":
        known = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)} | set(_imports(tree))
        return not style.classes or any(name not in known for name in style.classes)
    if style.kind != "argparse":
        return False
    from .discover import _alias

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "add_argument":
            flags = [str(a.value) for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if flags and default is not None and _alias(flags[-1].lstrip("-")):
                try:
                    ast.literal_eval(default)
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                    return True
    return False
