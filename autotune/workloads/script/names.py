"""The user's own names for knobs (`script_knobs=micro_bsz:per_device_train_batch_size,accum:...`), and
the one line that says what was found when a script's settings are not understood.

A script may call its micro-batch `micro_bsz` or its accumulation `accum`: no name table holds every
trainer's words. The job key maps a name the script takes (a config key at any nesting, a flag, a
global, a dataclass field) onto a knob; that name then stands for the knob and beats any built-in
alias of the same role. When discovery falls short, `way_out` names what the script does take and the
job key that would map it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from ...util.errors import JobError

# What a script's name may be mapped onto: the knobs a script can have, the accumulation and length
# held beside them, and the precision flags -> the role discovery gives each (discover.ALIASES).
TARGETS: dict[str, str] = {
    "per_device_train_batch_size": "micro_batch", "gradient_accumulation_steps": "accumulation",
    "max_len": "max_len", "precision": "precision", "bf16": "bf16", "fp16": "fp16", "tf32": "tf32",
    "gradient_checkpointing": "gradient_checkpointing", "torch_compile": "torch_compile",
    "dataloader_num_workers": "dataloader_num_workers", "dataloader_pin_memory": "dataloader_pin_memory",
    "attn_implementation": "attn_implementation", "optim": "optim", "group_by_length": "group_by_length",
    "padding": "padding", "padding_free": "padding_free", "pad_to_multiple_of": "pad_to_multiple_of",
    "packing": "packing",
}
EXAMPLE = "script_knobs=micro_bsz:per_device_train_batch_size,accum:gradient_accumulation_steps"
HELP = ("your script's own names for knobs, NAME:KNOB comma-separated, for example " + EXAMPLE
        + " (KNOB one of " + ", ".join(TARGETS) + ")")
_NAME = re.compile(r"-{0,2}[A-Za-z_][A-Za-z0-9_.-]*")
_SHOWN = 8   # names quoted in one line, at most


def normal(name: str) -> str:
    """A name as discovery compares it: lower case, '-' read as '_', no leading dashes."""
    return name.strip().lstrip("-").lower().replace("-", "_")


def parse(text: str) -> tuple[str, ...]:
    """`a:knob,b:knob` as validated `name:knob` pairs, or one JobError line."""
    pairs: list[str] = []
    seen: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        name, colon, knob = (s.strip() for s in part.partition(":"))
        if not colon or not name or not knob:
            raise JobError(f"script_knobs: {part!r} is not NAME:KNOB; expected {HELP}")
        if not _NAME.fullmatch(name):
            raise JobError(f"script_knobs: {name!r} is not a setting's name (letters, digits, '_', '-', '.'); "
                           f"expected {HELP}")
        if knob not in TARGETS:
            raise JobError(f"script_knobs: {knob!r} is no knob autotune knows; expected one of {', '.join(TARGETS)}")
        key = normal(name.rsplit(".", 1)[-1])
        if key in seen:
            raise JobError(f"script_knobs: {name} is mapped twice ({seen[key]} and {knob}); map it once")
        seen[key] = knob
        pairs.append(f"{key}:{knob}")
    return tuple(pairs)


def roles(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """name -> role for discovery (a pair a probe run confirmed ends `:probed`, workloads/script/probe.py)."""
    return {name: TARGETS[knob] for name, knob, *_ in (p.split(":") for p in pairs)}


def probed(pairs: tuple[str, ...] | list[str]) -> set[str]:
    """The names a probe run confirmed, not the user."""
    return {p.split(":")[0] for p in pairs if p.count(":") == 2}


# -- what the script takes, for the one line that gives the way out --------------------------------------
def _walk(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        return [item for key, value in data.items() for item in _walk(value, f"{prefix}{key}.")]
    return [(prefix.rstrip(".").rsplit(".", 1)[-1], data)]


def _file_names(path: Path) -> list[tuple[str, Any]]:
    from . import pyconfig
    from ...config.inputs import parse_json, parse_yaml

    try:
        text = path.read_text()
        if path.suffix.lower() == ".py":
            return list(pyconfig.read(text, str(path)).items())
        data = parse_json(text, str(path)) if path.suffix.lower() == ".json" else parse_yaml(text, str(path))
    except (OSError, UnicodeDecodeError, JobError):
        return []   # discovery has read it already; what it could not read it has said
    return _walk(data) if isinstance(data, dict) else []


def _script_names(script: Path) -> list[tuple[str, Any]]:
    from . import parsers, pyconfig

    try:
        tree = ast.parse(script.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found = [(name, value) for name, (value, _) in pyconfig.assignments(tree).items()]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found += list(parsers._own_fields(node).items())
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            flags = [str(a.value) for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            value = default.value if isinstance(default, ast.Constant) else None
            found += [(flags[-1], value)] if flags else []
    return found


def taken(script: Path, configs: list[tuple[Path, str]], args: list[str]) -> list[tuple[str, Any, str]]:
    """(name, value, where) for each simple setting the script takes: its flags, its config files' keys,
    its globals, argparse flags and own dataclass fields, the first place each name is met."""
    from .parsers import read_args

    found: list[tuple[str, Any, str]] = []
    flags, _ = read_args(args)
    found += [(option, value, "your flag") for option, value, _ in flags]
    for path, label in configs:
        found += [(name, value, label) for name, value in _file_names(path)]
    found += [(name, value, script.name) for name, value in _script_names(script)]
    seen: set[str] = set()
    unique = []
    for name, value, where in found:
        if normal(name) not in seen and (value is None or isinstance(value, (bool, int, float, str))):
            seen.add(normal(name))
            unique.append((name, value, where))
    return unique


def _guess(taken_names: list[tuple[str, Any, str]], words: tuple[str, ...], skip: set[str]) -> str | None:
    for name, value, _ in taken_names:
        if isinstance(value, bool) or normal(name) in skip:
            continue
        if any(word in normal(name) for word in words) and (value is None or isinstance(value, (int, str))):
            return normal(name)
    return None


def way_out(what: str, looked_for: list[str], taken_names: list[tuple[str, Any, str]],
            known: set[str], roles_needed: tuple[str, ...] = ("per_device_train_batch_size",),
            if_seen: tuple[str, ...] = ()) -> str:
    """One line: what is missing, what the script takes that autotune did not recognise, what names were
    looked for, and the `script_knobs=` key that maps the script's own names (`if_seen`: knobs named
    in it only where a name the script takes looks like theirs)."""
    unknown = [(n, v, w) for n, v, w in taken_names if normal(n) not in known]
    shown = ", ".join(f"{n}={v!r} ({w})" for n, v, w in unknown[:_SHOWN]) + (
        f" and {len(unknown) - _SHOWN} more" if len(unknown) > _SHOWN else "")
    found = f"it takes {shown}, none of them a name autotune knows" if unknown else "it takes no setting autotune can read"
    words = {"per_device_train_batch_size": ("bs", "batch", "micro"), "gradient_accumulation_steps": ("acc",),
             "max_len": ("len", "ctx", "context", "seq", "block")}
    pairs, used = [], set()
    roles_needed = tuple(k for k in if_seen if _guess(unknown, words.get(k, (k,)), set())) + roles_needed
    for index, knob in enumerate(roles_needed):
        name = _guess(unknown, words.get(knob, (knob,)), used) or f"YOUR_{'NAME' if index == 0 else knob.split('_')[0].upper()}"
        used.add(name)
        pairs.append(f"{name}:{knob}")
    looked = ", ".join(looked_for[:6]) + (", ..." if len(looked_for) > 6 else "")
    return (f"{what}: {found}; looked for {looked}; if your script names it otherwise, add "
            f"script_knobs={','.join(pairs)}")
