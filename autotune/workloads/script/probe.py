"""Discovery by experiment, where names fall short: a setting whose name suggests the accumulation or
the micro-batch, for a role no name was found for, is confirmed by one short run of the script with it
changed, watched by the trial hooks, before the job is made.

A name table misses some trainers' words (`accum_every`, `bsz`, `use_amp`): without an accumulation
setting the micro-batch is never tried, without a micro-batch nothing is. Here each candidate that no
alias covers (a whole number named with `acc`, or `bs` / `batch` / `micro`; a switch named with `amp`,
`half`, `autocast` or `mixed`; a switch named with `group`, `sort` or `bucket` and `len` or `size`; a
switch named with `pack` or `concat`) is run once with its value changed (accumulation: one more;
micro-batch: doubled; a switch: flipped), for three optimizer steps, on this machine. It is confirmed
only when the hooks see the change: as many micro-batches per optimizer step, or as many rows per
micro-batch, as the edit said; for a switch, against one unchanged run: fp32 one way and bf16 (or
fp16) the other, which also says which precision it stands for; consecutive micro-batches at most
half as far apart in length, or the same rows in another order with less padding (the row order of
length grouping); or rows concatenated, every batch full
width with no padding (packing, which is read and never tried). A confirmed name joins the job's `script_knobs` marked
`probed`, which the listing names; anything else stays as it was, and the one line that says what was
not understood still gives the `script_knobs=` way out.
"""

from __future__ import annotations

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
    # A mixed-precision switch: which precision it turns on is what the hooks see it compute in.
    "precision": (("amp", "half", "autocast", "mixed"), None, "compute_dtypes"),
    # A length-grouping switch: on, consecutive micro-batches hold rows of like length (the row order).
    "group_by_length": (("group", "sort", "bucket"), "group_by_length", "length_jumps"),
    # A packing switch: on, rows are concatenated into full-width ones (read, never tried: adapter.py).
    "packing": (("pack", "concat"), "packing", "packed"),
}
SWITCHES = ("precision", "group_by_length", "packing")
# Grouped rows must jump at most this share of what the same script's rows jump in its own order.
GROUPED_JUMPS = 0.5
_LOW = {"bfloat16": "bf16", "float16": "fp16"}
MARK = "probed"


def candidates(found: Discovery, taken: list[tuple[str, Any, str]]) -> list[tuple[str, str]]:
    """(role, name) for each name the script takes, unknown to discovery, with a whole-number value and a
    name that suggests a role the discovery lacks."""
    missing = [role for role in ROLES if found.get(role) is None]
    if "precision" in missing and (found.get("bf16") or found.get("fp16")):
        missing.remove("precision")
    known = {names.normal(s.path[0] if s.source == "argv" else s.path[-1]) for s in found.settings}
    out = []
    for name, value, _ in taken:
        key = names.normal(name)
        # A count for the batch roles, a switch for precision.
        kinds = SWITCHES if isinstance(value, bool) else ("accumulation", "micro_batch")
        if key in known or not isinstance(value, int) or (not isinstance(value, bool) and value < 1):
            continue
        role = next((r for r in missing if r in kinds and any(word in key for word in ROLES[r][0])
                     and (r != "group_by_length" or "len" in key or "size" in key)), None)
        if role is not None:
            out.append((role, key))
    return out


def _edit(setting: Setting, value: int | bool) -> tuple[dict[str, list], list[str]]:
    if setting.source != "argv":
        return {setting.source: [(list(setting.path), _like(setting.value, value))]}, []
    flag, action = setting.path
    if action == "literal":
        return {}, [f"{flag}={value!r}"]
    if action in ("store_true", "store_false"):
        return {}, [flag] if value == (action == "store_true") else []
    return {}, [flag, str(value).lower() if isinstance(value, bool) else str(value)]


def _run(script: Path, configs: list[tuple[Path, str]], args: list[str], cwd: Path, edits: dict, flags: list[str],
         smoke: bool, folder: Path, exclude: list[Path]) -> dict[str, Any] | None:
    """One short run of the script through the trial hooks, in a child process as a trial runs (forked
    from the server that has torch imported); its observations, or None if it did not get that far."""
    from ...executors.local import LocalExecutor

    # kind=probe: the script runner runs it as a trial; its spec carries only what the hooks read.
    spec = {"schema_version": 1, "kind": "probe", "runner": "script", "job": {"seed": 0, "smoke": smoke},
            "knobs": {"precision": "fp32"},
            "script": {"path": str(script.resolve()), "cwd": str(cwd),
                       "configs": [{"label": label, "path": str(path.resolve())} for path, label in configs],
                       "edits": edits, "args": args, "expect": {},
                       "exclude": [str(path.resolve()) for path in exclude]},
            "flags": flags, "measure_steps": 1, "warmup_max": 0, "workdir": str(folder.resolve())}
    result = LocalExecutor().run(spec, folder, PROBE_TIMEOUT_S)
    measurement = result.get("measurement") or result.get("measurement_rejected") or {}
    seen = measurement.get("observed")
    if not seen:
        return None
    rows = measurement.get("parity_rows") or {}
    # The rows by content and their order (rows.py): a grouping within each step keeps the one, not the other.
    return {**seen, "padding_share": (measurement.get("data") or {}).get("padding_share"),
            "rows": {key: entry[0] for key, entry in (rows.get("rows") or {}).items()} or None,
            "sequence": [key for split in rows.get("splits") or [] for micro in split for key in micro] or None}


