"""Trials on a Ray cluster, one GPU each: the only module that imports ray.

The tuner (decisions, records, beliefs) stays on the driver. Each GPU of the job's model that is free
in the cluster gets one slot: a Ray actor holding that GPU (`num_gpus=1`) and placed only on nodes that
carry Ray's `accelerator_type:<MODEL>` label. A slot runs trials one at a time in a fresh child process
with the local executor, so every run of a trial sent to one slot (screen, candidate and incumbent
repeats) lands on the same device: two cards of one model differ by several percent, so a comparison
made across cards would measure the cards. The autotune package reaches the nodes through Ray's
runtime environment (`py_modules`); the spec and the files it names (rows, model config) go with each
call, and the run's outputs come back into the driver's trial folder.

A node lost mid-trial (its raylet or machine gone) ends that run as a `crash`; the slot is dropped and
the tune goes on with the others. A lost slot is replaced, while the tune runs, on a GPU of the model
that is free again (the slot's own after a hang, or a node that joins or comes back). What needs no
ray (the cluster's GPU models, a slot's folder on its node, the archives inputs travel in) is in
ray_slots.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, TypedDict

import ray
import ray.exceptions

from ..config.types import JsonObject
from ..util.errors import AutotuneError
from ..config.messages import read_result, write_spec
from .local import LocalExecutor
from .ray_slots import LABEL, cluster_models, pack, pack_paths, pick_model, slot_folder, unpack

CONNECT_TIMEOUT_S = 10.0
# Runtime-environment setup on a fresh node (unpacking the package) happens when a slot starts.
SLOT_START_TIMEOUT_S = 120.0
# A slot's child process has its own timeout; this is the driver's margin for a slot that hangs.
GRACE_S = 60.0
# The run's shared inputs, as the spec names them on the driver -> their name in a slot's run folder.
# The frame writes them (rows, model config, a VLM's image cache); every trial reads them.
INPUTS = {"rows_path": "rows.json", "model_config_path": "model_config.json"}
IMAGES = ".images"
OUTPUT_FILES = ("stdout.txt", "stderr.txt", "result.json")
OUTPUT_LIMIT = 1 << 20
# How often the driver looks for GPUs of the model that have no slot (a GCS query each time).
REPLENISH_EVERY_S = 2.0
MAX_START_FAILURES = 3
# Ray's errors that mean the slot's process or node went away, not that the trial failed on its own.
LOST = (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
        ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError, ray.exceptions.LocalRayletDiedError)


class SlotWhere(TypedDict):
    """Where a slot runs, as its actor reports it: the Ray node's id, host name and address, the GPU
    Ray gave it, the autotune package it imports, its own folder, and the runtime-environment copies
    of the package on its path (Ray shipped it). A dict: the parallel loop reads a slot's `where` by key,
    and a test's fake slot gives the same keys."""

    node: str
    host: str
    ip: str
    gpu: str
    package: str
    folder: str
    shipped: list[str]


class _TrialSlot:
    """On a node: one GPU, trials one after another in fresh child processes."""

    def __init__(self, make_inner: Callable[[], Any]) -> None:
        self.inner = make_inner()
        self.root, self.lock = slot_folder(Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}")
        self.run_dir = self.root / "run"
        self.bundle = ""  # the digest of the inputs unpacked in run_dir

    def where(self) -> SlotWhere:
        context = ray.get_runtime_context()
        return SlotWhere(node=context.get_node_id(), host=socket.gethostname(), ip=ray.util.get_node_ip_address(),
                         gpu=",".join(context.get_accelerator_ids().get("GPU", [])),
                         package=str(Path(__file__).resolve().parents[1]), folder=str(self.root),
                         shipped=[p for p in sys.path if "runtime_resources" in p
                                  and (Path(p) / "autotune" / "loop" / "tuner.py").is_file()])

    def run(self, spec: JsonObject, bundle: tuple[str, list[Any]] | None, name: str,
            timeout_s: float) -> tuple[JsonObject, dict[str, str], bytes | None]:
        if bundle is not None and bundle[0] != self.bundle:
            # Fetched from the object store only when this node does not hold these inputs yet.
            shutil.rmtree(self.run_dir, ignore_errors=True)
            unpack(ray.get(bundle[1][0]), self.run_dir)
            self.bundle = bundle[0]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        spec = {**spec, **{key: str(self.run_dir / local) for key, local in INPUTS.items() if key in spec}}
        trial_dir = self.root / "trials" / name
        try:
            result = self.inner.run(spec, trial_dir, timeout_s)
            files = {}
            for file in OUTPUT_FILES:
                path = trial_dir / file
                if path.is_file():
                    files[file] = path.read_text(errors="replace")[-OUTPUT_LIMIT:]
            # The frame wrote the inputs here: they go back to the driver, which ships them to every slot.
            written = pack(self.run_dir) if spec["kind"] == "frame" and result.get("state") == "complete" else None
            return result, files, written
        finally:
            shutil.rmtree(trial_dir, ignore_errors=True)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        os.close(self.lock)


