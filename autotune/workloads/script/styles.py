"""Discovery across the ways a script takes its settings: config files (YAML, JSON, Python), the
user's own flags, and the defaults of its parser (argparse, HfArgumentParser / TrlParser dataclasses,
configurator globals). Each setting keeps the route by which the user sets it, so that a trial
changes it the same way: a key in a file is edited in the file's copy, a flag is passed again (the
last one wins for argparse and for the configurator alike), and a default is set where the user
would set it: in the parser's config file when the run is given one, else as a flag.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping

from . import frameworks, parsers, pyconfig
from ...config.types import KnobValue
from ...util.errors import JobError
from .discover import _OWN_NAMES, Discovery, Setting, _alias, parse_script, read_argparse, read_config

_SIMPLE = (bool, int, float, str)
_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}
# Weights dtypes (ModelConfig.dtype), not the autocast precision the trainer's bf16/fp16 flags set.
_NOT_PRECISION = ("dtype", "torch_dtype")
# Roles whose value is a count: a flag's digits are that number whatever the field's default says
# (SFTConfig's pad_to_multiple_of defaults to "auto" and its __post_init__ makes "512" the int 512).
_COUNTS = ("micro_batch", "accumulation", "max_len", "pad_to_multiple_of", "dataloader_num_workers")


def _typed(text: Any, like: Any, literal: bool) -> Any:
    """A flag's text as the value its parser makes of it."""
    if not isinstance(text, str):
        return text
    if literal:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    if isinstance(like, bool):
        return _BOOLS.get(text.lower(), text)
    if like is None or (isinstance(like, int) and not isinstance(like, bool)):
        return int(text) if text.lstrip("-").isdigit() else text
    if isinstance(like, float):
        try:
            return float(text)
        except ValueError:
            return text
    return text


def _tree(script: Path) -> ast.Module:
    # One reader of the source for every style: its size bounded, decoded as Python decodes it (a
    # `coding:` line honoured), bytes that are not text one line naming the script (discover.py).
    return parse_script(script)


def _defaults(script: Path, tree: ast.Module, style: parsers.Style, parser_file: str | None,
              parsed: Mapping[str, KnobValue]) -> list[Setting]:
    """The script's defaults; `parsed`: what its parser returned in a run (parsed.py), which beats the source."""
    if style.kind == "dataclass":
        fields = {**parsers.dataclass_fields(tree, style.classes),
                  **{name: ("parsed", value) for name, value in parsed.items()}}
        settings = []
        for name, (_, value) in fields.items():
            role = _alias(name)
            # The deprecated alias mirrors activation_checkpointing in the installed TrainingArguments.
            if (not role or name in _NOT_PRECISION or (value is not None and not isinstance(value, _SIMPLE))
                    or (name == "gradient_checkpointing" and "activation_checkpointing" in fields)):
                continue
            where = (parser_file, (name,)) if parser_file else ("argv", (f"--{name}", "value"))
            settings.append(Setting(role, value, where[0], where[1], "default"))
        return settings
    if style.kind == "configurator":
        return [Setting(role, value, "argv", (f"--{name}", "literal"), "default")
                for name, (value, _) in pyconfig.assignments(tree).items()
                if (role := _alias(name)) and isinstance(value, _SIMPLE)]
    settings = read_argparse(script)
    if parsed:   # a default the source does not spell as a literal, as the parser made it
        settings = [dataclasses.replace(s, value=parsed[dest]) if s.value is None and (dest := s.path[0].lstrip("-")
                    .replace("-", "_")) in parsed and isinstance(parsed[dest], _SIMPLE) else s for s in settings]
    return settings


def _same(option: str, flag: str) -> bool:
    return option.lstrip("-").replace("-", "_") == flag.lstrip("-").replace("-", "_")


def _lightning_cli_dupes(defaults: list[Setting], in_files: list[Setting]) -> list[Setting]:
    """A LightningCLI default (`--trainer.precision`) that a config file sets is the file's key."""
    keys = {".".join(p for p in s.path if p != "init_args") for s in in_files}
    return [d for d in defaults if not (d.source == "argv" and d.path[0].lstrip("-") in keys)]


