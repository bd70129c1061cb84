"""A fresh child process on this machine per trial, in its own session so a timeout kills its workers.

Children are forked from a fork server that has imported torch, and for a Hugging Face or script job
transformers, trl and datasets (never CUDA: the import does not initialise it), so each trial is a new
process without ~5 s of imports. `fork=False`
starts each trial as `python -m <its runner module>` instead (another interpreter, or debugging).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from ..config.types import JsonObject
from ..config.messages import read_result, write_spec
from ..engine import runner_module
from ..engine.common import OWNER_ENV, STDERR_TAIL, run_forked
from ..util import procs
from .tmpdirs import CACHE_FOLDERS, FORKSERVER_HOME_ENV, TMP_PATH_MAX, placed_by_user, short_base, tmp_env

# forkserver_home first: the server takes its own folder back when it ends, even after its tuner was killed.
PRELOAD = ["autotune.executors.forkserver_home",
           "torch", "transformers", "transformers.modeling_utils", "autotune.workloads.hf.runner",
           "autotune.workloads.mlp.runner", "autotune.engine.train", "autotune.workloads.hf.models",
           # Text trials train inside trl.SFTTrainer: trl, datasets and the trainer's modules load once here.
           "trl", "datasets", "autotune.workloads.hf.sft", "autotune.engine.instruments"]
# A plain PyTorch job's trials need none of transformers, trl and datasets: importing them would hold its
# first trial back (4 s on a quiet 2-core box, about 8 under load). A script may import them: it gets them all.
# torch._dynamo (and the sympy it loads) is imported lazily by the first optimizer step: 1.1 s a trial
# when the server has not (transformers imports it for the others).
PRELOAD_BY_RUNNER = {"mlp": ["autotune.executors.forkserver_home", "torch", "torch._dynamo", "autotune.engine.train",
                             "autotune.engine.steps", "autotune.probes.device", "autotune.workloads.mlp.runner"]}
_preloaded: list[str] = []   # what the fork server imports (empty: not started by this process yet)
_tags = itertools.count(1)
_live: set[int] = set()   # trials running now, in any executor of this process: never ended as orphans


def _context(runner: str):
    """The fork server, with the preload of the runners it has served (PRELOAD_BY_RUNNER). A process
    that tuned a plain PyTorch job and now tunes a Hugging Face one (a notebook, a test worker) has a
    server without transformers: it is started again with both sets, once no trial of it is running;
    until then each child imports what the server lacks, itself."""
    from multiprocessing import forkserver

    global _preloaded
    context = multiprocessing.get_context("forkserver")  # one per process, whoever asks
    wanted = preload_for(runner)
    if _preloaded and (set(wanted) <= set(_preloaded) or _live):
        return context
    if _preloaded:
        forkserver._forkserver._stop()  # type: ignore[attr-defined]
    _preloaded = list(dict.fromkeys(_preloaded + wanted))  # forkserver_home stays first
    context.set_forkserver_preload(_preloaded)
    _start_fork_server()
    return context


def preload_for(runner: str) -> list[str]:
    """The modules the fork server imports before its first fork, for trials of `runner`."""
    return list(PRELOAD_BY_RUNNER.get(runner, PRELOAD))


def _start_fork_server() -> None:
    """The fork server, started with its torch caches in a folder of its own, removed when this process
    exits: importing trl makes torch's inductor cache folder, which would be left in the user's $TMPDIR."""
    import atexit
    import tempfile
    from multiprocessing import forkserver

    own = tempfile.mkdtemp(prefix="autotune-forkserver-")
    atexit.register(shutil.rmtree, own, True)
    _short_socket_folder()
    saved = {name: os.environ.get(name) for name, _ in CACHE_FOLDERS}
    for name in saved:
        if not placed_by_user(name, os.environ):
            os.environ[name] = os.path.join(own, name.lower())
    saved[FORKSERVER_HOME_ENV] = os.environ.get(FORKSERVER_HOME_ENV)
    os.environ[FORKSERVER_HOME_ENV] = own
    try:
        forkserver.ensure_running()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _short_socket_folder() -> None:
    """multiprocessing puts the fork server's socket in its own folder under $TMPDIR; a $TMPDIR too deep
    for AF_UNIX (a scheduler's per-job scratch path) fails there. Then that folder is made, once for this
    process, in a short private one, removed at exit."""
    import tempfile
    from multiprocessing import util

    if len(tempfile.gettempdir()) <= TMP_PATH_MAX:
        return
    short = tempfile.mkdtemp(prefix=f"autotune-{os.getuid()}-", dir=short_base())
    # After multiprocessing's own removal of its folder inside (a finalizer of priority -100).
    util.Finalize(None, shutil.rmtree, args=(short, True), exitpriority=-101)
    saved, tempfile.tempdir = tempfile.tempdir, short
    try:
        util.get_temp_dir()   # made now, under `short`, and kept by multiprocessing for this process
    finally:
        tempfile.tempdir = saved


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-STDERR_TAIL:]
    except OSError:
        return ""


# A socket's path has at most 107 bytes (AF_UNIX); multiprocessing and torch put theirs under TMPDIR with
# ~40 bytes of their own, so a trial folder deeper than this gets a short temporary folder instead.
def trial_tmp(trial_dir: Path, tag: str) -> Path:
    """The trial's temporary folder: `trials/N/tmp`, or where that path is too long for the sockets made
    in it, a private folder named by the trial's tag under /tmp; either is removed when the trial ends."""
    inside = trial_dir.resolve() / "tmp"
    if len(str(inside)) <= TMP_PATH_MAX:
        return inside
    return short_base() / procs.short_tmp_name(tag)


class LocalExecutor:
    def __init__(self, python: str = sys.executable, extra_env: dict[str, str] | None = None,
                 fork: bool = True) -> None:
        self.python = python
        self.extra_env = extra_env or {}
        self.fork = fork and python == sys.executable

    def _env(self, spec: JsonObject, trial_dir: Path, tag: str) -> dict[str, str]:
        # Temporary files (tempfile, multiprocessing's pymp-*, torch.compile's caches) go in the trial's
        # folder, removed when it ends; the tag finds every process it started (util/procs.py).
        tmp = trial_tmp(trial_dir, tag)
        env = {**self.extra_env, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
               OWNER_ENV: str(os.getpid()),  # the trial ends itself if this process dies first
               procs.TAG_ENV: tag, **tmp_env(tmp, os.environ)}
        job = spec["job"]
        if isinstance(job, Mapping) and job.get("smoke"):
            env["CUDA_VISIBLE_DEVICES"] = ""  # smoke is a CPU dry run, whatever the machine has
        return env

    def _start(self, spec: JsonObject, trial_dir: Path, tag: str) -> Any:
        runner, env = str(spec.get("runner", "hf")), self._env(spec, trial_dir.resolve(), tag)
        paths = [str(trial_dir / name) for name in ("spec.json", "result.json", "stdout.txt", "stderr.txt")]
        if self.fork:
            child = _context(runner).Process(target=run_forked, args=(runner, *paths, env), daemon=False)
            child.start()
            return child
        with open(paths[2], "w") as out, open(paths[3], "w") as err:
            return subprocess.Popen([self.python, "-m", runner_module(runner), *paths[:2]], stdout=out,
                                    stderr=err, env={**os.environ, **env}, start_new_session=True)

    @staticmethod
    def _wait(child: Any, timeout_s: float, tag: str, since: int) -> int | None:
        """The exit code, or None after killing the child's whole session (and all it started) at the timeout."""
        if isinstance(child, subprocess.Popen):
            try:
                return child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        else:
            child.join(timeout_s)
            if child.exitcode is not None:
                return child.exitcode
        # Before the trial is waited for: its descendants are found from it, its pid still names its group.
        procs.end_trial(tag, child.pid, since, procs.helpers() | _live)
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            # Forked but not yet in its own session (setsid comes first thing in the child).
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        child.wait() if isinstance(child, subprocess.Popen) else child.join()
        return None

    def run(self, spec: JsonObject, trial_dir: Path, timeout_s: float) -> JsonObject:
        trial_dir.mkdir(parents=True, exist_ok=True)
        spec_path, result_path = trial_dir / "spec.json", trial_dir / "result.json"
        result_path.unlink(missing_ok=True)
        refused = write_spec(spec_path, spec)
        if refused is not None:
            return refused
        started = time.monotonic()
        tag, since = f"{os.getpid()}.{next(_tags)}", procs.now_ticks()
        tmp = trial_tmp(trial_dir, tag)
        tmp.mkdir(mode=0o700, exist_ok=True)
        child = None
        try:
            # Inside the try: the first start waits seconds for the fork server's imports, and a Ctrl-C or
            # SIGTERM then must still take the temporary folder back (a short one lies outside the run).
            child = self._start(spec, trial_dir, tag)
            _live.add(child.pid)
            try:
                code = self._wait(child, timeout_s, tag, since)
            except BaseException:
                # Ctrl-C or SIGTERM in the tuner: the trial runs in its own session and would not hear it,
                # so it is killed here rather than left holding the device.
                self._wait(child, 0, tag, since)
                raise
        finally:
            if child is not None:
                _live.discard(child.pid)
            # Whatever the trial left running (a daemon its script started, or a child whose start was
            # interrupted) ends with it, found by its tag, and its temporary files go.
            procs.end_trial(tag, None, since, procs.helpers() | _live)
            shutil.rmtree(tmp, ignore_errors=True)
        wall = round(time.monotonic() - started, 3)
        if code is None:
            return {"state": "timeout", "reason": f"no result after {timeout_s:.0f}s; the trial was stopped",
                    "wall_s": wall, "exit_code": None}
        if result_path.exists():
            result = read_result(result_path.read_bytes(), str(result_path))
            result.update(wall_s=wall, exit_code=code)
            if result["state"] == "crash":
                result["stderr_tail"] = _tail(trial_dir / "stderr.txt")
            return result
        tail = _tail(trial_dir / "stderr.txt")
        if code == -signal.SIGKILL:
            state, reason = "oom", "killed by SIGKILL without a result: most likely the kernel's out-of-memory killer"
        else:
            last = next((line for line in reversed(tail.splitlines()) if line.strip()), "no output")
            state, reason = "crash", f"exit code {code}: {last[:300]}"
        return {"state": state, "reason": reason, "stderr_tail": tail, "wall_s": wall, "exit_code": code}
