"""Each expected failure ends one trial with a recorded state; the executor itself never raises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_spec, tiny_job

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
    result = executor.run(make_spec(tmp_path, inject_fault="hang"), tmp_path / "hang", timeout_s=6)
    assert result["state"] == "timeout"
    assert "6s" in result["reason"]
    assert result["wall_s"] < 600   # a hang guard: the injected hang sleeps for 10**6 s


OWNER = """
import json, sys
from pathlib import Path
from autotune.executors import LocalExecutor
LocalExecutor(fork=sys.argv[3] == "fork").run(json.loads(sys.argv[1]), Path(sys.argv[2]), 600)
"""


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent, session) of every live process (zombies are gone for this purpose)."""
    table = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                state, parent, _, session = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
                if state != "Z":
                    table[int(entry.name)] = (int(parent), int(session))
        except (OSError, ValueError):
            pass
    return table


def _descendants(root: int) -> set[int]:
    table, found, frontier = _processes(), set(), {root}
    while frontier:
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("start", ["fork", "plain"])
def test_a_trial_ends_when_the_process_that_started_it_is_killed(tmp_path, start):
    # A Ray actor killed on a live node, or a tuner killed with SIGKILL: its trial must not go on
    # holding the GPU. The owner here is a process running the executor, killed mid-trial.
    spec = make_spec(tmp_path, inject_fault="hang")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, json.dumps(spec), str(tmp_path / "hang"), start])
    deadline, trials = time.monotonic() + 120, set()
    while not trials and time.monotonic() < deadline:
        time.sleep(0.2)
        # The trial leads its own session (the fork server beside it does not).
        trials = {pid for pid in _descendants(owner.pid) if _processes().get(pid, (0, 0))[1] == pid}
    assert trials, "the trial never started"
    left_behind = _descendants(owner.pid)
    time.sleep(1.0)  # past the runner's start, into the hang
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 30
    while left_behind & set(_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left_behind & set(_processes())


def test_the_runner_also_runs_as_a_plain_module_process(tmp_path, framed):
    """`python -m autotune.workloads.hf.runner SPEC RESULT`: the path for another interpreter (or a remote box)."""
    framed()
    result = LocalExecutor(fork=False).run(make_spec(tmp_path), tmp_path / "plain", timeout_s=300)
    assert result["state"] == "complete" and result["exit_code"] == 0
    assert (tmp_path / "plain" / "stdout.txt").read_text().startswith("autotune runner: complete")


def test_a_plain_pytorch_job_s_fork_server_holds_what_its_trials_import_and_not_the_hugging_face_stack(tmp_path):
    """An MLP job's first trial waits for the fork server's imports, and each trial forked from it imports
    what the server lacks. Neither may be the Hugging Face stack, nor torch's compiler stack (torch._dynamo
    and sympy, which the first optimizer step imports: 1.1 s a trial when the server had not)."""
    from autotune.executors.local import preload_for

    hf = preload_for("hf")
    assert {"trl", "datasets", "transformers"} <= set(hf) and preload_for("script") == hf  # a script may use them
    job = tiny_job(model="mlp", mlp_width=64, mlp_rows=512, effective_batch=8)
    specs = []
    for kind, fields in (("frame", {}), ("trial", {"measure_steps": 4, "warmup_max": 2})):
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps(make_spec(tmp_path, kind, job=job, runner="mlp", rows_needed=8 * 14, **fields)))
        specs.append((str(path), str(tmp_path / f"{kind}-result.json")))
    check = f"""
import importlib, runpy, sys, warnings
warnings.simplefilter("ignore")
for name in {preload_for("mlp")!r}:
    importlib.import_module(name)
server = set(sys.modules)
for spec, result in {specs!r}:
    sys.argv = ["runner", spec, result]
    try:
        runpy.run_module("autotune.workloads.mlp.runner", run_name="__main__")
    except SystemExit:
        pass
late = set(sys.modules) - server
print(sorted({{m.split(".")[0] for m in server | late}} & {{"transformers", "trl", "datasets"}}),
      sorted(m for m in late if m.startswith(("torch._dynamo", "sympy")))[:3])
"""
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert json.loads((tmp_path / "trial-result.json").read_text())["state"] == "complete"
    assert out.stdout.strip().splitlines()[-1] == "[] []"


def test_the_fork_server_is_started_again_with_the_hugging_face_stack_once_a_later_job_needs_it():
    """A notebook (or a test worker) that tuned a plain PyTorch job and now tunes a Hugging Face one: its
    server lacked transformers, so every trial would import it (4 s each). It is started again with both
    preloads, but never under a running trial (that trial's exit status comes through the server)."""
    check = """
import json
from multiprocessing import forkserver
import autotune.executors.local as local
# Light stand-ins for the two preloads: the rule is the subject, not an import of seconds.
local.PRELOAD = ["autotune.executors.forkserver_home", "csv", "json"]
local.PRELOAD_BY_RUNNER = {"mlp": ["autotune.executors.forkserver_home", "json", "zlib"]}
server = forkserver._forkserver
local._context("mlp")
first, mlp = server._forkserver_pid, list(server._preload_modules)
local._context("mlp")
again = server._forkserver_pid
local._live.add(1)
local._context("hf")
held = server._forkserver_pid
local._live.clear()
local._context("hf")
print(json.dumps({"first": first, "again": again, "held": held, "now": server._forkserver_pid, "mlp": mlp,
                  "both": list(server._preload_modules)}))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True,
                                    timeout=120).stdout.strip().splitlines()[-1])
    assert "csv" not in out["mlp"] and out["again"] == out["held"] == out["first"] != out["now"]
    assert out["both"] == ["autotune.executors.forkserver_home", "json", "zlib", "csv"]
