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
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ...config.types import JsonObject, KnobValue
from . import names
from .adapter import _like
from .discover import Discovery, Edits, Setting

PROBE_TIMEOUT_S = 300
# role -> (the words its name may hold, the knob it maps onto); the hooks' observation that confirms it
# is Seen's (a count: Seen.count; a switch: compute dtypes, length jumps, packed widths).
ROLES = {
    "accumulation": (("acc",), "gradient_accumulation_steps"),
    "micro_batch": (("bs", "batch", "micro"), "per_device_train_batch_size"),
    # A mixed-precision switch: which precision it turns on is what the hooks see it compute in.
    "precision": (("amp", "half", "autocast", "mixed"), None),
    # A length-grouping switch: on, consecutive micro-batches hold rows of like length (the row order).
    "group_by_length": (("group", "sort", "bucket"), "group_by_length"),
    # A packing switch: on, rows are concatenated into full-width ones (read, never tried: adapter.py).
    "packing": (("pack", "concat"), "packing"),
}
SWITCHES = ("precision", "group_by_length", "packing")
# Grouped rows must jump at most this share of what the same script's rows jump in its own order.
GROUPED_JUMPS = 0.5
_LOW = {"bfloat16": "bf16", "float16": "fp16"}
MARK = "probed"


@dataclass(frozen=True)
class Seen:
    """What the hooks saw in one probe run: its measurement's `observed` (checks.py) that the roles
    read, the padding share, and the rows it trained by content and in order (rows.py)."""

    rows_per_micro_batch: int | None = None
    micro_batches_per_step: int | None = None
    compute_dtypes: tuple[str, ...] = ()
    length_jumps: float | None = None
    packed: bool = False
    all_widths_max: bool = False
    padding_share: float | None = None
    rows: Mapping[str, int] | None = None      # row key -> times trained
    sequence: tuple[str, ...] | None = None    # the row keys of the parity steps, in the order trained

    @classmethod
    def of(cls, measurement: Mapping[str, object]) -> "Seen | None":
        """From a probe run's measurement (schemas/measurement.json, checked by the executor); None
        where the hooks saw nothing."""
        seen = _mapping(measurement.get("observed"))
        if not seen:
            return None
        parity = _mapping(measurement.get("parity_rows"))
        rows = {str(key): count for key, entry in _mapping(parity.get("rows")).items()
                if isinstance(entry, (list, tuple)) and (count := _whole(entry[0])) is not None}
        sequence = tuple(str(key) for split in _list(parity.get("splits")) for micro in _list(split)
                         for key in _list(micro))
        return cls(_whole(seen.get("rows_per_micro_batch")), _whole(seen.get("micro_batches_per_step")),
                   tuple(str(d) for d in _list(seen.get("compute_dtypes"))), _number(seen.get("length_jumps")),
                   bool(seen.get("packed")), bool(seen.get("all_widths_max")),
                   _number(_mapping(measurement.get("data")).get("padding_share")), rows or None, sequence or None)

    def count(self, role: str) -> int | None:
        """What the run did for a counted role: micro-batches per optimizer step, or rows per micro-batch."""
        return self.micro_batches_per_step if role == "accumulation" else self.rows_per_micro_batch


# Readers of the checked JSON of a probe's measurement: a value of another type reads as absent.
def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[object] | tuple[object, ...]:
    return value if isinstance(value, (list, tuple)) else ()


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def candidates(found: Discovery, taken: list[tuple[str, object, str]]) -> list[tuple[str, str]]:
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


def _edit(setting: Setting, value: int | bool) -> tuple[Edits, list[str]]:
    if setting.source != "argv":
        return {setting.source: [(list(setting.path), _like(setting.value, value))]}, []
    flag, action = setting.path
    if action == "literal":
        return {}, [f"{flag}={value!r}"]
    if action in ("store_true", "store_false"):
        return {}, [flag] if value == (action == "store_true") else []
    return {}, [flag, str(value).lower() if isinstance(value, bool) else str(value)]


