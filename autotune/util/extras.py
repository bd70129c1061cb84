"""Optional parts install as extras (`pip install -e ".[ssh]"`); a missing one is one line naming the command.

| extra | package | what needs it |
| --- | --- | --- |
| `ssh` | paramiko | `host=user@box`: trials on a remote machine |
| `llm` | openai | `llm=MODEL`: the LLM proposer |
| `plots` | matplotlib | the run's plots (report.md) and `autotune kb graph` |

`.[all]` installs every extra above (and mlflow, ray); `.[dev]` includes `.[all]`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import JobError

# module imported -> (the extra that installs it, the package pip names)
EXTRAS: dict[str, tuple[str, str]] = {
    "paramiko": ("ssh", "paramiko"),
    "openai": ("llm", "openai"),
    "matplotlib": ("plots", "matplotlib"),
}


class MissingExtra(JobError):
    """An optional part the job asked for is not installed; the message names the pip command."""


def install_line(module: str) -> str:
    extra, package = EXTRAS[module]
    return f"pip install 'autotune[{extra}]' (from a checkout: pip install -e \".[{extra}]\")"


def missing(module: str, needed_by: str) -> str:
    """The one line for a missing optional package: what needs it and the command that installs it."""
    return f"{needed_by} needs the {EXTRAS[module][1]} package, which is not installed: {install_line(module)}"


def available(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def need(module: str, needed_by: str) -> ModuleType:
    """Import an optional package, or raise `MissingExtra` with the line that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(missing(module, needed_by)) from None
