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
    """A real sshd on 127.0.0.1 with its own host key, for the keys in `authorized`; its log to `log` if given."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "host_key")], check=True)
    port = _free_port()
    config = root / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {root / 'host_key'}",
        f"AuthorizedKeysFile {authorized}", f"PidFile {root / 'sshd.pid'}", "UsePAM no",
        "StrictModes no", "PermitRootLogin yes", "PasswordAuthentication no", "Subsystem sftp internal-sftp", *extra, ""]))
    Path("/run/sshd").mkdir(exist_ok=True)
    where = ["-E", str(log)] if log else ["-e"]
    server = subprocess.Popen([SSHD, "-D", *where, "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    known = f"[127.0.0.1]:{port} " + " ".join((root / "host_key.pub").read_text().split()[:2]) + "\n"
    return SimpleNamespace(port=port, known=known, server=server, log=log)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    require_sshd()
    root = tmp_path_factory.mktemp("sshd")
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / ".ssh" / "id_ed25519")], check=True)
    (root / "authorized_keys").write_text((home / ".ssh" / "id_ed25519.pub").read_text())
    server = start_sshd(root, root / "authorized_keys")
    yield SimpleNamespace(port=server.port, home=home, known=server.known, server=server.server,
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
