"""Find the knobs in a user's training script and its config files, without running or changing them.

Config files are read as YAML (`yaml.safe_load`) or JSON, nested or flat; the script's own
command-line defaults are read from its `argparse` calls in the source (never executed). Each key
whose last name is a known alias becomes a `Setting`: where it lives (file and key path, or flag),
its current value, and which knob it stands for. Sequence length and effective batch are found too
and held fixed. Unrecognised keys are left alone.
"""

from __future__ import annotations

import ast
from contextvars import ContextVar
import io
import tokenize
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...util.errors import JobError
from ...config.inputs import parse_json, parse_yaml, read_bytes, read_text
from ...config.knobs import TABLE

MAX_SCRIPT_BYTES = 16 * 2**20

# alias (lower case, '-' read as '_') -> role. Roles map to knobs in `script/apply.py`.
ALIASES: dict[str, str] = {
    # Each knob's own names and role come from its table entry (config/knobs/table.py `script_names`).
    **{name: knob.script_role or knob.name for knob in TABLE for name in knob.script_names},
    # What is held beside the knobs, read but never tried.
    **dict.fromkeys(("gradient_accumulation_steps", "grad_accum", "accumulation_steps", "gradient_accumulation",
                     "grad_accumulation_steps", "accum_steps", "accumulate_grad_batches"), "accumulation"),
    "bf16": "bf16", "fp16": "fp16", "tf32": "tf32",
    "padding_free": "padding_free",
    # Packing concatenates rows into new ones: it trains something else, so it is read, never tried.
    "packing": "packing",
    "pad_to_multiple_of": "pad_to_multiple_of",
    "pad_to_max_length": "pad_to_max_length",
    # Read, never tried: transformers refuses bf16/fp16 on a CPU unless it is set (workloads/script/adapter.py).
    "use_cpu": "use_cpu",
    **dict.fromkeys(("max_len", "max_length", "max_seq_length", "max_seq_len", "seq_len", "seq_length",
                     "block_size", "model_max_length", "sequence_length"), "max_len"),
}
LOOKED_FOR = sorted(ALIASES)
# A trial's edits by where each goes: a config file's label as the user gave it (or frameworks.py's
# "script", "env", "launcher") -> [(key path, the value as the setting spells it)].
Edits = dict[str, list[tuple[list[str], Any]]]


@dataclass(frozen=True)
class Setting:
    role: str
    value: Any
    source: str                       # a config file's path as the user gave it, or "argv" for a flag
    path: tuple[str, ...] = ()        # key path inside the file; for a flag, (option, action)
    # "flag": set in the user's script_args; "default": what the script's parser or globals use when
    # nothing sets it (a dataclass field, a module global); "": read from a config file or argparse.
    origin: str = ""

    @property
    def where(self) -> str:
        if self.source != "argv":
            return f"{self.source}:{'.'.join(self.path)}" + (" (default)" if self.origin == "default" else "")
        return f"{self.path[0]} ({'your flag' if self.origin == 'flag' else 'default'})"

    @property
    def rank(self) -> int:
        """Which setting the run uses when several name one role: a flag the user passes, then a config
        file, then a default."""
        if self.origin == "flag":
            return 0
        return 1 if self.source != "argv" and self.origin != "default" else 2


@dataclass
class Discovery:
    settings: list[Setting] = field(default_factory=list)
    style: str = "plain"                                    # how the script takes its settings (parsers.py)
    arg_configs: list[str] = field(default_factory=list)    # config files its own arguments name

    def get(self, role: str) -> Setting | None:
        # A flag wins over a config file, a config file over the script's defaults. Where one role
        # appears more than once (eval.batch_size beside train.batch_size), the training one.
        found = sorted((s for s in self.settings if s.role == role), key=lambda s: (s.rank, _training_first(s)))
        return found[0] if found else None

    @property
    def roles(self) -> set[str]:
        return {s.role for s in self.settings}


def _training_first(setting: Setting) -> int:
    parts = [p.lower() for p in setting.path[:-1]]
    if any("train" in p for p in parts):
        return 0
    return 2 if any(word in p for p in parts for word in ("eval", "valid", "test", "predict", "infer")) else 1


