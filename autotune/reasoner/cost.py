"""What measuring a change costs: a trial's expected device time, in runs of the incumbent.

The ranking orders changes by expected gain per device second (rank.py: P(helps) x log(ratio) / cost).
A trial's runs under the keep rule (loop/keep_rule.py): one first run, which discards a change that is
slower or cannot reach min_gain; a change that helps much (LARGE_GAIN and more) is then usually decided
on that run or the next against the incumbent's runs so far; a smaller gain needs interleaved pairs,
three runs more at least. A knob whose run takes longer than the incumbent's before its first step (a
compile) adds that time, in runs (its `measure_cost` in the knob table).
"""

from __future__ import annotations

from ..config.knobs import CATALOG

# A gain this large is far beyond a GPU's or a quiet CPU's run-to-run spread: one or two runs decide it.
LARGE_GAIN = 1.25
RUNS_TO_CONFIRM_LARGE = 0.5   # the second run half the time
RUNS_TO_CONFIRM_SMALL = 3.0   # interleaved pairs: the candidate once more, the incumbent twice


def trial_cost(knob: str, p_helps: float, ratio: float) -> float:
    """Expected runs of a trial of `knob`'s change, expected `ratio` faster with probability `p_helps`."""
    confirm = RUNS_TO_CONFIRM_LARGE if ratio >= LARGE_GAIN else RUNS_TO_CONFIRM_SMALL
    entry = CATALOG.get(knob)
    return 1 + confirm * p_helps + (entry.measure_cost if entry is not None else 0.0)
