"""What a script's own parser returned, read where it is parsed: one run of the script that stops there.

Reading a script's source finds the parser's dataclasses only where they are named at the call
(`TrlParser((ScriptArguments, SFTConfig))`). TRL's own `trl/scripts/sft.py` builds its parser inside a
function from a variable and calls `parse_args_and_config(fail_with_unknown_args=False)`: read as source,
SFTConfig's defaults go unseen (bf16 on, activation checkpointing on in TRL 1.x). So the script is run,
as a trial runs it (its folder mirrored, its arguments, the job's seed), with the parse methods wrapped:
argparse's `parse_known_args` (which `parse_args` and HfArgumentParser call), HfArgumentParser's
`parse_args_into_dataclasses` / `parse_dict` / `parse_json_file` / `parse_yaml_file` and TrlParser's
`parse_args_and_config`. When the outermost of those returns, the simple fields of what it returned
(dataclass instances, an argparse Namespace) are recorded and the script is stopped: the model is
never built. Discovery (styles.py) takes these values as the script's defaults, so what the baseline
records is what reaches the trainer.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import runpy
from dataclasses import dataclass
from typing import Any, Mapping

from ...config.messages import TrialSpec
from ...config.types import JsonObject, KnobValue

# (module, class, methods) wrapped; a library that is not installed is skipped.
_TARGETS = (("transformers.hf_argparser", "HfArgumentParser",
             ("parse_args_into_dataclasses", "parse_dict", "parse_json_file", "parse_yaml_file")),
            ("trl.scripts.utils", "TrlParser", ("parse_args_and_config",)))
_SIMPLE = (bool, int, float, str)
# One simple field the parser returned: the class that holds it ("Namespace" for argparse's), its value.
Field = tuple[str, KnobValue]


@dataclass(frozen=True)
class ParserReturn:
    """What the script's parser returned: the parse method that returned (`TrlParser.parse_args_and_config`)
    and its simple fields by name. It crosses from the `kind=parse` child as the result's `parsed`
    (schemas/run_result.json: name -> [class, value])."""

    parser: str | None
    values: Mapping[str, Field]

    def to_dict(self) -> JsonObject:
        return {"parser": self.parser, "values": {name: [owner, value] for name, (owner, value) in self.values.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> "ParserReturn":
        """The child's `parsed`, as checked against its schema by the executor (pairs of class and value)."""
        parser, values = data.get("parser"), data.get("values")
        pairs = values.items() if isinstance(values, Mapping) else ()
        return cls(parser if isinstance(parser, str) else None,
                   {str(name): (str(pair[0]), pair[1]) for name, pair in pairs
                    if isinstance(pair, (list, tuple)) and len(pair) == 2 and _simple(pair[1])})

    def simple(self) -> dict[str, KnobValue]:
        """name -> value, the classes left out."""
        return {name: value for name, (_, value) in self.values.items()}


def _simple(value: object) -> bool:
    return value is None or isinstance(value, _SIMPLE)


class Parsed(BaseException):
    """Ends the script once its parser returned (BaseException: scripts catch Exception)."""


def values(result: object) -> dict[str, Field]:
    """name -> (the class (or "Namespace") it came from, its value), for each simple field of `result`
    (a dataclass, a Namespace, or a tuple of them); the first class to hold a name keeps it."""
    items = result if isinstance(result, (tuple, list)) else [result]
    out: dict[str, Field] = {}
    for item in items:
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            fields, owner = {f.name: getattr(item, f.name, None) for f in dataclasses.fields(item)}, type(item).__name__
        elif isinstance(item, argparse.Namespace):
            fields, owner = vars(item), "Namespace"
        else:
            continue
        for name, value in fields.items():
            value = value.value if isinstance(value, enum.Enum) else value
            if _simple(value) and name not in out:
                out[name] = (owner, value)
    return out


