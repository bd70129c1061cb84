"""Discovery by experiment, where names fall short: a setting whose name suggests the accumulation or
the micro-batch, for a role no name was found for, is confirmed by one short run of the script with it
changed, watched by the trial hooks, before the job is made.

A name table misses some trainers' words (`accum_every`, `bsz`): without an accumulation setting the
micro-batch is never tried, without a micro-batch nothing is. Here each candidate (a name holding `acc`,
or `bs` / `batch` / `micro`, with a whole-number value, that no alias covers) is run once with its value
changed (accumulation: one more; micro-batch: doubled), for three optimizer steps, on this machine. It
is confirmed only when the hooks see the change: as many micro-batches per optimizer step, or as many
rows per micro-batch, as the edit said. A confirmed name joins the job's `script_knobs` marked
`probed`, which the listing names; anything else stays as it was, and the one line that says what was
not understood still gives the `script_knobs=` way out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import names
from .adapter import _like
from .discover import Discovery, Setting

PROBE_TIMEOUT_S = 300
# role -> (the words its name may hold, the knob it maps onto, the hook observation that confirms it)
ROLES = {
    "accumulation": (("acc",), "gradient_accumulation_steps", "micro_batches_per_step"),
    "micro_batch": (("bs", "batch", "micro"), "per_device_train_batch_size", "rows_per_micro_batch"),
}
MARK = "probed"


def candidates(found: Discovery, taken: list[tuple[str, Any, str]]) -> list[tuple[str, str]]:
    """(role, name) for each name the script takes, unknown to discovery, with a whole-number value and a
    name that suggests a role the discovery lacks."""
    missing = [role for role in ROLES if found.get(role) is None]
    known = {names.normal(s.path[0] if s.source == "argv" else s.path[-1]) for s in found.settings}
    out = []
    for name, value, _ in taken:
        key = names.normal(name)
        if key in known or isinstance(value, bool) or not isinstance(value, int) or value < 1:
            continue
        role = next((r for r in missing if any(word in key for word in ROLES[r][0])), None)
        if role is not None:
            out.append((role, key))
    return out


def _edit(setting: Setting, value: int) -> tuple[dict[str, list], list[str]]:
    if setting.source != "argv":
        return {setting.source: [(list(setting.path), _like(setting.value, value))]}, []
    flag, action = setting.path
    return {}, [f"{flag}={value!r}"] if action == "literal" else [flag, str(value)]


def _run(script: Path, configs: list[tuple[Path, str]], args: list[str], cwd: Path, edits: dict, flags: list[str],
         smoke: bool, folder: Path) -> dict[str, Any] | None:
    """One short run of the script through the trial hooks; its observations, or None if it did not run."""
    spec = {"schema_version": 1, "kind": "trial", "runner": "script", "job": {"seed": 0, "smoke": smoke},
            "knobs": {"precision": "fp32"},
            "script": {"path": str(script.resolve()), "cwd": str(cwd),
                       "configs": [{"label": label, "path": str(path.resolve())} for path, label in configs],
                       "edits": edits, "args": args, "expect": {}, "exclude": []},
            "flags": flags, "measure_steps": 1, "warmup_max": 0, "peaks": None, "workdir": str(folder)}
    (folder / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"CUDA_VISIBLE_DEVICES": ""} if smoke else {})}
    try:
        subprocess.run([sys.executable, "-m", "autotune.runners.script", str(folder / "spec.json"),
                        str(folder / "result.json")], cwd=cwd, env=env, timeout=PROBE_TIMEOUT_S,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        result = json.loads((folder / "result.json").read_text())
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return None
    measurement = result.get("measurement") or result.get("measurement_rejected") or {}
    return measurement.get("observed")


def confirmed(script: Path, labels: tuple[str, ...], args: list[str], cwd: Path, own: tuple[str, ...],
              smoke: bool) -> tuple[str, ...]:
    """`name:knob:probed` for each candidate a probe run confirmed (none where discovery lacks nothing)."""
    from .discover import discover

    configs = [(cwd / Path(label).expanduser(), label) for label in labels]
    found = discover(script, configs, args, cwd, own)
    configs += [(cwd / Path(label).expanduser(), label) for label in found.arg_configs]
    out: list[str] = []
    for role, name in candidates(found, names.taken(script, configs, args)):
        _, knob, seen_key = ROLES[role]
        if any(pair.split(":")[1] == knob for pair in out):
            continue
        # The candidate read as that role, by the same route a user's script_knobs= would give it.
        setting = discover(script, configs, args, cwd, own + (f"{name}:{knob}",)).get(role)
        if setting is None or not isinstance(setting.value, int):
            continue
        value = setting.value + 1 if role == "accumulation" else setting.value * 2
        edits, flags = _edit(setting, value)
        with tempfile.TemporaryDirectory(prefix="autotune-probe-") as folder:
            seen = _run(script, configs, args, cwd, edits, flags, smoke, Path(folder))
        if seen is not None and seen.get(seen_key) == value:
            out.append(f"{name}:{knob}:{MARK}")
    return tuple(out)
