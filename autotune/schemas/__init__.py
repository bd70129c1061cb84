"""JSON Schemas of everything stored or exchanged: one place builds their validators.

`validate(name, record)` raises on the first violation; `violation(name, record)` returns it as one
line; `digest()` hashes every schema file (a cache of checked records holds only while it is equal).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from ..util.errors import RecordError

NAMES = ("job", "knobs", "trial_spec", "run_result", "measurement", "experiment", "llm_proposal", "llm_call",
         "realized")


def load(name: str) -> dict[str, Any]:
    """One schema as a dict (to hand to a peer, such as an LLM's structured output): open-ended JSON."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.json").read_text())


@lru_cache(maxsize=1)
def _contents() -> dict[str, dict[str, object]]:
    return {item.name: json.loads(item.read_text()) for item in resources.files(__package__).iterdir()
            if item.name.endswith(".json")}


@lru_cache(maxsize=None)
def validator(name: str) -> Any:
    """A Draft 2020-12 validator for autotune/schemas/<name>.json; the other files resolve as $refs."""
    import jsonschema
    from referencing import Registry, Resource

    contents = _contents()
    if f"{name}.json" not in contents:
        raise RecordError(f"no schema {name}.json in autotune/schemas/")
    registry = Registry().with_resources((file, Resource.from_contents(body)) for file, body in contents.items())
    return jsonschema.Draft202012Validator(contents[f"{name}.json"], registry=registry)


@lru_cache(maxsize=1)
def digest() -> str:
    """sha256 over every schema file's name and bytes."""
    hashed = hashlib.sha256()
    for item in sorted(resources.files(__package__).iterdir(), key=lambda item: item.name):
        if item.name.endswith(".json"):
            hashed.update(item.name.encode() + b"\0" + item.read_bytes() + b"\0")
    return hashed.hexdigest()


def _first_error(name: str, record: Any) -> tuple[str, str] | None:
    """(where in the record, what is wrong) of the first violation, or None when it is valid."""
    error = next(iter(validator(name).iter_errors(record)), None)
    if error is None:
        return None
    return "/".join(str(p) for p in error.absolute_path) or "(top)", error.message


def violation(name: str, record: Any) -> str | None:
    """The first violation of `record` against `name`.json as one line, or None when it is valid."""
    found = _first_error(name, record)
    return None if found is None else f"not valid against {name}.json: at {found[0]}: {found[1]}"


def validate(name: str, record: Mapping[str, object], where: str = "") -> None:
    """Raise RecordError naming the first violation (and where the record came from)."""
    found = _first_error(name, record)
    if found is not None:
        raise RecordError(f"{where or name} record is not valid: at {found[0]}: {found[1]}")