class Watch:
    def __init__(self) -> None:
        self.depth = 0
        self.found: dict[str, Field] | None = None
        self.parser: str | None = None
        self._undo: list[tuple[Any, str, Any]] = []

    def _wrap(self, cls: Any, method: str) -> None:
        original = cls.__dict__.get(method)
        if original is None:
            return
        watch = self

        def wrapped(parser: Any, *args: Any, **kwargs: Any) -> Any:
            watch.depth += 1
            try:
                result = original(parser, *args, **kwargs)
            finally:
                watch.depth -= 1
            if watch.depth == 0 and watch.found is None:
                watch.found, watch.parser = values(result), f"{type(parser).__name__}.{method}"
                raise Parsed()
            return result

        setattr(cls, method, wrapped)
        self._undo.append((cls, method, original))

    def install(self) -> "Watch":
        self._wrap(argparse.ArgumentParser, "parse_known_args")
        # A script that reaches its model without a parser's return has no values to read: it stops there.
        from torch.nn.modules import module as nn_module

        self._model = nn_module.register_module_forward_pre_hook(self._too_far)
        for module, name, methods in _TARGETS:
            try:
                cls = getattr(importlib.import_module(module), name)
            except Exception:  # noqa: BLE001 - not installed (or not importable here): its scripts cannot run either
                continue
            for method in methods:
                self._wrap(cls, method)
        return self

    def _too_far(self, module: Any, args: Any) -> None:
        raise Parsed()

    def remove(self) -> None:
        self._model.remove()
        for cls, method, original in reversed(self._undo):
            setattr(cls, method, original)
        self._undo.clear()


def parse(spec: TrialSpec) -> JsonObject:
    """The runner's `kind=parse`: the script run until its parser returns, in a copy of the user's folder
    as a trial's; the result's `parsed`, what that returned."""
    from .workdir import as_main, build_workdir

    mirror, script, argv, _ = build_workdir(spec)
    watch = Watch().install()
    try:
        with as_main(script, argv, mirror):
            runpy.run_path(str(script), run_name="__main__")
    except Parsed:
        pass
    except SystemExit as stop:   # argparse's --help or a usage error: no values to read
        if watch.found is None:
            return {"parsed": None, "reason": f"the script exited ({stop.code}) before its parser returned"}
    finally:
        watch.remove()
    found = ParserReturn(watch.parser, watch.found).to_dict() if watch.found is not None else None
    return {"parsed": found}


# -- the parent's side: one run when the source falls short, and the values the Job keeps ---------------
PARSE_TIMEOUT_S = 300
PARSER_MARK = "@"   # the stored entry that names the parser: "@TrlParser.parse_args_and_config"


def probe(script: Any, configs: list[tuple[Any, str]], args: list[str], cwd: Any, smoke: bool, work: Any,
          exclude: list[Any]) -> ParserReturn | None:
    """What the script's parser returns with these arguments (`parse` in a child process, as a trial
    runs, in a folder under `work`; `exclude`: what its copy of `cwd` leaves out), or None where it did
    not return (the script failed first, or reached its model without one)."""
    import tempfile
    from pathlib import Path

    from ...executors.local import LocalExecutor

    spec: JsonObject = {
        "schema_version": 1, "kind": "parse", "runner": "script", "job": {"seed": 0, "smoke": smoke},
        "knobs": {"precision": "fp32"},
        "script": {"path": str(Path(script).resolve()), "cwd": str(cwd),
                   "configs": [{"label": label, "path": str(Path(path).resolve())} for path, label in configs],
                   "edits": {}, "args": list(args), "expect": {},
                   "exclude": [str(Path(path).resolve()) for path in exclude]},
        "flags": [], "measure_steps": 1, "warmup_max": 0}
    with tempfile.TemporaryDirectory(prefix="parse-", dir=work) as folder:
        spec["workdir"] = str(Path(folder).resolve())
        result = LocalExecutor().run(spec, Path(folder), PARSE_TIMEOUT_S)
    found = result.get("parsed") if result.get("state") == "complete" else None
    return ParserReturn.from_dict(found) if isinstance(found, Mapping) else None


def stored(found: ParserReturn | None, own: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The Job's `script.parsed`: the parser's name, then `name=<JSON value>` for each field discovery
    reads (a known alias, or a name the user mapped with script_knobs=)."""
    import json

    from . import names
    from .discover import ALIASES

    if found is None or not found.values:
        return ()
    mapped = names.roles(own)
    kept = [f"{name}={json.dumps(value)}" for name, value in found.simple().items()
            if names.normal(name) in ALIASES or names.normal(name) in mapped]
    return (f"{PARSER_MARK}{found.parser}", *kept)


def read(entries: tuple[str, ...]) -> tuple[str | None, dict[str, KnobValue]]:
    """The parser's name and name -> value from the Job's `script.parsed`."""
    import json

    parser = next((e[len(PARSER_MARK):] for e in entries if e.startswith(PARSER_MARK)), None)
    found: dict[str, KnobValue] = {}
    for entry in entries:
        if not entry.startswith(PARSER_MARK):
            name, _, value = entry.partition("=")
            found[name] = json.loads(value)
    return parser, found
