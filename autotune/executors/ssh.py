"""Trials on a remote box over SSH: with known_hosts.py, ssh_route.py and ssh_chain.py, the only
modules that import paramiko.

The knowledge base, the decisions and the run folder stay on the user's machine; the remote box gets
the package and each trial's spec over SFTP, into `~/.autotune-remote/<run>/` (made private, with a
marker that the clean-up requires before it removes the folder), and runs the runner
detached (`setsid nohup`) under a heartbeat launcher, so a trial survives a dropped connection. The
executor polls under its own deadline: a connection that drops is re-established and the result
recovered; a heartbeat that stops makes the trial a `crash` with that reason; at the deadline the
remote process group is killed. One executor runs one trial at a time, so trials never share the GPU.

`host=` is resolved through the user's SSH config (ssh_route.py): an alias, its user, port and keys,
and ProxyJump hosts, each reached through a direct-tcpip channel of the one before (ssh_chain.py).
Every hop's host key is checked against `~/.ssh/known_hosts` (or the config's UserKnownHostsFile): an
unknown host is refused with the command that trusts it (or `ssh_trust_new=true`, which records the
key on first use). Keys come from `ssh_key=PATH`, the config's IdentityFile, else the agent and
`~/.ssh/id_*`.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import socket
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

import paramiko

from ..config.types import JsonObject
from ..util.errors import AutotuneError
from ..config.inputs import check_run_name
from ..config.messages import read_result, write_spec
from ..engine.common import STDERR_TAIL
from . import ssh_chain, ssh_route

POLL_S = 1.0
HEARTBEAT_TIMEOUT_S = 30.0
REMOTE_BASE = ".autotune-remote"
# Written into the remote run folder when this executor makes it; `close` removes only a folder holding
# this executor's own token, so it never deletes a folder that autotune did not make for this tune.
MARKER = ".made-by-autotune"
_DROPPED = (paramiko.SSHException, OSError, EOFError, socket.error)


class RemoteFacts(TypedDict, total=False):
    """What `prepare` found on the box (its probe prints this as JSON): Python, free disk in the home
    folder, and torch and transformers, or why each failed to import."""

    python: str
    free_gb: float
    home: str
    torch: str
    cuda: bool
    torch_error: str
    transformers: str
    transformers_error: str


def _package() -> bytes:
    """The autotune package as a tar.gz, without caches."""
    root = Path(__file__).resolve().parents[1]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(root, arcname="autotune", filter=lambda info: None if "__pycache__" in info.name else info)
    return buffer.getvalue()


class SSHExecutor:
    def __init__(self, host: str, run: str, key: str = "", trust_new: bool = False, python: str = "python3",
                 heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S, config: str = "") -> None:
        self.host, self.run_name = host, check_run_name(run)  # one component: the folder stays in ~/.autotune-remote
        # Resolved once, before anything connects: a config that names nothing usable is bad input (exit 2).
        self.route = ssh_route.route(host, config, key)
        self.trust_new, self.python = trust_new, python
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.client: paramiko.SSHClient | None = None
        self.jumps: list[paramiko.SSHClient] = []   # the jump hosts' connections, first hop first
        self.remote_run = ""
        self.remote_base = ""
        self.token = uuid.uuid4().hex
        self.reconnects = 0

    # -- connection -----------------------------------------------------------------------------
    def connect(self) -> paramiko.SSHClient:
        """The whole chain, from the first jump host to the target: a drop anywhere is rebuilt as a whole."""
        self._hang_up()
        *self.jumps, self.client = ssh_chain.connect(self.host, self.route, self.trust_new)
        return self.client

    def _hang_up(self) -> None:
        for client in [self.client, *reversed(self.jumps)]:
            if client is not None:
                client.close()
        self.client, self.jumps = None, []

    def _reconnect(self, deadline: float) -> None:
        while True:
            try:
                self.connect()
                self.reconnects += 1
                return
            except AutotuneError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)

    def _exec(self, command: str, timeout: float = 60) -> str:
        assert self.client is not None
        _, stdout, stderr = self.client.exec_command(command, timeout=timeout)
        code = stdout.channel.recv_exit_status()
        out = stdout.read().decode()
        if code:
            raise AutotuneError(f"host {self.host}: `{command[:80]}` failed ({code}): {stderr.read().decode()[-500:]}")
        return out

    # -- the remote box ---------------------------------------------------------------------------
    def prepare(self) -> RemoteFacts:
        """Connect, check the remote Python, torch, CUDA and disk, and send the package."""
        self.connect()
        probe = ("import json, shutil, sys, os\nfacts = {'python': sys.version.split()[0], "
                 "'free_gb': shutil.disk_usage(os.path.expanduser('~')).free / 1e9, 'home': os.path.expanduser('~')}\n"
                 "try:\n import torch\n facts.update(torch=torch.__version__, cuda=torch.cuda.is_available())\n"
                 "except Exception as e:\n facts['torch_error'] = str(e)\n"
                 "try:\n import transformers\n facts['transformers'] = transformers.__version__\n"
                 "except Exception as e:\n facts['transformers_error'] = str(e)\nprint(json.dumps(facts))")
        try:
            facts = json.loads(self._exec(f"{shlex.quote(self.python)} -c {shlex.quote(probe)}").strip().splitlines()[-1])
        except AutotuneError as error:
            raise AutotuneError(f"host {self.host}: cannot run {self.python} there ({error}); give ssh_python=PATH "
                                "of a Python 3.10+ with torch and transformers") from None
        for missing, error in (("torch", facts.get("torch_error")), ("transformers", facts.get("transformers_error"))):
            if error is not None:
                raise AutotuneError(f"host {self.host}: {self.python} cannot import {missing} "
                                    f"({error}); install it there or give ssh_python=PATH")
        if facts["free_gb"] < 1:
            raise AutotuneError(f"host {self.host}: only {facts['free_gb']:.2f} GB free in {facts['home']}; free space")
        self._make_remote_run(f"{facts['home']}/{REMOTE_BASE}")
        sftp = self.client.open_sftp()
        with sftp.open(f"{self.remote_run}/pkg/autotune.tar.gz", "wb") as handle:
            handle.write(_package())
        sftp.close()
        self._exec(f"cd {shlex.quote(self.remote_run)}/pkg && tar xzf autotune.tar.gz")
        return facts

    def _make_remote_run(self, base: str) -> None:
        """`base/RUN`, private to the user (umask 077), with this executor's marker in it. A folder of that
        name that holds no marker was not made by autotune: it is refused, and left as it is."""
        # ./RUN: a name that starts with '-' is never read as an option by mkdir or test.
        name, quoted = shlex.quote(f"./{self.run_name}"), shlex.quote(base)
        try:
            self._exec(f"umask 077 && mkdir -p {quoted} && cd {quoted} && "
                       f"if [ -e {name} ] || [ -L {name} ]; then [ -d {name} ] && [ ! -L {name} ] && "
                       f"[ -f {name}/{MARKER} ] || {{ echo 'not made by autotune' >&2; exit 3; }}; "
                       f"else mkdir {name}; fi && printf %s {self.token} > {name}/{MARKER} && mkdir -p {name}/pkg")
        except AutotuneError as error:
            if "not made by autotune" not in str(error):
                raise
            raise AutotuneError(f"host {self.host}: {base}/{self.run_name} exists and was not made by autotune; "
                                "remove it there or pick another RUN name") from None
        self.remote_base, self.remote_run = base, f"{base}/{self.run_name}"

    def close(self) -> None:
        """Remove the remote run folder (only the one this executor made, holding its marker) and hang up."""
        if self.client is not None and self.remote_run:
            # Checked on the box, where it is removed: a real folder directly in the base, with our token.
            # Not ours, or the box is gone: left as it is.
            with contextlib.suppress(*_DROPPED, AutotuneError):
                name = shlex.quote(f"./{check_run_name(self.run_name)}")
                self._exec(f"cd {shlex.quote(self.remote_base)} && [ -d {name} ] && [ ! -L {name} ] && "
                           f"[ \"$(cat {name}/{MARKER} 2>/dev/null)\" = {self.token} ] && rm -rf -- {name}")
        self._hang_up()

    # -- one trial --------------------------------------------------------------------------------
    def run(self, spec: JsonObject, trial_dir: Path, timeout_s: float) -> JsonObject:
        runner = spec.get("runner", "hf")
        if runner == "script":
            return {"state": "crash", "reason": "a user's script runs on this machine only (host=local)",
                    "wall_s": 0.0, "exit_code": None}
        if not self.remote_run:
            self.prepare()
        trial_dir.mkdir(parents=True, exist_ok=True)
        remote = f"{self.remote_run}/{trial_dir.name}"
        spec = {**spec, "rows_path": f"{self.remote_run}/rows.json",
                "model_config_path": f"{self.remote_run}/model_config.json"}
        refused = write_spec(trial_dir / "spec.json", spec)
        if refused is not None:
            return refused
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            try:
                # A fresh folder each time: files left by an earlier attempt must not pass for this one's.
                self._exec(f"rm -rf {shlex.quote(remote)} && mkdir -p {shlex.quote(remote)}")
                sftp = self.client.open_sftp()
                with sftp.open(f"{remote}/spec.json", "w") as handle:
                    handle.write(json.dumps(spec))
                sftp.close()
                break
            except _DROPPED:
                self._reconnect(deadline)
        launch = (f"cd {shlex.quote(remote)} && PYTHONPATH={shlex.quote(self.remote_run + '/pkg')} "
                  f"setsid nohup {shlex.quote(self.python)} -m autotune.executors.heartbeat {runner} spec.json result.json "
                  "heartbeat < /dev/null > launcher.log 2>&1 &")
        try:
            self._exec(launch)
        except _DROPPED:
            # Whether it started is unknown: the heartbeat says; one that never beats ends as a crash.
            self._reconnect(deadline)
        try:
            return self._wait(remote, trial_dir, started, deadline)
        except BaseException:
            self._kill(remote)
            raise

    def _launcher_log(self, remote: str) -> str:
        """The last line of what the heartbeat launcher wrote (an import error, a missing python), or ""."""
        try:
            sftp = self.client.open_sftp()
            try:
                with sftp.open(f"{remote}/launcher.log") as handle:
                    text = handle.read().decode(errors="replace")
            finally:
                sftp.close()
        except _DROPPED:
            return ""
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""

    def _wait(self, remote: str, trial_dir: Path, started: float, deadline: float) -> JsonObject:
        last_beat, last_change = None, time.monotonic()
        while True:
            try:
                sftp = self.client.open_sftp()
                try:
                    names = set(sftp.listdir(remote))
                    if "exit_code" in names:
                        return self._finish(sftp, remote, trial_dir, started, names)
                    beat = sftp.stat(f"{remote}/heartbeat").st_mtime if "heartbeat" in names else None
                finally:
                    sftp.close()
            except _DROPPED:
                # The connection dropped: the trial runs on, detached. Come back and read its result.
                self._reconnect(deadline + 60)
                continue
            now = time.monotonic()
            if beat != last_beat:
                last_beat, last_change = beat, now
            elif now - last_change > self.heartbeat_timeout_s:
                # A heartbeat that never began is a launch that failed: its launcher's log says why.
                said = self._launcher_log(remote) if last_beat is None else ""
                self._kill(remote)
                what = (f"never began within {self.heartbeat_timeout_s:.0f}s" + (f": {said}" if said else "")
                        if last_beat is None else f"stopped for {self.heartbeat_timeout_s:.0f}s: the process died "
                        "or the box went away")
                return {"state": "crash", "wall_s": round(now - started, 3), "exit_code": None,
                        "reason": f"the trial's heartbeat on {self.host} {what}"}
            if now > deadline:
                self._kill(remote)
                return {"state": "timeout", "reason": f"no result after {deadline - started:.0f}s; the trial was "
                        "stopped", "wall_s": round(now - started, 3), "exit_code": None}
            time.sleep(POLL_S)

    def _finish(self, sftp: Any, remote: str, trial_dir: Path, started: float, names: set[str]) -> JsonObject:
        for name in ("stdout.txt", "stderr.txt"):
            if name in names:
                sftp.get(f"{remote}/{name}", str(trial_dir / name))
        tail = (trial_dir / "stderr.txt").read_text(errors="replace")[-STDERR_TAIL:] \
            if (trial_dir / "stderr.txt").exists() else ""
        with sftp.open(f"{remote}/exit_code") as handle:
            code = int(handle.read().decode().strip() or 1)
        wall = round(time.monotonic() - started, 3)
        if "result.json" in names:
            with sftp.open(f"{remote}/result.json") as handle:
                raw = handle.read()
            (trial_dir / "result.json").write_bytes(raw)
            result = read_result(raw, f"{self.host}:{remote}/result.json")
            result.update(wall_s=wall, exit_code=code)
            if result["state"] == "crash":
                result["stderr_tail"] = tail
            return result
        last = next((line for line in reversed(tail.splitlines()) if line.strip()), "no output")
        if code == -9:
            return {"state": "oom", "reason": "killed by SIGKILL without a result: most likely the out-of-memory "
                    "killer", "stderr_tail": tail, "wall_s": wall, "exit_code": code}
        return {"state": "crash", "reason": f"exit code {code}: {last[:300]}", "stderr_tail": tail, "wall_s": wall,
                "exit_code": code}

    def _kill(self, remote: str) -> None:
        try:
            self._exec(f"cd {shlex.quote(remote)} && test -f runner.pid && kill -9 -- -$(cat runner.pid) || true")
        except (*_DROPPED, AutotuneError):
            pass
