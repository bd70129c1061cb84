"""Settings that Accelerate and Lightning scripts hold outside a config file or a flag: in the
script's own calls (`Accelerator(gradient_accumulation_steps=8)`, `Trainer(precision="32-true")`), in
the launcher's flags (`accelerate launch --mixed_precision no`), in accelerate's environment
(`ACCELERATE_MIXED_PRECISION`), and in what a `LightningCLI` fills in from its classes' defaults
(`--trainer.precision`, `--data.batch_size`).

Each becomes a `Setting` whose source says how a trial changes it: `script` edits the keyword in the
script's copy (or adds it to the call), `launcher` passes the launcher's flag again, `env` sets the
variable for the trial, and a LightningCLI default is passed as its `--section.key` flag after the
user's own arguments (jsonargparse takes the last one).
"""

from __future__ import annotations

import ast
from typing import Any

from ...config.types import KnobValue
from .discover import Edits, Setting, _alias

SCRIPT, ENV, LAUNCHER = "script", "env", "launcher"
PRECISION_ENV = "ACCELERATE_MIXED_PRECISION"
_LIGHTNING = ("lightning", "pytorch_lightning")
# Trainer keywords a trial may change, and Lightning's own default for each.
_TRAINER: dict[str, KnobValue] = {"precision": "32-true", "accumulate_grad_batches": 1}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _from(tree: ast.Module, name: str, modules: tuple[str, ...]) -> bool:
    """Whether `name` is imported from one of `modules` (or called through such a module's alias)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in modules:
            if any((a.asname or a.name) == name for a in node.names):
                return True
    return False


def _module_aliases(tree: ast.Module, modules: tuple[str, ...]) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in modules:
            found |= {a.asname or a.name for a in node.names if a.name == "pytorch"}
    return found


def calls(tree: ast.Module, name: str, modules: tuple[str, ...]) -> list[ast.Call]:
    """Calls of `name` that come from `modules`: `Trainer(...)` from lightning, not transformers'."""
    direct = _from(tree, name, modules)
    aliases = _module_aliases(tree, modules)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _name(node.func) != name:
            continue
        if isinstance(node.func, ast.Name) and direct:
            out.append(node)
        elif isinstance(node.func, ast.Attribute) and _root(node.func) in aliases:
            out.append(node)
    return out


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _in_call(call: ast.Call, callee: str, names: dict[str, KnobValue]) -> list[Setting]:
    """A setting per keyword of `names`: its literal value (edited in place), or, where the call lacks
    it, the library's default (added to the call by a trial). A keyword set from a variable is the
    script's flag or config, which discovery reads where it is."""
    found = []
    for keyword, default in names.items():
        role = _alias(keyword)
        given = _keyword(call, keyword)
        if role is None:
            continue
        if given is None:
            found.append(Setting(role, default, SCRIPT, (callee, keyword), "default"))
        elif isinstance(given.value, ast.Constant) and isinstance(given.value.value, (bool, int, float, str)):
            found.append(Setting(role, given.value.value, SCRIPT, (callee, keyword)))
    return found


def _launcher_value(launcher: list[str], flag: str) -> str | None:
    for index, word in enumerate(launcher):
        name, eq, value = word.partition("=")
        if name == flag:
            return value if eq else (launcher[index + 1] if index + 1 < len(launcher) else None)
    return None


def accelerate(tree: ast.Module, launcher: list[str], environ: dict[str, str]) -> list[Setting]:
    """An `Accelerator(...)`'s accumulation and precision: the call's keywords, else where accelerate
    reads its precision (the launcher's `--mixed_precision`, else ACCELERATE_MIXED_PRECISION)."""
    found: list[Setting] = []
    uses_accumulate = any(isinstance(n, ast.Call) and _name(n.func) == "accumulate" for n in ast.walk(tree))
    for call in calls(tree, "Accelerator", ("accelerate",))[:1]:
        found += [s for s in _in_call(call, "Accelerator", {"mixed_precision": None}) if s.origin != "default"]
        if uses_accumulate:   # an added keyword changes nothing unless the loop accumulates through it
            found += _in_call(call, "Accelerator", {"gradient_accumulation_steps": 1})
        if _keyword(call, "mixed_precision") is None:
            if launcher[:2] == ["accelerate", "launch"]:
                value = _launcher_value(launcher, "--mixed_precision")
                found.append(Setting("precision", value or "no", LAUNCHER, ("--mixed_precision",),
                                     "flag" if value else "default"))
            else:
                value = environ.get(PRECISION_ENV)
                found.append(Setting("precision", value or "no", ENV, (PRECISION_ENV,), "flag" if value else "default"))
    return found


