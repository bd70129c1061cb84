"""One knob's entry in the table (`table.py`): every fact about it that the rest of autotune reads.

The reasoner reads `tries`, `climb`, `rank`, `interacts`, `measure_cost` and `requires`; the trial
runners and the export read `sft`, `load`, `trl_model`, `env` and `outside`; the script adapter reads
`script_names`; verdicts read `numerics`; `--help` and docs/reference/knobs.md read `help` and the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..types import DeviceFacts
from ..types import KnobValue, KnobView

# A knob's requirement: why `value` cannot be tried on top of `knobs` (a Knobs) on `device` (the facts
# the frame measured: kind, bf16, tf32, flash_attn, compile, cpu_count, ...) for this effective batch;
# None when it can.
Requires = Callable[[Any, Any, DeviceFacts, int], "str | None"]
# Keyword arguments for another library's call (`SFTConfig(**)`, `from_pretrained(**)`, trl sft's
# ModelConfig): its field names to the scalars a knob sets them to, as a config file writes them.
Fields = dict[str, KnobValue]
# A mapping onto the names another library takes: (value, every knob's value) -> keyword arguments.
Mapping_ = Callable[[Any, KnobView], Fields]


@dataclass(frozen=True)
class SftContext:
    """What an `SFTConfig` mapping needs beside the knobs: the user's length and batch, the installed
    SFTConfig's field names, and the sampling strategy when length grouping is off."""

    max_len: int
    effective_batch: int
    fields: frozenset[str]
    sampling: str = "random"


SftMapping = Callable[[Any, KnobView, SftContext], Fields]

NUMERICS_CLASSES = ("exact", "precision", "changes")


@dataclass(frozen=True)
class Knob:
    """One knob. `kind` is bool | int | choice; `naive` its value in the config many people start with
    (and in records from before it existed)."""

    name: str
    kind: str
    choices: tuple[KnobValue, ...] = ()
    naive: KnobValue = None
    minimum: int = 0          # an int knob's least value
    # An int knob's greatest value, checked where a value is read (the user's words, a config, a record):
    # a loader of 10**17 workers would spawn processes until the budget ends. docs/reference/knobs.md.
    maximum: int = 0
    affects_memory: bool = False
    help: str = ""
    # Only image-text models have it (rank proposes it only where the frame found a vision tower).
    vision: bool = False
    # Changes what is trained, not only how fast: tried only where the user allowed it (a job key).
    changes_training: bool = False
    # The values the ranking tries, in this order (ties keep it); `climb="divisors"`: instead, the
    # neighbouring divisors of effective_batch around the incumbent's value.
    tries: tuple[KnobValue, ...] = ()
    climb: str | None = None
    # An int knob's step where a claim says `up` or `down` (an enabled change: workers + 2).
    step: int = 0
    # Its place in the ranking's tie order (lower first: the largest typical effects); the table's
    # order is the config's field order, which records keep.
    rank: int = 1000
    requires: Requires | None = None
    # Knobs whose value is known to change this one's effect (reasoner/links.py).
    interacts: tuple[str, ...] = ()
    # Extra cost of a trial of it, in runs of the incumbent (compile time).
    measure_cost: float = 0.0
    # Values that change the numbers beyond precision noise: (value, parity tolerance, why), tried only
    # with allow_numerics_change=true.
    numerics: tuple[tuple[KnobValue, float, str], ...] = ()
    # How its values move the losses: "exact" (the same numbers), "precision" (within precision noise,
    # parity-checked), "changes" (some values beyond it: see `numerics`).
    numerics_class: str = "exact"
    # Its SFTConfig fields (None: it has none, the runner applies it); from_pretrained arguments; trl
    # sft's ModelConfig fields beyond those; environment variables; lines trl sft cannot take.
    sft: SftMapping | None = None
    load: Mapping_ | None = None
    trl_model: Mapping_ | None = None
    env: Callable[[Any], dict[str, str]] | None = None
    outside: Callable[[Any], list[str]] | None = None
    # Names a user's script may give it (workloads/script/discover.py), read as the knob's own value.
    script_names: tuple[str, ...] = ()
    # The role discovery gives those names when it is not the knob itself, read as its own value
    # (the micro-batch beside its accumulation, precision strings and flags, padding settings).
    script_role: str | None = None
    # The sft field is one added after the first twelve knobs: dropped where unset and not installed.
    sft_later: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("bool", "int", "choice"):
            raise ValueError(f"knob {self.name}: kind must be bool, int or choice, not {self.kind!r}")
        if self.numerics_class not in NUMERICS_CLASSES:
            raise ValueError(f"knob {self.name}: numerics_class must be one of {', '.join(NUMERICS_CLASSES)}")
        if self.numerics and self.numerics_class != "changes":
            raise ValueError(f"knob {self.name}: values in `numerics` make its numerics_class 'changes'")

    def value_of(self, knobs: KnobView) -> Any:
        """Its value in a config, or the naive one for a config recorded before it existed."""
        return knobs.get(self.name, self.naive)


def field(name: str, cast: Callable[[Any], Any] = lambda v: v) -> SftMapping:
    """An SFTConfig field of the same name taking the knob's value (cast)."""
    def mapping(value: Any, knobs: KnobView, context: SftContext) -> Fields:
        return {name: cast(value)}
    return mapping