def _run(script: Path, configs: list[tuple[Path, str]], args: list[str], cwd: Path, edits: Edits, flags: list[str],
         smoke: bool, folder: Path, exclude: list[Path]) -> Seen | None:
    """One short run of the script through the trial hooks, in a child process as a trial runs (forked
    from the server that has torch imported); its observations, or None if it did not get that far."""
    from ...executors.local import LocalExecutor

    # kind=probe: the script runner runs it as a trial; its spec carries only what the hooks read.
    spec: JsonObject = {
        "schema_version": 1, "kind": "probe", "runner": "script", "job": {"seed": 0, "smoke": smoke},
        "knobs": {"precision": "fp32"},
        "script": {"path": str(script.resolve()), "cwd": str(cwd),
                   "configs": [{"label": label, "path": str(path.resolve())} for path, label in configs],
                   "edits": edits, "args": args, "expect": {},
                   "exclude": [str(path.resolve()) for path in exclude]},
        "flags": flags, "measure_steps": 1, "warmup_max": 0, "workdir": str(folder.resolve())}
    result = LocalExecutor().run(spec, folder, PROBE_TIMEOUT_S)
    measurement = result.get("measurement") or result.get("measurement_rejected") or {}
    return Seen.of(measurement) if isinstance(measurement, Mapping) else None


def _found(script: Path, labels: tuple[str, ...], args: list[str], cwd: Path, own: tuple[str, ...],
           parsed: Mapping[str, KnobValue] | None = None) -> tuple[list[tuple[Path, str]], Discovery]:
    from .styles import discover

    configs = [(cwd / Path(label).expanduser(), label) for label in labels]
    found = discover(script, configs, args, cwd, own, parsed)
    return configs + [(cwd / Path(label).expanduser(), label) for label in found.arg_configs], found


def wanted(script: Path, labels: tuple[str, ...], args: list[str], cwd: Path, own: tuple[str, ...],
           parsed: Mapping[str, KnobValue] | None = None) -> bool:
    """Whether any setting would be probed (read from the files alone; nothing runs); `parsed`: what the
    script's parser returned in a run (parsed.py)."""
    configs, found = _found(script, labels, args, cwd, own, parsed)
    return bool(candidates(found, names.taken(script, configs, args)))


def confirmed(script: Path, labels: tuple[str, ...], args: list[str], cwd: Path, own: tuple[str, ...],
              smoke: bool, work: Path, exclude: list[Path], parsed: Mapping[str, KnobValue] | None = None
              ) -> tuple[str, ...]:
    """`name:knob:probed` for each candidate a probe run confirmed (none where discovery lacks nothing).
    The runs go in folders under `work` (the run folder, whose lock the caller holds), each removed after;
    `exclude`: what their copies of `cwd` leave out (the runs folder)."""
    from .styles import discover

    configs, found = _found(script, labels, args, cwd, own, parsed)
    out: list[str] = []
    done: set[str] = set()
    control: list[Seen | None] = []   # the unchanged run, made once where a switch needs it

    def run(edits: Edits, flags: list[str]) -> Seen | None:
        with tempfile.TemporaryDirectory(prefix="probe-", dir=work) as folder:
            return _run(script, configs, args, cwd, edits, flags, smoke, Path(folder), exclude)

    for role, name in candidates(found, names.taken(script, configs, args)):
        _, knob = ROLES[role]
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
            confirmed_here = seen is not None and seen.count(role) == value
        if confirmed_here:
            out.append(f"{name}:{knob}:{MARK}")
            done.add(role)
    return tuple(out)


def _seen_doing(role: str, on: Seen | None, off: Seen | None) -> bool:
    """Whether the run with the switch on did what the role says and the run with it off did not."""
    if on is None or off is None:
        return False
    if role == "group_by_length":
        grouped, own = on.length_jumps, off.length_jumps
        if grouped is not None and own and grouped <= GROUPED_JUMPS * own:
            return True
        # Or the same rows in another order, padded less: rows grouped within each step, whose jumps
        # back at every step's start can hide the order inside it.
        return (on.rows is not None and on.rows == off.rows and on.sequence != off.sequence
                and (on.padding_share or 0) < (off.padding_share or 0))
    # Packing: rows concatenated (position_ids restarting inside a row), or every batch full width with
    # no padding at all where the same script padded without it.
    def packs(seen: Seen) -> bool:
        return seen.packed or (seen.all_widths_max and seen.padding_share == 0)
    return packs(on) and not packs(off)


def _switch(on: Seen | None, off: Seen | None) -> str | None:
    """The precision knob a switch stands for: on, the model computes in bf16 (or fp16); off, in fp32."""
    if on is None or off is None:
        return None
    low = on.compute_dtypes
    if off.compute_dtypes == ("float32",) and len(low) == 1 and low[0] in _LOW:
        return _LOW[low[0]]
    return None
