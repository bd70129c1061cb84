"""The keep rule before issue 19, kept for `python -m bench.extra_pairs` to compare with the loop's.

A bootstrap interval on the ratio of the trial's interleaved runs (probes.stats.compare) must clear the
baseline's A/A noise floor; the screen discards a change whose one run is not faster; extra pairs are
spent while the interval, narrowed as more pairs would narrow it, could clear the floor. No look of its
own after the first or second run, and no more pairs on a noisy machine than the step budget's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from autotune.config.measurement import Measurement
from autotune.config.records import TrialRecord
from autotune.probes import stats


@dataclass(frozen=True)
class FloorRule:
    """A loop.keep_rule.KeepRule: the interval must clear the A/A floor."""

    looks_at_second_run: bool = False

    def most_pairs(self, records: Sequence[TrialRecord], least: int) -> int:
        return least

    def smallest_gain(self, records: Sequence[TrialRecord], most: int, floor: float) -> float:
        return floor

    def screen(self, records: Sequence[TrialRecord], reference: list[list[float]], measurement: Measurement,
               rows_per_step: int, floor: float, incumbent_trial: int | None, most: int,
               min_gain: float) -> stats.Comparison:
        return stats.compare(reference, [list(measurement.step_times_s)], rows_per_step, floor)

    def second_look(self, records: Sequence[TrialRecord], reference: list[list[float]],
                    candidate: Sequence[Measurement], rows_per_step: int, incumbent_trial: int, most: int,
                    min_gain: float) -> stats.Comparison | None:
        return None

    def kept_on_one_run(self, verdict: stats.Comparison) -> bool:
        return False

    def screened_out(self, verdict: stats.Comparison) -> bool:
        return verdict.ratio <= 1 or verdict.verdict == "slower"

    def compare(self, records: Sequence[TrialRecord], incumbent: Sequence[Measurement],
                candidate: Sequence[Measurement], rows_per_step: int, floor: float, most: int,
                last: bool, earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> stats.Comparison:
        # This trial's incumbent runs only: older ones would turn the machine's drift into a gain.
        return stats.compare([list(m.step_times_s) for m in incumbent], [list(m.step_times_s) for m in candidate],
                             rows_per_step, floor)

    def could_close(self, records: Sequence[TrialRecord], verdict: stats.Comparison,
                    incumbent: Sequence[Measurement], candidate: Sequence[Measurement], left: int,
                    most: int, earlier: Sequence[float] = (), incumbent_trial: int | None = None) -> bool:
        # Were the ratio to hold, `left` more pairs narrow the interval as the square root of the runs.
        runs = min(len(candidate), len(incumbent))
        narrowed = math.sqrt(runs / (runs + left))
        return verdict.ratio - (verdict.ratio - verdict.low) * narrowed > 1 + verdict.noise_floor


FLOOR = FloorRule()