def discover_styles(script: Path, configs: list[tuple[Path, str]], args: list[str], cwd: Path,
                    parsed: Mapping[str, KnobValue] | None = None, launcher: tuple[str, ...] = ()) -> Discovery:
    tree = _tree(script)
    style = parsers.style_of(tree)
    flags, named = parsers.read_args(args)
    found = Discovery(style=style.kind)
    seen = {os.path.realpath(path) for path, _ in configs}
    configs = list(configs)
    for label in named:
        path = cwd / Path(label).expanduser()
        if path.is_file() and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            configs.append((path, label))
            found.arg_configs.append(label)
    for path, label in configs:
        found.settings += read_config(path, label)
    parser_file = next((label for label in named if Path(label).suffix.lower() in parsers.CONFIG_SUFFIXES), None)
    if style.kind == "dataclass":
        # Keys in a file given to the parser are the dataclass fields of the same name; a key the
        # file lacks takes the field's default (added to the file's copy when a trial changes it).
        in_files = {s.path[-1] for s in found.settings}
        found.settings = [s for s in found.settings if s.path[-1] not in _NOT_PRECISION]
        defaults = [d for d in _defaults(script, tree, style, parser_file, parsed or {}) if d.path[0].lstrip("-") not in in_files]
    else:
        defaults = _defaults(script, tree, style, parser_file, parsed or {})
    # Accelerate's and Lightning's own places: the script's calls, the launcher, the environment.
    defaults = _lightning_cli_dupes(defaults + frameworks.settings(tree, list(launcher), dict(os.environ)),
                                    found.settings)
    given = []
    for option, text, form in flags:
        # A LightningCLI flag names its section: --data.batch_size is the batch size.
        role = _alias(option.lstrip("-").rsplit(".", 1)[-1])
        if role is None or option.lstrip("-") in _NOT_PRECISION and style.kind == "dataclass":
            continue
        match = next((d for d in defaults if d.source == "argv" and _same(option, d.path[0])), None)
        match = match or next((d for d in defaults if d.path[-1] == option.lstrip("-")), None)
        action = match.path[1] if match is not None and match.source == "argv" else (
            "literal" if style.kind == "configurator" else "value")
        if action in ("store_true", "store_false"):
            value: Any = action == "store_true"
        else:
            value = _typed(text, match.value if match is not None else None, action == "literal")
            if role in _COUNTS and isinstance(value, str) and value.isdigit():
                value = int(value)
        flag = match.path[0] if match is not None and match.source == "argv" else option
        given.append(Setting(role, value, "argv", (flag, action), "flag"))
        if match is not None:
            defaults.remove(match)
    found.settings += defaults + given
    return found


def discover(script: Path, configs: list[tuple[Path, str]], args: list[str] | None = None,
             cwd: Path | None = None, names: tuple[str, ...] = (), parsed: Mapping[str, KnobValue] | None = None,
             launcher: tuple[str, ...] = ()) -> Discovery:
    """What the script's settings are, by every style it is read in (the one entry point of script/).
    `names`: the user's `script_knobs=` pairs; a role they name is the setting of that name alone.
    `parsed`: name -> value as the script's parser returned them in a run (parsed.py);
    `launcher`: the words of `script_launcher=` (accelerate's precision flag lives there)."""
    from . import names as own

    mapped = own.roles(names)
    token = _OWN_NAMES.set(mapped)
    try:
        found = discover_styles(script, configs, list(args or []), cwd or Path.cwd(), parsed, tuple(launcher))
    finally:
        _OWN_NAMES.reset(token)
    if mapped:
        keys = {own.normal(s.path[0] if s.source == "argv" else s.path[-1]) for s in found.settings}
        missing = [name for name in mapped if name not in keys]
        if missing:
            taken = ", ".join(name for name, _, _ in own.taken(script, configs + [
                ((cwd or Path.cwd()) / label, label) for label in found.arg_configs], list(args or [])))
            taken = taken or "no setting it can read"
            raise JobError(f"script_knobs: {', '.join(missing)} is not a setting of the script, its configs or its "
                           f"flags (autotune read: {taken}); use the name as the script spells it")
        named_roles = set(mapped.values())
        found.settings = [s for s in found.settings if s.role not in named_roles
                          or own.normal(s.path[0] if s.source == "argv" else s.path[-1]) in mapped]
    return found