def apply_args(found: Discovery, args: list[str]) -> None:
    """The user's own `script_args` override the script's defaults for the flags they name."""
    for index, setting in enumerate(found.settings):
        if setting.source != "argv" or setting.origin == "flag":
            continue
        flag, action = setting.path
        names = {flag, flag.replace("_", "-"), flag.replace("-", "_")}
        for position, word in enumerate(args):
            name, _, inline = word.partition("=")
            if name not in names:
                continue
            if action in ("store_true", "store_false"):
                value: Any = action == "store_true"
            elif inline:
                value = inline
            elif position + 1 < len(args):
                value = args[position + 1]
            else:
                continue
            if isinstance(setting.value, int) and not isinstance(setting.value, bool) and str(value).isdigit():
                value = int(value)
            found.settings[index] = dataclasses.replace(setting, value=value)


# The user's own names (`script_knobs=`, workloads/script/names.py), set while one discovery runs: they beat ALIASES.
_OWN_NAMES: ContextVar[dict[str, str]] = ContextVar("script_knobs", default={})


def _alias(key: str) -> str | None:
    name = key.strip().lower().replace("-", "_")
    return _OWN_NAMES.get().get(name) or ALIASES.get(name)


def _walk(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(data, dict):
        found = []
        for key, value in data.items():
            found += _walk(value, prefix + (str(key),))
        return found
    return [(prefix, data)]


def read_config(path: Path, label: str) -> list[Setting]:
    """Settings in one YAML or JSON file (nested keys are found by their last name)."""
    text = read_text(path, f"script_configs: {label}")
    if path.suffix.lower() == ".py":
        from . import pyconfig

        return [Setting(role, value, label, (name,)) for name, value in pyconfig.read(text, label).items()
                if (role := _alias(name)) and (value is None or isinstance(value, (bool, int, float, str)))]
    # Both bounded before they are built: JSON's depth, YAML's alias expansion (a billion-laughs file).
    if path.suffix.lower() == ".json":
        data = parse_json(text, f"script_configs: {label}", hint="fix the file")
    else:
        data = parse_yaml(text, f"script_configs: {label}")
    if not isinstance(data, dict):
        raise JobError(f"script_configs: {label} holds no mapping of settings; expected key: value pairs")
    settings = []
    for key_path, value in _walk(data):
        role = _alias(key_path[-1])
        if role and (value is None or isinstance(value, (bool, int, float, str))):
            settings.append(Setting(role, value, label, key_path))
    return settings


def _literal(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        # Not a literal (a call, a name, `2**9`, an unhashable set member): autotune does not evaluate it.
        return None


def parse_script(path: Path) -> ast.Module:
    """The script's syntax tree (never run), or one JobError line: not Python, not readable, too deep."""
    data = read_bytes(path, "script", MAX_SCRIPT_BYTES)
    try:
        # Decoded as Python decodes it: UTF-8 unless a `# -*- coding: latin-1 -*-` line says otherwise.
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        line = data[:error.start].count(b"\n") + 1 if isinstance(error, UnicodeDecodeError) else 1
        raise JobError(f"script={path}: line {line} is not {getattr(error, 'encoding', 'UTF-8')} text, so not "
                       "Python; save the script as UTF-8 (or declare its encoding in a coding line)") from None
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as error:
        where = f", line {error.lineno}" if error.lineno else ""
        raise JobError(f"script={path}: not valid Python ({error.msg}{where}); "
                       "autotune reads the script as Python 3 saved as UTF-8") from None
    except (RecursionError, MemoryError, ValueError):  # nesting past the parser's limit; a NUL byte
        raise JobError(f"script={path}: Python that nests too deeply (or holds a NUL byte) for autotune to read") from None


def read_argparse(path: Path) -> list[Setting]:
    """`add_argument('--flag', default=..., action=...)` calls in the script's source, as settings."""
    tree = parse_script(path)
    settings = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [_literal(a) for a in node.args if isinstance(_literal(a), str) and _literal(a).startswith("--")]
        if not flags:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        action = _literal(keywords.get("action"))
        default = _literal(keywords.get("default"))
        if action == "store_true":
            default = False if default is None else default
        elif action == "store_false":
            default = True if default is None else default
        flag = flags[-1]
        role = _alias(flag.lstrip("-"))
        if role and (default is None or isinstance(default, (bool, int, float, str))):
            settings.append(Setting(role, default, "argv", (flag, action or "value")))
    return settings
