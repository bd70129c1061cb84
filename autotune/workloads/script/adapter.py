"""From discovered settings to knobs and back: the starting config, what can be tried, and the edits
that make a trial's copies of the user's configs (or its command line) say a given config.

Only knobs the script has a setting for are tried. The micro-batch moves only with an accumulation
setting beside it, so that micro x accumulation (the effective batch) stays what the user set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...util.errors import JobError
from ...config.knobs import CATALOG, NAIVE_START, TABLE, Knobs
from ...config.types import KnobConfig, KnobValue
from .discover import ALIASES, Discovery, Edits, Setting

# Roles whose value is the knob's own value: the knobs the table gives script names and no other role.
DIRECT = tuple(knob.name for knob in TABLE if knob.script_names and knob.script_role is None)
_BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}
# How a precision string names each precision, by style (recognised from the current value).
_PRECISION_STYLES = (
    {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "tf32": "tf32"},
    {"fp32": "no", "bf16": "bf16", "fp16": "fp16"},                                  # accelerate
    {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"},                      # torch dtype names
    {"fp32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"},                   # Lightning
    {"fp32": "32", "bf16": "bf16-mixed", "fp16": "16-mixed"},                        # Lightning's short names
)
# The styles whose libraries refuse fp16 autocast on a CPU (accelerate stops; Lightning runs bf16 instead).
_GPU_ONLY_FP16 = (1, 3, 4)


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).lower() in _BOOL_WORDS:
        return _BOOL_WORDS[str(value).lower()]
    return None


def _key(setting: Setting) -> str:
    """The setting's own name: a file's last key, or a flag without its dashes."""
    return setting.path[0].lstrip("-") if setting.source == "argv" else setting.path[-1]


def _written(setting: Setting, value: Any) -> Any:
    """A knob's value in the setting's own terms (length grouping is a sampling strategy there)."""
    if _key(setting) == "train_sampling_strategy" and isinstance(value, bool):
        if value:
            return "group_by_length"
        return setting.value if setting.value != "group_by_length" else "random"
    if _key(setting) == "pad_to_multiple_of" and value is None and setting.value == "auto":
        return "auto"   # TRL's "auto" already pads to the longest row off Neuron devices
    return value


def _like(original: Any, value: Any) -> Any:
    """`value` written the way the original was (a YAML string "true" stays a string)."""
    if isinstance(original, str) and isinstance(value, bool):
        return str(value).lower()
    if isinstance(original, str) and isinstance(value, int):
        return str(value)
    return value


@dataclass
class ScriptAdapter:
    discovery: Discovery
    start: Knobs = field(default_factory=Knobs)
    tryable: dict[str, tuple[KnobValue, ...]] = field(default_factory=dict)   # knob -> values the script can express
    max_len: int | None = None
    effective_batch: int | None = None
    notes: list[str] = field(default_factory=list)
    # (script, configs, args) as discovered: read again only to say what the script takes when a
    # setting is not understood (workloads/script/names.py).
    origin: tuple[Path, list[tuple[Path, str]], list[str]] | None = None
    probed: set[str] = field(default_factory=set)   # names a probe run confirmed (workloads/script/probe.py)

    @classmethod
    def for_script(cls, script: Path, labels: tuple[str, ...] | list[str], args: list[str], cwd: Path | None = None,
                   max_len: int | None = None, effective_batch: int | None = None,
                   names: tuple[str, ...] = (), parsed: tuple[str, ...] = (),
                   launcher: tuple[str, ...] = ()) -> "ScriptAdapter":
        """Discover the script's settings (configs as the user named them, relative to `cwd`), let its
        own arguments override its defaults, and build the adapter. `names`: the job's `script_knobs`;
        `parsed`: its `script.parsed`, what the script's parser returned in a run (parsed.py);
        `launcher`: the words of its `script_launcher`."""
        from .discover import apply_args
        from .parsed import read
        from .styles import discover

        base = cwd or Path.cwd()
        configs = [(base / Path(label).expanduser(), label) for label in labels]
        parser, values = read(tuple(parsed))
        found = discover(script, configs, args, base, tuple(names), values, tuple(launcher))
        apply_args(found, args)
        adapter = cls.build(found, max_len, effective_batch, (script, configs + [
            (base / Path(label).expanduser(), label) for label in found.arg_configs], list(args)))
        from .names import probed

        adapter.probed = probed(names)
        if parser:
            read_so = [f"{s.path[-1] if s.source != 'argv' else s.path[0]}={s.value!r}" for s in found.settings
                       if s.origin == "default" and (s.path[-1] if s.source != "argv" else s.path[0].lstrip("-")) in values]
            adapter.notes.append(f"defaults as the script's parser returned them ({parser}, in a run stopped there): "
                                 + (", ".join(read_so) or "none that autotune reads"))
        return adapter

    @classmethod
    def build(cls, discovery: Discovery, max_len: int | None = None, effective_batch: int | None = None,
              origin: tuple[Path, list[tuple[Path, str]], list[str]] | None = None) -> "ScriptAdapter":
        adapter = cls(discovery, origin=origin)
        adapter._read(max_len, effective_batch)
        return adapter

    def not_understood(self, what: str, knobs: tuple[str, ...] = ("per_device_train_batch_size",),
                       if_seen: tuple[str, ...] = ()) -> str:
        """The one line for a setting discovery could not find: what the script takes, what was looked
        for, and the `script_knobs=` key that maps the script's own names."""
        from . import names

        taken = names.taken(*self.origin) if self.origin else []
        known = {names.normal(s.path[0] if s.source == "argv" else s.path[-1]) for s in self.discovery.settings}
        looked = [alias for knob in knobs for alias, role in ALIASES.items() if role == names.TARGETS[knob]]
        return names.way_out(what, looked, taken, known, knobs, if_seen)

    # -- reading the user's settings ---------------------------------------------------------------
    def _read(self, max_len: int | None, effective_batch: int | None) -> None:
        get = self.discovery.get
        start = dict(NAIVE_START)
        micro, accumulation = get("micro_batch"), get("accumulation")
        if micro is None or not isinstance(micro.value, int) or micro.value < 1:
            if micro is not None:
                raise JobError(f"{micro.where} = {micro.value!r} is read as the micro-batch size, which must be a "
                               "whole number >= 1; set it so, or name the right setting with script_knobs="
                               "NAME:per_device_train_batch_size")
            raise JobError(self.not_understood("no micro-batch size found in the script or its configs",
                                               ("per_device_train_batch_size", "gradient_accumulation_steps")
                                               if accumulation is None else ("per_device_train_batch_size",)))
        steps = accumulation.value if accumulation and isinstance(accumulation.value, int) else 1
        found_batch = micro.value * steps
        if effective_batch is not None and effective_batch != found_batch:
            raise JobError(f"effective_batch={effective_batch}, but the script's settings give {micro.value} x "
                           f"{steps} = {found_batch} rows per optimizer step; drop effective_batch= or fix the config")
        self.effective_batch = found_batch
        start["per_device_train_batch_size"] = micro.value
        if accumulation is not None:
            self.tryable["per_device_train_batch_size"] = ()
        else:
            self.notes.append("no gradient-accumulation setting: the micro-batch stays as it is (changing it "
                              "would change the effective batch); if your script has one, name it with "
                              "script_knobs=NAME:gradient_accumulation_steps")
        length = get("max_len")
        self.max_len = max_len or (length.value if length and isinstance(length.value, int) else None)
        for role in DIRECT:
            setting = get(role)
            if setting is None:
                continue
            value = self._direct_value(role, setting)
            if value is not None:
                start[role] = value
                self.tryable[role] = ()
        precision = self._precision()
        if precision:
            start["precision"] = precision
            self.tryable["precision"] = ()
        padding, values = self._padding()
        if padding:
            start["padding"] = padding
            self.tryable["padding"] = values
        packing = get("packing")
        if packing is not None:
            self.notes.append(f"{packing.where} = {packing.value!r}: packing concatenates rows into new ones, so it "
                              "trains something else; it is held as it is, never tried")
        if len(self.tryable) == 0:
            read = "; ".join(f"{s.where} = {s.value!r} read as {s.role}" for s in self.discovery.settings)
            raise JobError(self.not_understood(f"no knob autotune can change found in the script or its configs "
                                               f"({read or 'nothing read'})",
                                               ("gradient_accumulation_steps",), ("per_device_train_batch_size",)))
        self.start = Knobs(**start)

    def _direct_value(self, role: str, setting: Setting) -> Any:
        if role == "group_by_length" and _key(setting) == "train_sampling_strategy":
            return setting.value == "group_by_length" if isinstance(setting.value, str) else None
        knob = CATALOG[role]
        if knob.kind == "bool":
            return _as_bool(setting.value)
        if knob.kind == "int":
            return int(setting.value) if str(setting.value).isdigit() else None
        return setting.value if setting.value in knob.choices else None

    def _precision(self) -> str | None:
        text = self.discovery.get("precision")
        if text is not None and isinstance(text.value, (str, int)) and not isinstance(text.value, bool):
            for style in _PRECISION_STYLES:
                for name, word in style.items():
                    if word == str(text.value).lower():
                        return name
        flags = {role: _as_bool(s.value) for role in ("bf16", "fp16", "tf32") if (s := self.discovery.get(role))}
        if not flags:
            return None
        if flags.get("bf16"):
            return "bf16"
        if flags.get("fp16"):
            return "fp16"
        return "tf32" if flags.get("tf32") else "fp32"

    def _padding(self) -> tuple[str | None, tuple[KnobValue, ...]]:
        free, mode, to_max = (self.discovery.get(r) for r in ("padding_free", "padding", "pad_to_max_length"))
        base = None
        if mode is not None and mode.value in ("max_length", "longest"):
            base = mode.value
        elif to_max is not None and _as_bool(to_max.value) is not None:
            base = "max_length" if _as_bool(to_max.value) else "longest"
        multiple = self.discovery.get("pad_to_multiple_of")
        if base is None and multiple is not None and self.max_len:
            # TRL pads each batch to a multiple of pad_to_multiple_of: max_len there pads every row to it.
            if multiple.value == self.max_len:
                base = "max_length"
            elif multiple.value in (None, "auto"):   # "auto" is None off Neuron devices: pad to the longest row
                base = "longest"
        if base is None and free is None:
            return None, ()
        # Without a padding setting, "longest" names whatever the script does when not packing.
        values: tuple[KnobValue, ...] = ("max_length", "longest") if base else ("longest",)
        if free is not None:
            values += ("padding_free",)
        return ("padding_free" if free is not None and _as_bool(free.value) else base or "longest"), values

    # -- what can be tried ---------------------------------------------------------------------------
    def why_not(self, knob: str, value: Any, device_kind: str | None = None) -> str | None:
        """Why the script cannot say `knob=value`; `device_kind`: where the trials run ("cpu", "cuda")."""
        if knob not in self.tryable:
            return self._not_applicable(knob)
        allowed = self.tryable[knob]
        if allowed and value not in allowed:
            return f"the script's settings cannot say {knob}={value}"
        if knob == "precision" and not self._can_say(value):
            return f"the script has no setting that says precision {value}"
        style = self._style()
        if (knob == "precision" and value == "fp16" and device_kind == "cpu" and style is not None
                and _PRECISION_STYLES.index(style) in _GPU_ONLY_FP16):
            return "fp16 autocast needs a GPU in accelerate and Lightning (on a CPU one stops, the other runs bf16)"
        use_cpu = self.discovery.get("use_cpu")
        if (knob == "precision" and value in ("bf16", "fp16") and device_kind == "cpu" and use_cpu is not None
                and _as_bool(use_cpu.value) is False):
            return (f"transformers refuses {value} on a CPU unless use_cpu is set ({use_cpu.where} = "
                    f"{use_cpu.value!r}); pass --use_cpu true in script_args to let it be tried")
        if knob == "padding" and value == "padding_free" and self._trl_holds_max_length():
            return ("TRL (>= 1.0) refuses padding_free without packing while max_length is set, and max_length "
                    "is the length you set (held)")
        return None

    def _not_applicable(self, knob: str) -> str:
        """Why a knob the script does not expose is not tried: the names looked for, or that no script can say it."""
        from . import names

        if knob not in names.TARGETS:
            return (f"not applicable here: the script has no setting for {knob}, a knob of autotune's own trainer "
                    "(a script says it in its own code)")
        role = names.TARGETS[knob]
        looked = sorted(alias for alias, r in ALIASES.items() if r == role)
        return (f"not applicable here: the script has no setting for {knob} (none of {', '.join(looked[:4])} in its "
                f"configs, flags or parser); if it has one by another name, add script_knobs=NAME:{knob}")

    def _trl_holds_max_length(self) -> bool:
        """An SFTConfig script (TrlParser: the dataclass style with TRL's padding_free field) whose
        max_length is set: SFTTrainer stops on padding_free there, whatever the other knobs."""
        length = self.discovery.get("max_len")
        return (self.discovery.style == "dataclass" and self.discovery.get("padding_free") is not None
                and length is not None and length.value is not None)

    def _can_say(self, precision: str) -> bool:
        """A precision is tried only where the script's settings can express it exactly."""
        if self._precision_style_has(precision):
            return True
        flags = {role for role in ("bf16", "fp16", "tf32") if self.discovery.get(role)}
        text = self.discovery.get("precision")
        if text is not None and isinstance(text.value, str):
            return False  # a precision name the style lacks cannot be said with flags beside it
        return precision in flags or (precision == "fp32" and bool(flags))

    def _style(self) -> dict[str, str] | None:
        """How the script's precision string names precisions, from its key and current value
        (`bf16` is both accelerate's and ours: the key `mixed_precision` says accelerate)."""
        text = self.discovery.get("precision")
        if text is None or not isinstance(text.value, (str, int)) or isinstance(text.value, bool):
            return None
        candidates = [s for s in _PRECISION_STYLES if str(text.value).lower() in s.values()]
        key = _key(text).lower().rsplit(".", 1)[-1] if text.path else ""
        preferred = {"mixed_precision": 1, "accelerate_mixed_precision": 1, "dtype": 2, "torch_dtype": 2}.get(key)
        if preferred is not None and _PRECISION_STYLES[preferred] in candidates:
            return _PRECISION_STYLES[preferred]
        return candidates[0] if candidates else None

    def _precision_style_has(self, name: str) -> bool:
        style = self._style()
        return style is not None and name in style

    # -- writing a config ----------------------------------------------------------------------------
    def edits(self, knobs: Knobs) -> tuple[Edits, list[str]]:
        """Per config file (as the user named it), the (key path, value) edits; and the extra flags."""
        files: Edits = {}
        flags: list[str] = []

        def put(setting: Setting | None, value: Any) -> None:
            if setting is None:
                return
            value = _written(setting, value)
            if setting.value == _like(setting.value, value) or (setting.value is None and value is False):
                return   # a flag left unset (tf32=None) already means off
            if setting.source == "argv":
                flag, action = setting.path
                if action == "literal":      # the configurator: --key=<Python literal>
                    flags.append(f"{flag}={value!r}")
                elif action == "store_true":
                    flags.extend([flag] if value else [])
                elif action == "store_false":
                    flags.extend([] if value else [flag])
                else:
                    flags.extend([flag, str(value).lower() if isinstance(value, bool) else str(value)])
            else:
                files.setdefault(setting.source, []).append((list(setting.path), _like(setting.value, value)))

        get = self.discovery.get
        if "per_device_train_batch_size" in self.tryable:
            put(get("micro_batch"), knobs.per_device_train_batch_size)
            put(get("accumulation"), self.effective_batch // knobs.per_device_train_batch_size)
        for role in DIRECT:
            if role in self.tryable:
                put(get(role), getattr(knobs, role))
        if "precision" in self.tryable:
            text = get("precision")
            style = self._style()
            if style is not None and knobs.precision in style:
                put(text, style[knobs.precision])
            for role in ("bf16", "fp16", "tf32"):
                put(get(role), knobs.precision == role)
        if "padding" in self.tryable:
            put(get("padding_free"), knobs.padding == "padding_free")
            if knobs.padding != "padding_free":
                put(get("padding"), knobs.padding)
                put(get("pad_to_max_length"), knobs.padding == "max_length")
                if get("padding") is None and get("pad_to_max_length") is None:
                    put(get("pad_to_multiple_of"), self.max_len if knobs.padding == "max_length" else None)
        return files, flags

    def expected(self, knobs: Knobs) -> KnobConfig:
        """What a trial of `knobs` must be seen to do where it differs from the script's own settings
        (workloads/script/checks.py checks it): the changed knobs, and the accumulation that keeps the
        effective batch when the micro-batch moved."""
        expect: KnobConfig = {knob: getattr(knobs, knob) for knob in self.tryable if getattr(knobs, knob) != getattr(self.start, knob)}
        if "per_device_train_batch_size" in expect and self.effective_batch:
            expect["micro_batches_per_step"] = self.effective_batch // knobs.per_device_train_batch_size
        return expect

    def listing(self) -> list[str]:
        """What was found and what will be tried, for the frame and `review`."""
        from .names import normal

        lines = [f"{s.where} = {s.value!r} -> {s.role}"
                 + (" (confirmed by a probe run)" if normal(_key(s)) in self.probed else "")
                 for s in self.discovery.settings]
        lines.append(f"effective batch {self.effective_batch} (held), max_len {self.max_len or 'unknown'} (held)")
        lines.append("knobs to try: " + ", ".join(sorted(self.tryable)))
        return lines + [f"note: {n}" for n in self.notes]
