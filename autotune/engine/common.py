"""What every runner shares: spec in, result out, expected faults as states, a one-line summary."""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from dataclasses import FrozenInstanceError
from typing import Any, Callable, Mapping, TypeVar

from ..util import procs
from ..util.errors import RecordError
from ..util.io import write_json_atomic
from ..config.knobs import Knobs
from ..config.messages import TrialSpec, rejected
from ..schemas import violation
from . import runner_module

STDERR_TAIL = 2000
# The process whose trial this is (the tuner, or a Ray slot's actor): set by the local executor.
OWNER_ENV = "AUTOTUNE_OWNER_PID"
# The spec a runner's body reads: a TrialSpec, or the hand-over step's own (workloads/hf/realize.py).
Spec = TypeVar("Spec")
# What a body returns: its part of the result (RunResult's measurement or frame, the hand-over's files),
# each runner's own TypedDict; checked whole against run_result.json before it is written.
Reply = Mapping[str, object]


def inject_early_fault(kind: str | None) -> None:
    """Test hooks that end a trial the way real failures do (a dead process, a hang)."""
    if kind == "crash":
        print("autotune: injected crash (the process aborts)", file=sys.stderr, flush=True)
        os.abort()
    if kind == "hang":
        time.sleep(10 ** 6)


def setup_device(spec: TrialSpec) -> str:
    """The device a trial runs on (smoke: the CPU, whatever the machine has), seeded, with its threads set."""
    import torch

    from ..probes.device import pick_device

    torch.manual_seed(spec.job.seed)
    device = "cpu" if spec.job.smoke else pick_device()
    if device == "cpu":
        # One core stays free for the tuner, loader workers and the OS: OpenMP threads that must share
        # a core with anything else spin-wait and make step times swing by 10x.
        torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    return device


def as_is(item: Any) -> Any:
    """The loaders' collate function: batches are collated by the dataset (a module-level function, so it
    pickles where workers are not forked)."""
    return item


def loader_context(workers: int) -> str | None:
    """How loader workers start: forked, as a user's DataLoader does by default on Linux. The trial itself
    runs in a forkserver child, whose default would be forkserver: workers that re-import torch and
    unpickle the rows, which is neither what users run nor possible for the lazy step plan."""
    import multiprocessing

    return "fork" if workers and "fork" in multiprocessing.get_all_start_methods() else None


def loader_prefetch(knobs: Knobs) -> int | None:
    """The loader's prefetch_factor: 0 leaves it to torch (2 batches per worker), as the TRL trials'
    SFTConfig(dataloader_prefetch_factor=None) does, so one value means one thing in both loops."""
    if not knobs.dataloader_num_workers:
        return None
    return int(knobs.dataloader_prefetch_factor) or None


def run_forked(runner: str, spec_path: str, result_path: str, stdout_path: str, stderr_path: str,
               env: dict[str, str]) -> None:
    """A trial in a child forked from the executor's fork server, which imported torch and
    transformers once: a fresh process per trial without paying for those imports each time.

    Own session (so a timeout can kill its loader workers too), own environment, own log files."""
    os.setsid()
    os.environ.update(env)
    import tempfile

    tempfile.tempdir = None   # the fork server's, if it asked: this trial's TMPDIR from now on
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    module = importlib.import_module(runner_module(runner))
    sys.exit(module.entry(Path(spec_path), Path(result_path)))


def _end_session() -> None:
    # The session holds the trial and its loader workers; a process that leads none ends alone, so a
    # runner started by hand with the variable inherited cannot take its caller's group with it.
    if os.getpgrp() == os.getpid():
        if procs.TAG_ENV in os.environ:
            procs.end_descendants()   # those that left the group too (a daemon its script started)
            _drop_short_tmp()
        os.killpg(os.getpgrp(), signal.SIGKILL)
    else:
        os.kill(os.getpid(), signal.SIGKILL)


def _drop_short_tmp() -> None:
    """A short temporary folder lies outside the run folder, and the tuner that would remove it is gone:
    the trial takes it back itself. Only a folder of exactly the executor's name for this trial."""
    import shutil

    tmp = os.environ.get("TMPDIR", "")
    if os.path.basename(tmp) == procs.short_tmp_name(os.environ[procs.TAG_ENV]):
        shutil.rmtree(tmp, ignore_errors=True)


