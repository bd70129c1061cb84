"""Bring your own script: find its knobs (discover) and turn a config into edits of copies (adapter)."""

from .adapter import ScriptAdapter
from .discover import LOOKED_FOR, Discovery, Setting, apply_args
from .styles import discover

__all__ = ["LOOKED_FOR", "Discovery", "ScriptAdapter", "Setting", "apply_args", "discover"]