class Slot:
    """The driver's handle on one GPU of the cluster; `run` has the executor's contract."""

    def __init__(self, owner: "RayExecutor", actor: Any, where: SlotWhere) -> None:
        self.owner, self.actor, self.where = owner, actor, where
        self.alive = True

    @property
    def placement(self) -> dict[str, str]:
        """The card a result ran on, as records keep it (Measurement.placement)."""
        return {"node": self.where["ip"], "host": self.where["host"], "gpu": self.where["gpu"],
                "model": self.owner.model, "node_id": self.where["node"][:12]}

    def label(self) -> str:
        return f"{self.where['ip']} GPU {self.where['gpu'] or '?'}"

    def run(self, spec: JsonObject, trial_dir: Path, timeout_s: float) -> JsonObject:
        trial_dir.mkdir(parents=True, exist_ok=True)
        refused = write_spec(trial_dir / "spec.json", spec)
        if refused is not None:
            return {**refused, "placement": self.placement}
        started = time.monotonic()
        if not self.alive:
            return self._lost("it was lost earlier", started)
        call = self.actor.run.remote(spec, self.owner.bundle(spec), trial_dir.name, timeout_s)
        try:
            result, files, written = ray.get(call, timeout=timeout_s + GRACE_S)
        except ray.exceptions.GetTimeoutError:
            # The child's own timeout did not end it: the slot hangs. It is not trusted with another trial.
            self.alive = False
            ray.kill(self.actor)
            return {"state": "timeout", "reason": f"no answer from {self.label()} after {timeout_s + GRACE_S:.0f}s; "
                    "the slot was stopped", "wall_s": round(time.monotonic() - started, 3), "exit_code": None,
                    "placement": self.placement}
        except LOST as error:
            self.alive = False
            ray.kill(self.actor)  # some of these leave the actor alive, holding its GPU and its trial
            return self._lost(f"it was lost mid-trial ({type(error).__name__}: {_first_line(error)})", started)
        except ray.exceptions.RayTaskError as error:
            return {"state": "crash", "reason": f"the slot on {self.label()} failed: {_first_line(error)}",
                    "wall_s": round(time.monotonic() - started, 3), "exit_code": None, "placement": self.placement}
        for file, text in files.items():
            (trial_dir / file).write_text(text)
        if written is not None:
            self.owner.received(spec, written)
        return {**read_result(result, f"{self.label()}: {trial_dir.name}/result.json"), "placement": self.placement}

    def _lost(self, why: str, started: float) -> JsonObject:
        return {"state": "crash", "reason": f"node {self.where['ip']} (GPU {self.where['gpu'] or '?'}): {why}",
                "wall_s": round(time.monotonic() - started, 3), "exit_code": None, "placement": self.placement}


def _reachable(address: str) -> None:
    """Fail in seconds on an address nothing answers at: Ray itself retries for minutes."""
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise AutotuneError(f"host=ray: {address!r} is not HEAD:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise AutotuneError(f"host=ray: nothing answers at {where} ({error.strerror or error}); is the cluster "
                            "up (ray status on its head)?") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


