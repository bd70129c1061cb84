"""The Ray executor against a real local Ray cluster, started here: `ray start --head` and one worker
node on 127.0.0.1, CPU only, each with one fake GPU labelled as one model (`accelerator_type:FAKE`).
Trials answer from the table of outcomes inside the Ray actors, so the parallel smoke tune can be
compared with the serial one record for record; a worker node killed mid-trial gives a `crash` trial.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any
from pathlib import Path

import psutil
import pytest

# Ray on Linux turns 127.0.0.1 into the machine's address when a driver joins; the cluster stays on loopback.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray")  # the autotune[ray] extra  # noqa: E402
import table_outcomes  # noqa: E402
from conftest import make_spec, tiny_job  # noqa: E402
from table_outcomes import DOOMED, Table  # noqa: E402

from autotune.util.errors import AutotuneError, JobError  # noqa: E402
from autotune.executors import get_executor  # noqa: E402
from autotune.executors.ray import RayExecutor  # noqa: E402
from autotune.output.records import RunFolder  # noqa: E402
from autotune.output.report import write_best_config, write_report  # noqa: E402
from autotune.loop.tuner import Tuner  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = "FAKE"
SLEEP_S = 0.4  # each measurement holds its GPU this long, so that running two at once shows
NOTHING_KEPT = ["dataloader_num_workers", "attn_implementation", "optim"]
# The table travels to the actors by value: the nodes cannot import the tests.
ray.cloudpickle.register_pickle_by_value(table_outcomes)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _node(address: str | None, temp: Path, log: Path, extra_env: dict[str, str], port: int = 0,
          client_port: int = 0) -> subprocess.Popen:
    ports = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]
    command = [str(Path(sys.executable).parent / "ray"), "start", "--block", "--disable-usage-stats",
               "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--num-gpus", "1",
               "--resources", json.dumps({f"accelerator_type:{MODEL}": 1}), "--object-store-memory", str(100 * 2**20)]
    command += [arg for name in ports for arg in (name, str(_free_port()))]
    if address is None:
        command += ["--head", "--port", str(port), "--include-dashboard", "false", "--temp-dir", str(temp),
                    "--ray-client-server-port", str(client_port)]
    else:
        command += ["--address", address]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    # A lost node is noticed within a couple of seconds, not Ray's default of tens.
    (temp / "tmp").mkdir(parents=True, exist_ok=True)
    # TMPDIR: what the nodes' actors leave (a killed node cleans nothing) goes with the cluster's folder.
    env.update(TMPDIR=str(temp / "tmp"), RAY_health_check_period_ms="500", RAY_health_check_failure_threshold="3",
               RAY_health_check_initial_delay_ms="0", **extra_env)
    with open(log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _kill(node: subprocess.Popen) -> None:
    """The node's processes by id: its process group (raylet, agents) and every descendant (Ray's
    workers put themselves in groups of their own)."""
    try:
        family = psutil.Process(node.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(node.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for process in family:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    node.wait()


def _alive_nodes() -> int:
    return sum(1 for n in ray.nodes() if n["Alive"])


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray", numbered=True)
    temp = Path(tempfile.mkdtemp(prefix="atray-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    port, client_port = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    head = _node(None, temp, root / "head.log", {}, port, client_port)
    nodes = [head]
    try:
        deadline = time.monotonic() + 60
        while "ray start --address" not in (root / "head.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "ray start --address" in (root / "head.log").read_text(), (root / "head.log").read_text()[-2000:]
        def start_worker(log: Path) -> subprocess.Popen:
            worker = _node(address, temp, log, {DOOMED: "1"})
            nodes.append(worker)
            ray.init(address=address, log_to_driver=False)
            deadline = time.monotonic() + 60
            while _alive_nodes() < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _alive_nodes() == 2, log.read_text()[-2000:]
            ray.shutdown()
            return worker

        logs = (root / f"worker-{n}.log" for n in itertools.count())
        state = {"address": address, "client": f"ray://127.0.0.1:{client_port}", "root": root}
        state["worker"] = start_worker(next(logs))
        state["revive"] = lambda: state.update(worker=start_worker(next(logs)))
        yield state
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for node in reversed(nodes):
            _kill(node)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def cluster(ray_cluster):
    """The module's cluster with both nodes up: in random order, the test that kills the worker node may
    have run before this one, and then a worker joins again (as at the start) before the test goes on."""
    if ray_cluster["worker"].poll() is not None:
        ray_cluster["revive"]()
    return ray_cluster


def _tune(root: Path, run: str, executor, monkeypatch, **keys: Any):
    (root / "kb").mkdir(parents=True)
    monkeypatch.setenv("AUTOTUNE_KB", str(root / "kb"))  # each tune from the shipped priors alone
    tuner = Tuner(tiny_job(run=run, **keys), executor, root)
    begun = time.monotonic()
    original = tuner.begin

    def timed_begin():
        phases = original()
        tuner.loop_started = time.monotonic()
        return phases

    tuner.begin = timed_begin
    try:
        outcome = tuner.run()
    finally:
        close = getattr(executor, "close", None)
        if close:
            close()
    return tuner, outcome, time.monotonic() - begun, time.monotonic() - tuner.loop_started


def facts(records):
    """What each single change tried and how it ended, in order. Combinations are left out: one is ranked
    on its parts' measured ratios, and a parallel tune measures a part against the incumbent runs there
    are when it ends, so near-equal combinations may swap places or give way to another."""
    return [(r["trial"], r["change"], r["knobs"], r["state"], r["decision"]) for r in records
            if "+" not in (r["change"] or "")]


def test_a_smoke_tune_two_trials_at_a_time_records_what_the_serial_one_does(cluster, tmp_path, monkeypatch):
    start = tiny_job().start.to_dict()
    # The serial tune is the reference for the records only: its table answers at once (the sleep is what
    # lets two trials at a time overlap, and a serial tune has nothing to overlap).
    _, serial, _, _ = _tune(tmp_path / "serial", "s", Table(start), monkeypatch)
    executor = RayExecutor(cluster["address"], make_inner=functools.partial(Table, start, SLEEP_S))
    tuner, parallel, _, _ = _tune(tmp_path / "ray", "p", executor, monkeypatch)
    assert parallel.best.knobs == serial.best.knobs and serial.best.knobs.padding == "padding_free"
    assert facts(parallel.records) == facts(serial.records)
    # Every trial is on the record once, in order, and each names its node and GPU.
    records = RunFolder(tmp_path / "ray", "p").read_experiments()
    assert [r["trial"] for r in records] == list(range(len(parallel.records)))
    assert all(r["placement"]["model"] == MODEL for r in records)
    assert len({r["placement"]["node_id"] for r in records}) == 2  # both nodes ran trials
    assert parallel.parallel["slots"] == 2 and parallel.parallel["saved_s"] > 0
    write_report(tuner.folder, tuner.job, parallel, write_best_config(tuner.folder, tuner.job, parallel.best.knobs))
    report = tuner.folder.report.read_text()
    assert "2 GPUs of model FAKE" in report and "| where |" in report


def test_the_package_reaches_the_nodes_through_the_runtime_environment(cluster):
    # Through Ray Client (host=ray://HEAD:PORT), the way in from outside the cluster's network.
    executor = RayExecutor(cluster["client"], make_inner=functools.partial(Table, {}, 0.0))
    try:
        executor.connect(MODEL.lower())  # gpu= names the model, case aside
        assert len(executor.slots()) == 2
        # Each node holds the package unpacked from the runtime environment's upload (here this checkout
        # is on the same disk as well, and the driver's folder comes first on the workers' path).
        assert all(slot.where["shipped"] for slot in executor.slots()), [s.where for s in executor.slots()]
    finally:
        executor.close()


def test_the_real_runner_runs_on_the_nodes_with_the_frame_inputs_shipped(cluster, tmp_path):
    """The built-in runner in a child process on each node: the frame writes the rows on one node, they
    come back to this machine, and a trial on the other node reads them from there."""
    executor = RayExecutor(cluster["address"])
    try:
        frame = executor.run(make_spec(tmp_path, "frame"), tmp_path / "trials" / "frame", 300)
        assert frame["state"] == "complete", frame.get("stderr_tail") or frame["reason"]
        assert (tmp_path / "rows.json").is_file() and (tmp_path / "model_config.json").is_file()
        home, other = executor.slots()
        trial = other.run(make_spec(tmp_path, "trial"), tmp_path / "trials" / "001-001", 300)
        assert trial["state"] == "complete", trial.get("stderr_tail") or trial["reason"]
        assert trial["measurement"]["samples_per_s"] > 0 and (tmp_path / "trials" / "001-001" / "result.json").is_file()
        assert frame["placement"]["node_id"] != trial["placement"]["node_id"]
    finally:
        executor.close()


def test_host_ray_takes_the_address_from_RAY_ADDRESS(cluster, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(JobError, match="RAY_ADDRESS is not set"):
        get_executor("ray")
    monkeypatch.setenv("RAY_ADDRESS", cluster["address"])
    executor = get_executor("ray")
    assert isinstance(executor, RayExecutor) and executor.address == cluster["address"]
    assert get_executor("ray://10.0.0.9:10001").address == "ray://10.0.0.9:10001"
    assert tiny_job(host="ray").host == "ray" and tiny_job(host="ray://10.0.0.9:10001").host.startswith("ray://")
    with pytest.raises(JobError, match="host='ray://head'"):
        tiny_job(host="ray://head")
    with pytest.raises(AutotuneError, match="nothing answers at 127.0.0.1:1"):
        RayExecutor("127.0.0.1:1").connect()  # in seconds, where Ray would retry for minutes


def _until_dead(actor, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.where.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.2)
    raise AssertionError(f"the actor was still answering {within_s:.0f} s after ray.kill")


def test_a_slot_lost_on_a_live_node_is_replaced_once_its_gpu_is_free(cluster, tmp_path):
    # A slot stopped after a hang (or its actor killed) frees its GPU: the tune gets a new slot there.
    executor = RayExecutor(cluster["address"], make_inner=functools.partial(Table, tiny_job().start.to_dict(), 0.0))
    try:
        executor.connect(MODEL)
        home, lost = executor.slots()
        ray.kill(lost.actor)
        _until_dead(lost.actor)  # ray.kill returns before the actor is gone: a run sent at once may still complete
        result = lost.run(make_spec(tmp_path), tmp_path / "001-001", 30)
        assert result["state"] == "crash" and not lost.alive
        deadline = time.monotonic() + 60
        while len(executor.slots()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert executor.slots()[0] is home and len(executor.slots()) == 2
        new = executor.slots()[1]
        assert new.where["node"] == lost.where["node"] and new is not lost
        # The killed actor ran no cleanup; the new slot on that node removed its folder.
        assert not Path(lost.where["folder"]).exists() and Path(home.where["folder"]).exists()
        assert new.run(make_spec(tmp_path), tmp_path / "001-002", 30)["state"] == "complete"
    finally:
        executor.close()


def test_a_slot_removes_the_folders_of_slots_that_are_gone(tmp_path):
    import fcntl

    from autotune.executors.ray_slots import LOCK, slot_folder

    gone = tmp_path / "base" / "slot-gone"
    (gone / "run").mkdir(parents=True)
    (gone / LOCK).touch()  # its slot died: nothing holds the lock
    live, lock = slot_folder(tmp_path / "base")
    making = tmp_path / "base" / "slot-new"  # a slot between making its folder and taking its lock
    making.mkdir()
    mine, own = slot_folder(tmp_path / "base")
    assert not gone.exists() and live.is_dir() and making.is_dir() and mine.is_dir() and mine != live
    with open(live / LOCK) as held, pytest.raises(BlockingIOError):
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by its slot for as long as the slot lives
    os.close(lock)
    slot_folder(tmp_path / "base")
    assert not live.exists() and mine.is_dir()
    assert (tmp_path / "base").stat().st_mode & 0o777 == 0o700
    # A base that is not this user's own folder (here a link) is never swept: a plain temporary folder.
    (tmp_path / "link").symlink_to(tmp_path / "base")
    elsewhere, other = slot_folder(tmp_path / "link")
    assert elsewhere.parent == Path(tempfile.gettempdir()) and mine.is_dir()
    for descriptor in (own, other):
        os.close(descriptor)
    shutil.rmtree(elsewhere)


def test_a_node_killed_mid_trial_is_a_crash_and_the_tune_finishes(cluster, tmp_path, monkeypatch):
    """Last in this module: the worker node does not come back."""
    start = tiny_job().start.to_dict()
    marker = tmp_path / "doomed"
    executor = RayExecutor(cluster["address"], make_inner=functools.partial(Table, start, 0.05, str(marker)))

    def kill_when_doomed():
        deadline = time.monotonic() + 90
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        _kill(cluster["worker"])

    killer = threading.Thread(target=kill_when_doomed, daemon=True)
    killer.start()
    # Nothing is kept here, so the speculative trial on the doomed node is committed as it ran.
    _, outcome, _, _ = _tune(tmp_path / "lost", "c", executor, monkeypatch, only=NOTHING_KEPT)
    killer.join(timeout=5)
    crashed = [r for r in outcome.records if r["state"] == "crash"]
    assert len(crashed) == 1 and "lost mid-trial" in crashed[0]["reason"], [r["reason"] for r in outcome.records]
    assert [r["trial"] for r in outcome.records] == list(range(len(outcome.records))) and len(outcome.records) > 3
    # The search ran to its own end (nothing left, or nothing left worth a trial), not to a budget or a fault.
    assert outcome.parallel["slots_left"] == 1
    assert (outcome.stop_reason == "every applicable change was tried"
            or outcome.stop_reason.startswith("the best proposal left")), outcome.stop_reason