def _found(script: Path, labels: tuple[str, ...], args: list[str], cwd: Path, own: tuple[str, ...],
           parsed: dict[str, Any] | None = None) -> tuple[list[tuple[Path, str]], Discovery]:
    from .styles import discover

    configs = [(cwd / Path(label).expanduser(), label) for label in labels]
    found = discover(script, configs, args, cwd, own, parsed)
    return configs + [(cwd / Path(label).expanduser(), label) for label in found.arg_configs], found


def wanted(script: Path, labels: tuple[str, ...], args: list[str], cwd: Path, own: tuple[str, ...],
           parsed: dict[str, Any] | None = None) -> bool:
    """Whether any setting would be probed (read from the files alone; nothing runs); `parsed`: what the
    script's parser returned in a run (parsed.py)."""
    configs, found = _found(script, labels, args, cwd, own, parsed)
    return bool(candidates(found, names.taken(script, configs, args)))


def confirmed(script: Path, labels: tuple[str, ...], args: list[str], cwd: Path, own: tuple[str, ...],
              smoke: bool, work: Path, exclude: list[Path], parsed: dict[str, Any] | None = None) -> tuple[str, ...]:
    """`name:knob:probed` for each candidate a probe run confirmed (none where discovery lacks nothing).
    The runs go in folders under `work` (the run folder, whose lock the caller holds), each removed after;
    `exclude`: what their copies of `cwd` leave out (the runs folder)."""
    from .styles import discover

    configs, found = _found(script, labels, args, cwd, own, parsed)
    out: list[str] = []
    done: set[str] = set()
    control: list[dict[str, Any] | None] = []   # the unchanged run, made once where a switch needs it

    def run(edits: dict, flags: list[str]) -> dict[str, Any] | None:
        with tempfile.TemporaryDirectory(prefix="probe-", dir=work) as folder:
            return _run(script, configs, args, cwd, edits, flags, smoke, Path(folder), exclude)

    for role, name in candidates(found, names.taken(script, configs, args)):
        _, knob, seen_key = ROLES[role]
        if role in done:
            continue
        # The candidate read as that role, by the same route a user's script_knobs= would give it.
        as_knob = knob or "bf16"   # a switch is read as a bf16 flag until the runs say which precision it is
        setting = discover(script, configs, args, cwd, own + (f"{name}:{as_knob}",), parsed).get(names.TARGETS[as_knob])
        if setting is None or not isinstance(setting.value, int):
            continue
        if role in SWITCHES:
            if not control:
                control.append(run({}, []))
            flipped = run(*_edit(setting, not setting.value))
            on, off = (control[0], flipped) if setting.value else (flipped, control[0])
            knob = _switch(on, off) if role == "precision" else knob if _seen_doing(role, on, off) else None
            confirmed_here = knob is not None
        else:
            value = setting.value + 1 if role == "accumulation" else setting.value * 2
            seen = run(*_edit(setting, value))
            confirmed_here = seen is not None and seen.get(seen_key) == value
        if confirmed_here:
            out.append(f"{name}:{knob}:{MARK}")
            done.add(role)
    return tuple(out)


def _seen_doing(role: str, on: dict[str, Any] | None, off: dict[str, Any] | None) -> bool:
    """Whether the run with the switch on did what the role says and the run with it off did not."""
    if on is None or off is None:
        return False
    if role == "group_by_length":
        grouped, own = on.get("length_jumps"), off.get("length_jumps")
        if grouped is not None and bool(own) and grouped <= GROUPED_JUMPS * own:
            return True
        # Or the same rows in another order, padded less: rows grouped within each step, whose jumps
        # back at every step's start can hide the order inside it.
        return (on.get("rows") is not None and on.get("rows") == off.get("rows")
                and on.get("sequence") != off.get("sequence")
                and (on.get("padding_share") or 0) < (off.get("padding_share") or 0))
    # Packing: rows concatenated (position_ids restarting inside a row), or every batch full width with
    # no padding at all where the same script padded without it.
    def packs(seen: dict[str, Any]) -> bool:
        return bool(seen.get("packed")) or (bool(seen.get("all_widths_max")) and seen.get("padding_share") == 0)
    return packs(on) and not packs(off)


def _switch(on: dict[str, Any] | None, off: dict[str, Any] | None) -> str | None:
    """The precision knob a switch stands for: on, the model computes in bf16 (or fp16); off, in fp32."""
    if on is None or off is None:
        return None
    low = on.get("compute_dtypes") or []
    if off.get("compute_dtypes") == ["float32"] and len(low) == 1 and low[0] in _LOW:
        return _LOW[low[0]]
    return None
