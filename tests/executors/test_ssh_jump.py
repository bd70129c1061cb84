"""host=ALIAS through an SSH config, against real sshds on 127.0.0.1: the box (`sshd`) and a jump host
in front of it (`jump`, which forwards only to the box and logs each forward). The alias connects and
prepares the box through the jump host; the words of host= and ssh_key= win over the config; the jump
host's key is checked like any other; a dropped jump host is reconnected as a whole chain; failures are
one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sshd_server import jump, sshd  # noqa: F401  (the fixtures: real sshds on loopback)

from autotune.util.errors import AutotuneError
from autotune.executors.ssh import _DROPPED, SSHExecutor

pytestmark = pytest.mark.slow


@pytest.fixture
def aliased(sshd, jump, tmp_path, monkeypatch):  # noqa: F811
    """An SSH config with the aliases the tests use; known_hosts holds both servers' keys."""
    key = sshd.home / ".ssh" / "id_ed25519"
    other = tmp_path / "other_key"                                  # a key neither server accepts
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    closed, config = closed_port(), tmp_path / "ssh_config"
    config.write_text(
        f"Host target-alias\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyJump jump-alias\n"
        f"Host direct-alias\n  HostName 127.0.0.1\n  Port {sshd.port}\n"
        f"Host unforwarded-alias\n  HostName 127.0.0.1\n  Port {closed}\n  ProxyJump jump-alias\n"
        f"Host wrong-alias\n  HostName 127.0.0.1\n  Port {closed}\n  User no-such-user\n  IdentityFile {other}\n"
        f"Host jump-alias\n  HostName 127.0.0.1\n  Port {jump.port}\n"
        # IdentityFile lines add up over the blocks that match, as in ssh: wrong-alias is left out here.
        f"Host * !wrong-alias\n  IdentityFile {key}\nHost *\n  User {sshd.user}\n")
    (sshd.home / ".ssh" / "known_hosts").write_text(sshd.known + jump.known)
    monkeypatch.setenv("HOME", str(sshd.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)              # only the keys the config names
    return dict(config=str(config), key=str(key), other=str(other), closed=closed, known=sshd.home / ".ssh" / "known_hosts")


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def forwards(jump, port: int) -> int:  # noqa: F811
    """How many forwards to 127.0.0.1:port the jump host has opened so far, from its own log."""
    text = jump.log.read_text(errors="replace") if jump.log.exists() else ""
    return sum(1 for line in text.splitlines() if "server_request_direct_tcpip" in line and line.endswith(f"target 127.0.0.1 port {port}"))


def test_an_alias_with_a_proxyjump_prepares_the_box_through_the_jump_host(sshd, jump, aliased):  # noqa: F811
    before = forwards(jump, sshd.port)
    executor = SSHExecutor("target-alias", "via-jump", python=sys.executable, config=aliased["config"])
    try:
        facts = executor.prepare()                                  # probe, remote folder, package over SFTP
        assert facts["python"] == sys.version.split()[0]
        assert (Path(executor.remote_run) / "pkg" / "autotune" / "executors" / "ssh.py").is_file()
        assert forwards(jump, sshd.port) == before + 1              # the jump host carried the connection
        transports = [c.get_transport() for c in (executor.client, *executor.jumps)]
        assert len(transports) == 2 and all(t.is_active() for t in transports)
    finally:
        executor.close()
    assert not Path(executor.remote_run).exists()                   # cleaned through the jump host too
    assert not any(t.is_active() for t in transports)               # close() hung up on the jump host as well


def test_an_alias_without_a_jump_connects_directly(sshd, jump, aliased):  # noqa: F811
    before = forwards(jump, sshd.port)
    executor = SSHExecutor("direct-alias", "direct", python=sys.executable, config=aliased["config"])
    try:
        executor.connect()
        assert executor._exec("whoami").strip() == sshd.user and executor.jumps == []
    finally:
        executor.close()
    assert forwards(jump, sshd.port) == before


def test_the_words_of_host_and_ssh_key_win_over_the_config(sshd, aliased):  # noqa: F811
    def connects(host: str, key: str = "") -> str:
        executor = SSHExecutor(host, "words", key=key, python=sys.executable, config=aliased["config"])
        try:
            executor.connect()
            return executor._exec("whoami").strip()
        except AutotuneError as error:
            return str(error)
        finally:
            executor.close()

    # wrong-alias names a closed port, a user that does not exist and a key nobody accepts.
    assert "cannot connect" in connects("wrong-alias")
    assert "user no-such-user was refused" in connects(f"wrong-alias:{sshd.port}")
    refused = connects(f"{sshd.user}@wrong-alias:{sshd.port}")
    assert f"user {sshd.user} was refused" in refused and aliased["other"] in refused
    assert connects(f"{sshd.user}@wrong-alias:{sshd.port}", key=aliased["key"]) == sshd.user


def test_an_unknown_jump_host_key_is_refused_and_recorded_only_with_trust_new(sshd, jump, aliased):  # noqa: F811
    known = aliased["known"]
    known.write_text(sshd.known)                                    # the box is known, its jump host is not
    with pytest.raises(AutotuneError) as caught:
        SSHExecutor("target-alias", "keys", python=sys.executable, config=aliased["config"]).connect()
    message = str(caught.value)
    assert "\n" not in message and "jump host jump-alias" in message, message
    assert f"ssh-keyscan -p {jump.port} 127.0.0.1 >> {known}" in message and "ssh_trust_new=true" in message
    assert known.read_text() == sshd.known                          # nothing recorded

    trusting = SSHExecutor("target-alias", "keys", trust_new=True, python=sys.executable, config=aliased["config"])
    try:
        assert trusting.connect() is trusting.client
    finally:
        trusting.close()
    assert known.read_text() == sshd.known + jump.known             # the jump host's one line, appended

    known.write_text(jump.known)                                    # now the box behind it is unknown
    with pytest.raises(AutotuneError, match=f"`ssh jump-alias ssh-keyscan -p {sshd.port} 127.0.0.1 >> "):
        SSHExecutor("target-alias", "keys", python=sys.executable, config=aliased["config"]).connect()


def test_a_jump_host_that_refuses_to_forward_is_one_line_naming_it(aliased):
    with pytest.raises(AutotuneError) as caught:
        SSHExecutor("unforwarded-alias", "refused", python=sys.executable, config=aliased["config"]).connect()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("host unforwarded-alias, jump host jump-alias ("), message
    assert f"refuses to forward to 127.0.0.1:{aliased['closed']}" in message


def test_a_tune_with_an_unusable_config_is_one_line_and_exit_2(aliased, tmp_path, capsys):
    from autotune.cli.main import main

    config = Path(aliased["config"])
    config.write_text(config.read_text().replace("Host jump-alias\n", "Host jump-alias\n  IdentityFile ~/.ssh/gone\n"))
    words = ["model=mlp", "smoke", "max_trials=1", "host=target-alias", f"ssh_config={config}"]
    assert main(["tune", "--runs-dir", str(tmp_path / "runs"), "r", *words]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "jump host jump-alias" in err and ".ssh/gone" in err, err
    assert not (tmp_path / "runs" / "r").exists()


def test_when_the_jump_host_drops_the_whole_chain_is_rebuilt(sshd, jump, aliased):  # noqa: F811
    # The executor's own path on a drop (its trials' loops catch _DROPPED and call _reconnect); a whole trial
    # surviving a cut is tested on the plain host in test_ssh.py.
    executor = SSHExecutor("target-alias", "jump-cut", python=sys.executable, config=aliased["config"])
    try:
        executor.connect()
        old = [c.get_transport() for c in (executor.client, *executor.jumps)]
        children = subprocess.run(["pgrep", "-P", str(jump.server.pid)], capture_output=True, text=True).stdout
        for pid in children.split():                                # the jump host's sessions die: both links drop
            os.kill(int(pid), signal.SIGKILL)
        with pytest.raises(_DROPPED):
            executor._exec("true")
        before = forwards(jump, sshd.port)
        executor._reconnect(time.monotonic() + 60)
        assert executor._exec("echo back") == "back\n" and executor.reconnects == 1
        assert not any(t.is_active() for t in old)                   # the old chain is closed ...
        assert executor.jumps[0].get_transport() not in old          # ... and a new jump connection
        assert forwards(jump, sshd.port) == before + 1              # carries the box's connection again
    finally:
        executor.close()