def die_with_owner() -> None:
    """End this trial, loader workers and all, when the process that started it is gone (a killed
    tuner, a Ray actor killed with its node still up): nobody would read its result, and it would hold
    the GPU that the next trial on this device needs. A trial runs in its own session, so the owner's
    death reaches it by no signal; and a forked trial's parent is the fork server, not its owner, so the
    owner names itself in the environment and is watched through a pidfd, which a pid reused later
    cannot be mistaken for (the watch begins when the runner starts, after its imports)."""
    owner = os.environ.get(OWNER_ENV)
    if not owner or not hasattr(os, "pidfd_open"):
        return
    try:
        handle = os.pidfd_open(int(owner))
    except ProcessLookupError:
        _end_session()
        return
    except (OSError, ValueError):
        return  # a kernel without pidfds (before 5.3): the executor's own timeout still ends the trial

    def watch() -> None:
        select.select([handle], [], [])  # readable once the owner has exited
        print(f"autotune: the process that started this trial ({owner}) is gone; ending it", file=sys.stderr,
              flush=True)
        _end_session()

    threading.Thread(target=watch, name="autotune-owner-watch", daemon=True).start()


def execute(body: Callable[[Spec], Reply], is_oom: Callable[[BaseException], bool], fault_type: type,
            spec_path: Path, result_path: Path,
            read: Callable[[Mapping[str, Any], str], Spec] = TrialSpec.from_dict) -> int:  # type: ignore[assignment]
    """Run `body(spec)` and always leave a result file while the process lives; the exit code.

    The spec is read typed by `read` (a TrialSpec; the hand-over step's is its runner's own) and the
    result written as a RunResult: either one malformed ends the run as `invalid` with the reason. The
    typed spec is frozen through and through: a runner that writes into it ends as a crash (a runner
    never writes into its inputs).

    A trial's process (tagged by its executor, leading its own session) is the reaper of its orphans, and
    ends every process it started once its result is written (util/procs.py)."""
    trial = procs.TAG_ENV in os.environ and os.getsid(0) == os.getpid()
    if trial:
        procs.become_subreaper()
    die_with_owner()
    started = time.time()
    result: dict[str, object]   # a RunResult's JSON, checked against run_result.json before it is written
    try:
        spec = read(json.loads(Path(spec_path).read_text()), str(spec_path))
    except (ValueError, RecordError) as error:
        result = {"state": "invalid", "reason": f"{error}"[:600]}
    else:
        result = _run(body, is_oom, fault_type, spec)
    result.update(schema_version=1, wall_s=round(time.time() - started, 3))
    problem = violation("run_result", result)
    if problem is not None:
        result = {**rejected(result, f"the runner's result is {problem}"), "schema_version": 1,
                  "wall_s": result["wall_s"]}
    write_json_atomic(result_path, result)
    if trial:
        procs.end_descendants()
    measurement = result.get("measurement") or {}
    summary = (f"samples/s={measurement['samples_per_s']:.3f}" if isinstance(measurement, dict)
               and "samples_per_s" in measurement else result["reason"])
    print(f"autotune runner: {result['state']} {summary}", flush=True)
    return 0 if result["state"] == "complete" else 1


def _run(body: Callable[[Spec], Reply], is_oom: Callable[[BaseException], bool], fault_type: type,
         spec: Spec) -> dict[str, object]:
    """`body(spec)` as a result: expected faults and every exception become states."""
    try:
        return {"state": "complete", "reason": "", **body(spec)}
    except fault_type as fault:
        return {"state": fault.state, "reason": fault.reason, **getattr(fault, "details", {})}
    except FrozenInstanceError as error:
        return {"state": "crash", "reason": f"the runner wrote into its spec ({error}): a runner's inputs are "
                "read-only; derive what it needs into its own values"}
    except Exception as error:  # noqa: BLE001 - every failure becomes a recorded state
        if is_oom(error):
            return {"state": "oom", "reason": f"out of memory: {str(error).splitlines()[0][:300]}"}
        tail = traceback.format_exc()[-STDERR_TAIL:]
        return {"state": "crash", "reason": f"{error.__class__.__name__}: {error}"[:500], "traceback": tail}


def is_oom(error: BaseException) -> bool:
    """An out-of-memory error of torch or of the host, which a trial ends as the state `oom`."""
    import torch

    if isinstance(error, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(error).lower()
    return isinstance(error, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text or isinstance(error, MemoryError))


def run_body(frame: Callable[[TrialSpec], Reply], trial: Callable[[TrialSpec], Reply],
             spec_path: Path, result_path: Path) -> int:
    """A training runner's entry: its frame or trial by the spec's kind, with the training faults and OOM
    as states."""
    from .steps import TrialFault

    def body(spec: TrialSpec) -> Reply:
        return frame(spec) if spec.kind == "frame" else trial(spec)

    return execute(body, is_oom, TrialFault, spec_path, result_path)
