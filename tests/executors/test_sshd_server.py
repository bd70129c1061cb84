"""The real-sshd helper the SSH tests stand on: an sshd that cannot start fails the test at once with its
own words, and a running one logs to its temporary folder, never to a pipe nobody reads."""

from __future__ import annotations

import sys

import pytest
from sshd_server import require_sshd, sshd, start_sshd  # noqa: F401  (the fixture: a real sshd on loopback)

from autotune.executors.ssh import SSHExecutor


def test_an_sshd_that_cannot_start_fails_the_test_with_the_end_of_its_log(tmp_path):
    require_sshd()
    (tmp_path / "authorized_keys").write_text("")
    with pytest.raises(pytest.fail.Exception, match="exited .* before it listened.*NoSuchOption"):
        start_sshd(tmp_path, tmp_path / "authorized_keys", ("NoSuchOption yes",))
    assert (tmp_path / "sshd.log").is_file()


def test_a_running_sshd_logs_its_sessions_to_its_temporary_folder(sshd, monkeypatch):  # noqa: F811
    assert sshd.server.stderr is None and sshd.log.parent == sshd.home.parent       # a file in the temp folder
    (sshd.home / ".ssh" / "known_hosts").write_text(sshd.known)
    monkeypatch.setenv("HOME", str(sshd.home))
    executor = SSHExecutor(sshd.host, "logged", python=sys.executable)
    try:
        executor.connect()
    finally:
        executor.close()
    assert f"Accepted publickey for {sshd.user}" in sshd.log.read_text(errors="replace")