def lightning(tree: ast.Module) -> list[Setting]:
    """A Lightning `Trainer(...)`'s precision and accumulation, and a `LightningCLI`'s defaults as flags."""
    found: list[Setting] = []
    for call in calls(tree, "Trainer", _LIGHTNING)[:1]:
        found += _in_call(call, "Trainer", _TRAINER)
    cli = calls(tree, "LightningCLI", _LIGHTNING)
    if not cli:
        return found
    for keyword, default in _TRAINER.items():
        found.append(Setting(_alias(keyword) or keyword, default, "argv", (f"--trainer.{keyword}", "value"), "default"))
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    given: list[ast.expr | None] = [*cli[0].args[:2], None, None]
    for index, (section, keyword) in enumerate((("model", "model_class"), ("data", "datamodule_class"))):
        named = _keyword(cli[0], keyword)
        node = named.value if named is not None else given[index]
        target = classes.get(_name(node) or "") if node is not None else None
        for name, value in _init_defaults(target).items() if target is not None else ():
            role = _alias(name)
            if role and isinstance(value, (bool, int, float, str)):
                found.append(Setting(role, value, "argv", (f"--{section}.{name}", "value"), "default"))
    return found


def _init_defaults(node: ast.ClassDef) -> dict[str, object]:
    """`__init__`'s keyword -> its default, where that is a constant (whatever its type)."""
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return {}
    arguments = init.args.args[len(init.args.args) - len(init.args.defaults):]
    pairs = list(zip(arguments, init.args.defaults)) + list(zip(init.args.kwonlyargs, init.args.kw_defaults))
    out: dict[str, object] = {}
    for argument, default in pairs:
        if isinstance(default, ast.Constant):
            out[argument.arg] = default.value
    return out


def settings(tree: ast.Module, launcher: list[str], environ: dict[str, str]) -> list[Setting]:
    return accelerate(tree, launcher, environ) + lightning(tree)


# -- applying a trial's edits --------------------------------------------------------------------
def split(files: Edits) -> tuple[Edits, list[list[Any]], dict[str, str], list[tuple[str, str]]]:
    """A trial's edits by where they go: config files, the script's own calls, the environment, the
    launcher's flags."""
    configs = {label: edits for label, edits in files.items() if label not in (SCRIPT, ENV, LAUNCHER)}
    environment = {path[0]: str(value) for path, value in files.get(ENV, [])}
    launcher = [(path[0], str(value)) for path, value in files.get(LAUNCHER, [])]
    return configs, [list(e) for e in files.get(SCRIPT, [])], environment, launcher


def with_flags(launcher: list[str], flags: list[tuple[str, str]]) -> list[str]:
    """The launcher's words with each flag set to its trial value (replaced where given, else added)."""
    words = list(launcher)
    for flag, value in flags:
        for index, word in enumerate(words):
            if word == flag and index + 1 < len(words):
                words[index + 1] = value
                break
            if word.startswith(flag + "="):
                words[index] = f"{flag}={value}"
                break
        else:
            words[len(launcher[:2]) if launcher[:1] == ["accelerate"] else 1:0] = [flag, value]
    return words


def edit_source(text: str, edits: list[list[Any]]) -> str:
    """The script's text with each (callee, keyword) set to its value: the literal replaced where the
    call has it, the keyword added where it lacks it. Only the first such call is edited, as read."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    data = text.encode()
    changes: list[tuple[int, int, str]] = []
    for (callee, keyword), value in edits:
        call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) == callee), None)
        if call is None:
            continue
        given = _keyword(call, keyword)
        if given is not None:
            literal = given.value
            start = offsets[literal.lineno - 1] + literal.col_offset
            end = offsets[(literal.end_lineno or literal.lineno) - 1] + (literal.end_col_offset or 0)
            changes.append((start, end, repr(value)))
        else:   # before the closing parenthesis
            end = offsets[(call.end_lineno or call.lineno) - 1] + (call.end_col_offset or 1) - 1
            before = data[:end].rstrip()
            joiner = ", " if (call.args or call.keywords) and not before.endswith(b",") else ""
            changes.append((end, end, f"{joiner}{keyword}={value!r}"))
    for start, end, new in sorted(changes, reverse=True):
        data = data[:start] + new.encode() + data[end:]
    return data.decode()
