"""The keep/discard statistics on real recorded step times (tests/data/step_times.json) and on
synthetic runs whose answer is known.

The recorded file holds repeated runs of ONE config ("normal") and runs of the same loop slowed by a
real 5% (a sleep in every step, "slowed"); tests/data/record_step_times.py wrote it. These tests only
read it.

How the loop is expected to use the module, and so how the tests draw runs: the noise floor is
computed once from the baseline's repeats (3 runs of the user's config) and then used for every
comparison, each of which measures fresh runs of incumbent and candidate (3 vs 3, interleaved). So
every draw below takes 3 runs for the floor and DIFFERENT runs for the comparison: a floor computed
from the compared runs themselves would be fitted to them and overstate how well it generalises.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune.probes.stats import SCHED_SLICE_S, Comparison, compare, impossible, noise_floor, throughput

DATA = Path(__file__).resolve().parents[1] / "data" / "step_times.json"
DRAWS = 200
GROUP = 3


@pytest.fixture(scope="module")
def recorded() -> dict:
    data = json.loads(DATA.read_text())
    assert len(data["normal"]) >= 3 * GROUP and len(data["slowed"]) >= GROUP
    return data


def test_recorded_runs_are_real_readings(recorded):
    for run in recorded["normal"] + recorded["slowed"]:
        assert len(run) == recorded["steps"]
        assert impossible(run) is None
    assert {"cpu_count", "torch", "date"} <= set(recorded["machine"])


def test_same_config_is_no_difference_in_at_least_95_percent_of_draws(recorded):
    runs, rows = recorded["normal"], recorded["rows_per_step"]
    rng = random.Random(20240601)
    verdicts = []
    for draw in range(DRAWS):
        chosen = rng.sample(range(len(runs)), 3 * GROUP)
        base, a, b = ([runs[i] for i in chosen[k:k + GROUP]] for k in (0, GROUP, 2 * GROUP))
        floor = noise_floor(base, seed=draw)
        verdicts.append(compare(a, b, rows, floor, seed=draw).verdict)
    rate = verdicts.count("no difference") / DRAWS
    assert rate >= 0.95, f"A/A 'no difference' in {rate:.1%} of draws: {verdicts.count('faster')} faster, " \
                         f"{verdicts.count('slower')} slower"


def robust_cv(runs: list[list[float]], rows: int) -> float:
    """Run-to-run spread of throughput: 1.4826 x MAD / median (a few outlier runs do not dominate it)."""
    tp = np.array([throughput(run, rows) for run in runs])
    return float(1.4826 * np.median(np.abs(tp - np.median(tp))) / np.median(tp))


# A 5% effect is resolvable with 3 vs 3 runs only when runs agree to about 1%: on synthetic_runs with
# 3% step jitter, drawn as below, "slower" comes out in 176/200 draws at 0.5% run-to-run CV, 140 at 1%,
# 64 at 2%, 27 at 3%. Above this, asserting 80% on the recorded data would assert the impossible: the
# rate is then skipped with the measured spread (re-record on a quiet machine), and what is still
# checked is that no draw calls the slowdown the wrong way. The recording in the repository comes from
# a 2-vCPU VM whose speed drifts +-15% between host regimes even with nothing else running in it
# (robust CV 11.8%): there the 5% slowdown is called slower in 5/200 draws, the wrong way in none.
RESOLVABLE_CV = 0.01


@pytest.fixture(scope="module")
def slowdown(recorded: dict) -> tuple[int, int, int]:
    """(slower, faster when swapped, wrong-way verdicts) over DRAWS draws of 3 normal vs 3 slowed runs,
    the floor from 3 further normal runs."""
    normal, slowed, rows = recorded["normal"], recorded["slowed"], recorded["rows_per_step"]
    rng = random.Random(7)
    slower = faster = wrong = 0
    for draw in range(DRAWS):
        chosen = rng.sample(range(len(normal)), 2 * GROUP)
        base, incumbent = [normal[i] for i in chosen[:GROUP]], [normal[i] for i in chosen[GROUP:]]
        candidate = [slowed[i] for i in rng.sample(range(len(slowed)), GROUP)]
        floor = noise_floor(base, seed=draw)
        forward = compare(incumbent, candidate, rows, floor, seed=draw).verdict
        swapped = compare(candidate, incumbent, rows, floor, seed=draw).verdict
        slower += forward == "slower"
        faster += swapped == "faster"
        wrong += (forward == "faster") + (swapped == "slower")
    return slower, faster, wrong


def test_recorded_5_percent_slowdown_is_never_called_the_wrong_way(slowdown):
    assert slowdown[2] == 0, f"{slowdown[2]} of {2 * DRAWS} verdicts called the 5% slowdown the wrong way"


def test_recorded_5_percent_slowdown_is_detected_both_ways(recorded, slowdown):
    spread = robust_cv(recorded["normal"], recorded["rows_per_step"])
    if spread > RESOLVABLE_CV:
        pytest.skip(f"recorded runs vary {spread:.1%} run to run (robust CV); a 5% effect needs <= "
                    f"{RESOLVABLE_CV:.0%} to be resolvable with 3 vs 3 runs: re-record on a quiet machine")
    slower, faster, _ = slowdown
    assert slower / DRAWS >= 0.80, f"5% slowdown called slower in {slower}/{DRAWS} draws"
    assert faster / DRAWS >= 0.80, f"5% slowdown, swapped, called faster in {faster}/{DRAWS} draws"


def synthetic_runs(n_runs: int, speed: float = 1.0, run_noise: float = 0.01, step_noise: float = 0.02,
                   seed: int = 0) -> list[list[float]]:
    """Runs of 10 steps with different workloads per step index, a per-run offset and per-step jitter."""
    rng = np.random.default_rng(seed)
    workload = np.array([0.020, 0.035, 0.028, 0.050, 0.022, 0.041, 0.030, 0.045, 0.025, 0.038])
    runs = []
    for _ in range(n_runs):
        offset = 1.0 + run_noise * rng.standard_normal()
        jitter = 1.0 + step_noise * rng.standard_normal(workload.size)
        runs.append((workload * offset * jitter / speed).tolist())
    return runs


def test_clear_30_percent_speed_up_is_faster_and_its_interval_holds_1_3():
    incumbent = synthetic_runs(3, seed=1)
    candidate = synthetic_runs(3, speed=1.3, seed=2)
    floor = noise_floor(synthetic_runs(3, seed=3))
    result = compare(incumbent, candidate, 8, floor)
    assert result.verdict == "faster", result.reason
    assert result.low <= 1.3 <= result.high, result.reason
    assert result.ratio == pytest.approx(1.3, rel=0.03)
    assert "clears" in result.reason and "%" in result.reason
    swapped = compare(candidate, incumbent, 8, floor)
    assert swapped.verdict == "slower" and swapped.high < 1 - floor, swapped.reason


def test_synthetic_5_percent_slowdown_is_detected_when_runs_agree():
    # The method's power where the instrument allows it: runs that agree to 0.5% (3% step jitter),
    # drawn as the loop draws them. Measured: 176/200 slower; A/A on the same runs: 200/200.
    slower = same = 0
    for draw in range(DRAWS):
        base, a, b = (synthetic_runs(GROUP, run_noise=0.005, step_noise=0.03, seed=4 * draw + k) for k in range(3))
        slowed = synthetic_runs(GROUP, speed=1 / 1.05, run_noise=0.005, step_noise=0.03, seed=4 * draw + 3)
        floor = noise_floor(base, seed=draw)
        slower += compare(a, slowed, 8, floor, seed=draw).verdict == "slower"
        same += compare(a, b, 8, floor, seed=draw).verdict == "no difference"
    assert slower / DRAWS >= 0.80, f"{slower}/{DRAWS}"
    assert same / DRAWS >= 0.95, f"{same}/{DRAWS}"


def test_a_difference_inside_the_noise_floor_is_no_difference():
    incumbent, candidate = synthetic_runs(3, seed=1), synthetic_runs(3, speed=1.3, seed=2)
    result = compare(incumbent, candidate, 8, noise_floor=0.5)   # a real 30%, but a 50% floor
    assert result.low > 1.0 and result.verdict == "no difference", result.reason


def test_identical_inputs_give_ratio_1_and_no_difference():
    runs = synthetic_runs(4, seed=5)
    result = compare(runs, runs, 8, noise_floor=noise_floor(runs))
    assert result.ratio == 1.0
    assert result.low <= 1.0 <= result.high
    assert result.verdict == "no difference"


def test_compare_is_deterministic_for_a_seed():
    a, b = synthetic_runs(3, seed=1), synthetic_runs(3, speed=1.02, seed=2)
    first = compare(a, b, 8, 0.01, seed=11)
    assert isinstance(first, Comparison)
    assert compare(a, b, 8, 0.01, seed=11) == first
    other = compare(a, b, 8, 0.01, seed=12)
    assert other.ratio == first.ratio and (other.low, other.high) != (first.low, first.high)
    assert noise_floor(a, seed=4) == noise_floor(a, seed=4)


def test_steps_are_paired_by_index():
    # Step workloads differ 2.5x by index; unpaired resampling would make the interval wide. The
    # same 2% speed-up on every step must come out as a narrow interval around 1.02.
    runs = synthetic_runs(3, run_noise=0.0, step_noise=0.0)
    faster = [[t / 1.02 for t in run] for run in runs]
    result = compare(runs, faster, 8, noise_floor=0.005)
    assert result.low == pytest.approx(1.02) and result.high == pytest.approx(1.02)
    assert result.verdict == "faster"


def test_noise_floor_follows_the_run_to_run_spread():
    quiet = noise_floor(synthetic_runs(3, run_noise=0.001, step_noise=0.001, seed=8))
    noisy = noise_floor(synthetic_runs(3, run_noise=0.05, step_noise=0.001, seed=8))
    assert quiet < 0.01 < noisy < 0.3


def test_noise_floor_minimum_is_one_scheduler_slice_per_run():
    runs = synthetic_runs(3, run_noise=0.0, step_noise=0.0)
    assert noise_floor(runs) == pytest.approx(SCHED_SLICE_S / math.fsum(runs[0]))
    assert noise_floor(runs[:1]) == pytest.approx(SCHED_SLICE_S / math.fsum(runs[0]))


def test_throughput_is_rows_over_total_time():
    assert throughput([0.5, 1.5], 4) == pytest.approx(4.0)
    assert throughput([0.1] * 10, 8) == pytest.approx(80.0)


@pytest.mark.parametrize("times, words", [
    ([], "no step times"), ([0.1, 0.0], "zero or negative"), ([-0.1], "zero or negative"),
    ([0.1, float("nan")], "NaN"), ([float("inf")], "infinite"), ([0.1, None], "not a number"),
])
def test_impossible_readings_are_named(times, words):
    reason = impossible(times)
    assert reason is not None and words in reason


def test_possible_readings_pass_and_compare_refuses_impossible_ones():
    assert impossible([0.02, 0.03, 1e-6]) is None
    assert impossible([0.02, 1e-7], resolution=1e-6) is not None
    with pytest.raises(ValueError, match="NaN"):
        compare([[0.1, float("nan")]], [[0.1, 0.1]], 8, 0.01)


def test_module_does_not_import_torch():
    code = "import sys, autotune.probes.stats; sys.exit(1 if 'torch' in sys.modules else 0)"
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root, timeout=60).returncode == 0
