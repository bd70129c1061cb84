"""Real sshds on 127.0.0.1 for the SSH tests, each with a generated host key: `sshd`, the box, and
`jump`, a jump host in front of it that forwards only to it and logs every forward it opens. Without
openssh-server the tests skip naming the package; under CI=true they fail."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

# AUTOTUNE_TEST_SSHD: another sshd, or a missing one (tests/test_fresh_machine.py checks the skip).
SSHD = os.environ.get("AUTOTUNE_TEST_SSHD") or shutil.which("sshd") or "/usr/sbin/sshd"
USER = os.environ.get("USER") or "root"
PRIVSEP_DIR = "/run/sshd"
START_S = 20      # how long a started sshd may take to listen before the test fails


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def require_sshd() -> None:
    if not Path(SSHD).exists():
        # A fresh machine runs the README's test command without it; CI must run these tests.
        missing = "openssh-server is not installed (apt-get install openssh-server): the SSH tests need a real sshd"
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)


def start_sshd(root: Path, authorized: Path, extra: tuple[str, ...] = (), log: Path | None = None) -> SimpleNamespace:
    """A real sshd on 127.0.0.1 with its own host key, for the keys in `authorized`; its log (and anything it
    writes to stderr) to `log`, root/sshd.log unless given. One that exits or never listens fails the test
    with the end of that log."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "host_key")], check=True)
    port = _free_port()
    config, log = root / "sshd_config", log or root / "sshd.log"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {root / 'host_key'}",
        f"AuthorizedKeysFile {authorized}", f"PidFile {root / 'sshd.pid'}", "UsePAM no",
        "StrictModes no", "PermitRootLogin yes", "PasswordAuthentication no", "Subsystem sftp internal-sftp", *extra, ""]))
    if os.geteuid() == 0 and not Path(PRIVSEP_DIR).is_dir():
        # Run as root, sshd refuses to start without its privilege-separation folder (a fixed path, compiled
        # in); as another user it does not use it. Made only where it is missing, as the distribution would.
        Path(PRIVSEP_DIR).mkdir(mode=0o755, parents=True)
    # A file, not a pipe nobody reads: a chatty sshd (LogLevel DEBUG) would fill a pipe and block.
    with open(log, "ab") as errors:
        server = subprocess.Popen([SSHD, "-D", "-E", str(log), "-f", str(config)], stdin=subprocess.DEVNULL,
                                  stdout=errors, stderr=errors)
    deadline = time.monotonic() + START_S
    while server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                server.wait()
                pytest.fail(f"sshd did not listen on 127.0.0.1:{port} within {START_S} s; its log {log} ends: "
                            f"{_tail(log)}")
            time.sleep(0.2)
    else:
        pytest.fail(f"sshd exited ({server.returncode}) before it listened; its log {log} ends: {_tail(log)}")
    known = f"[127.0.0.1]:{port} " + " ".join((root / "host_key.pub").read_text().split()[:2]) + "\n"
    return SimpleNamespace(port=port, known=known, server=server, log=log)


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return " | ".join(lines[-8:]) or "(nothing)"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    require_sshd()
    root = tmp_path_factory.mktemp("sshd")
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / ".ssh" / "id_ed25519")], check=True)
    (root / "authorized_keys").write_text((home / ".ssh" / "id_ed25519.pub").read_text())
    server = start_sshd(root, root / "authorized_keys")
    yield SimpleNamespace(port=server.port, home=home, known=server.known, server=server.server, log=server.log,
                          authorized=root / "authorized_keys", user=USER, host=f"{USER}@127.0.0.1:{server.port}")
    server.server.terminate()
    server.server.wait(timeout=10)


@pytest.fixture(scope="module")
def jump(sshd, tmp_path_factory):
    """A second sshd, the jump host: it forwards only to the first one, and logs each forward it opens."""
    root = tmp_path_factory.mktemp("jump")
    server = start_sshd(root, sshd.authorized, ("LogLevel DEBUG1", f"PermitOpen 127.0.0.1:{sshd.port}"),
                         log=root / "sshd.log")
    yield server
    server.server.terminate()
    server.server.wait(timeout=10)
