"""JSON Schemas of everything stored or exchanged; `validate(name, record)` checks one."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import RecordError

NAMES = ("job", "knobs", "trial_spec", "measurement", "experiment", "llm_proposal", "llm_call", "realized")


def load(name: str) -> dict[str, Any]:
    """One schema as a dict (to hand to a peer, such as an LLM's structured output)."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.json").read_text())


@lru_cache(maxsize=1)
def _validators() -> dict[str, Any]:
    import jsonschema
    from referencing import Registry, Resource

    schemas = {name: load(name) for name in NAMES}
    registry = Registry().with_resources(
        (f"{name}.json", Resource.from_contents(schema)) for name, schema in schemas.items())
    return {name: jsonschema.Draft202012Validator(schema, registry=registry) for name, schema in schemas.items()}


def validate(name: str, record: dict[str, Any], where: str = "") -> None:
    """Raise RecordError naming the first violation (and where the record came from)."""
    error = next(iter(_validators()[name].iter_errors(record)), None)
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path) or "(top)"
        raise RecordError(f"{where or name} record is not valid: at {path}: {error.message}")
