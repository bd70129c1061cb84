"""Each expected failure ends one trial with a recorded state; the executor itself never raises."""

from __future__ import annotations

import pytest
from conftest import make_spec

from autotune.executors import LocalExecutor


@pytest.fixture
def executor():
    return LocalExecutor()


def test_complete_trial_reports_measurement_and_wall_time(tmp_path, framed, executor):
    framed()
    result = executor.run(make_spec(tmp_path), tmp_path / "t1", timeout_s=300)
    assert result["state"] == "complete"
    assert result["measurement"]["samples_per_s"] > 0 and result["wall_s"] > 0
    assert (tmp_path / "t1" / "spec.json").exists() and (tmp_path / "t1" / "stdout.txt").read_text().startswith("autotune runner")


@pytest.mark.parametrize("fault, state, says", [
    ("oom", "oom", "out of memory"),
    ("nan", "invalid", "loss is nan"),
])
def test_faults_inside_the_step_loop_become_states(tmp_path, framed, executor, fault, state, says):
    framed()
    result = executor.run(make_spec(tmp_path, inject_fault=fault), tmp_path / fault, timeout_s=300)
    assert result["state"] == state
    assert says in result["reason"].lower()


def test_a_dead_process_is_a_crash_with_the_stderr_tail(tmp_path, executor):
    result = executor.run(make_spec(tmp_path, inject_fault="crash"), tmp_path / "crash", timeout_s=300)
    assert result["state"] == "crash"
    assert "exit code" in result["reason"]
    assert "injected crash" in result["stderr_tail"]


def test_an_exception_in_the_runner_is_a_crash_with_the_traceback(tmp_path, executor):
    spec = make_spec(tmp_path, rows_path=str(tmp_path / "no-such-rows.json"))
    result = executor.run(spec, tmp_path / "broken", timeout_s=300)
    assert result["state"] == "crash"
    assert "no-such-rows.json" in result["reason"]
    assert "Traceback" in result["traceback"]


def test_a_hung_trial_times_out_and_its_process_group_is_killed(tmp_path, executor):
    result = executor.run(make_spec(tmp_path, inject_fault="hang"), tmp_path / "hang", timeout_s=20)
    assert result["state"] == "timeout"
    assert "20s" in result["reason"]
    assert result["wall_s"] < 60


def test_the_runner_also_runs_as_a_plain_module_process(tmp_path, framed):
    """`python -m autotune.runners.hf SPEC RESULT`: the path for another interpreter (or a remote box)."""
    framed()
    result = LocalExecutor(fork=False).run(make_spec(tmp_path), tmp_path / "plain", timeout_s=300)
    assert result["state"] == "complete" and result["exit_code"] == 0
    assert (tmp_path / "plain" / "stdout.txt").read_text().startswith("autotune runner: complete")