class RayExecutor:
    """Trials on the GPUs of one model in a Ray cluster. `run` uses one home slot (the frame and the
    baseline measure one device); `slots()` lists every live slot for the parallel loop."""

    def __init__(self, address: str, make_inner: Callable[[], Any] = LocalExecutor,
                 start_timeout_s: float = SLOT_START_TIMEOUT_S) -> None:
        self.address, self.make_inner, self.start_timeout_s = address, make_inner, start_timeout_s
        self.model = ""
        self._slots: list[Slot] = []
        self._inputs: dict[tuple, tuple[str, list[Any]]] = {}
        self._connected = False
        self._remote: Any = None
        self._pending: list[tuple[Any, Any]] = []  # (actor, its `where` call): slots waiting for a GPU
        self._looked = 0.0
        self._began_with = 0
        self._failed_starts = 0

    # -- the cluster ---------------------------------------------------------------------------
    def connect(self, gpu: str = "") -> None:
        """Join the cluster, ship the package, and start one slot per free GPU of the job's model."""
        if self._connected:
            return
        package = str(Path(__file__).resolve().parents[1])
        _reachable(self.address)
        try:
            ray.init(address=self.address, runtime_env={"py_modules": [package]}, namespace="autotune",
                     log_to_driver=False, logging_level="warning")
        except (ConnectionError, ray.exceptions.RayError, RuntimeError, ValueError) as error:
            raise AutotuneError(f"host=ray: cannot join the Ray cluster at {self.address}: {_first_line(error)}") from None
        self._connected = True
        models = cluster_models(ray.nodes())
        self.model = pick_model(models, gpu, self.address)
        self._remote = ray.remote(_TrialSlot).options(num_gpus=1, resources={LABEL + self.model: 0.001},
                                                      max_restarts=0, max_task_retries=0)
        actors = [self._remote.remote(self.make_inner) for _ in range(int(models[self.model]))]
        calls = [actor.where.remote() for actor in actors]
        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=self.start_timeout_s)
        for actor, call in zip(actors, calls):
            # GPUs that other work holds leave their slot unscheduled: those slots are not waited for.
            if call in ready:
                try:
                    self._slots.append(Slot(self, actor, ray.get(call)))
                    continue
                except ray.exceptions.RayError:
                    pass
            ray.kill(actor)
        if not self._slots:
            raise AutotuneError(f"host=ray: no GPU of model {self.model} became free in the cluster at "
                                f"{self.address} within {self.start_timeout_s:.0f}s")
        self._began_with = len(self._slots)
        # A stable order, so the same cluster gives the same home slot.
        self._slots.sort(key=lambda s: (s.where["ip"], s.where["node"], s.where["gpu"]))

    def slots(self) -> list[Slot]:
        self._replenish()
        return [slot for slot in self._slots if slot.alive]

    def _replenish(self) -> None:
        """A new slot for each lost one, on a GPU of the model that is free again, without waiting: a slot
        asked for is adopted once Ray has placed it, on a later look. Never more slots than the tune
        began with (GPUs that other work held then stay its own, and no standing demand reaches an
        autoscaler); requests past what the cluster now has are withdrawn; a slot that keeps failing to
        start is not asked for again. New slots go last, so the home slot stays the home slot."""
        if not self._connected or time.monotonic() - self._looked < REPLENISH_EVERY_S:
            return
        self._looked = time.monotonic()
        if self._pending:
            calls = [call for _, call in self._pending]
            ready, _ = ray.wait(calls, num_returns=len(calls), timeout=0)
            for actor, call in [entry for entry in self._pending if entry[1] in ready]:
                self._pending.remove((actor, call))
                try:
                    self._slots.append(Slot(self, actor, ray.get(call)))
                except ray.exceptions.RayError:
                    self._failed_starts += 1
                    ray.kill(actor)
        try:
            gpus = int(cluster_models(ray.nodes()).get(self.model, 0))
        except ray.exceptions.RayError:
            return
        live = sum(1 for slot in self._slots if slot.alive)
        wanted = 0 if self._failed_starts >= MAX_START_FAILURES else max(0, min(self._began_with, gpus) - live)
        while len(self._pending) > wanted:
            ray.kill(self._pending.pop()[0])
        for _ in range(wanted - len(self._pending)):
            actor = self._remote.remote(self.make_inner)
            self._pending.append((actor, actor.where.remote()))

    def _local(self, spec: JsonObject) -> dict[str, Path]:
        """Name in a slot's run folder -> the driver's path, for the inputs this spec names."""
        paths = {local: Path(str(spec[key])) for key, local in INPUTS.items() if spec.get(key)}
        if "rows.json" in paths:
            paths["rows.json" + IMAGES] = Path(str(paths["rows.json"]) + IMAGES)
        return paths

    def bundle(self, spec: JsonObject) -> tuple[str, list[Any]] | None:
        """The spec's inputs as one archive, put in Ray's object store once per content (the ref in a
        list, so that a slot fetches it only when it lacks that content)."""
        paths = {name: path for name, path in self._local(spec).items() if path.exists()}
        if not paths:
            return None
        stamp = tuple((name, str(path), path.stat().st_mtime_ns) for name, path in sorted(paths.items()))
        if stamp not in self._inputs:
            data = pack_paths(paths)
            self._inputs[stamp] = (hashlib.sha256(data).hexdigest()[:20], [ray.put(data)])
        return self._inputs[stamp]

    def received(self, spec: JsonObject, data: bytes) -> None:
        """The inputs a frame wrote on its node, written where the driver's spec names them."""
        with tempfile.TemporaryDirectory() as folder:
            unpack(data, Path(folder))
            for name, path in self._local(spec).items():
                source = Path(folder) / name
                if source.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                    shutil.copytree(source, path)
                elif source.is_file():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, path)

    # -- the executor contract ----------------------------------------------------------------
    def run(self, spec: JsonObject, trial_dir: Path, timeout_s: float) -> JsonObject:
        if spec.get("runner") == "script":
            raise AutotuneError("host=ray runs the built-in runners; a script= job runs with host=local or "
                                "host=user@host")
        self.connect(spec["job"].get("gpu", ""))
        live = self.slots()
        if not live:
            trial_dir.mkdir(parents=True, exist_ok=True)
            return {"state": "crash", "reason": f"no GPU of model {self.model} is left in the cluster",
                    "wall_s": 0.0, "exit_code": None}
        return live[0].run(spec, trial_dir, timeout_s)

    def close(self) -> None:
        if self._connected:
            live = [slot for slot in self._slots if slot.alive]
            try:
                # The nodes' copies of the inputs go; a slot busy with an abandoned speculation is not waited for.
                ray.get([slot.actor.cleanup.remote() for slot in live], timeout=10)
            except ray.exceptions.RayError:
                pass
            for actor in [slot.actor for slot in self._slots] + [actor for actor, _ in self._pending]:
                ray.kill(actor)
            self._slots, self._pending = [], []
            ray.shutdown()
            self._connected = False

