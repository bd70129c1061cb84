"""The SSH executor against a real sshd on 127.0.0.1 (started here with a generated host key and a
temporary known_hosts): a whole smoke tune through it, a connection cut mid-trial and recovered, an
unknown host key refused with the way to trust it."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import make_spec, tiny_job
from sshd_server import sshd  # noqa: F401  (the fixture: a real sshd on loopback)

from autotune.util import procs
from autotune.util.errors import AutotuneError
from autotune.executors.ssh import SSHExecutor

pytestmark = pytest.mark.slow


@pytest.fixture
def trusted(sshd, monkeypatch):
    (sshd.home / ".ssh" / "known_hosts").write_text(sshd.known)
    monkeypatch.setenv("HOME", str(sshd.home))
    return sshd


def test_an_unknown_host_key_is_refused_with_the_way_to_trust_it(sshd, monkeypatch):
    (sshd.home / ".ssh" / "known_hosts").write_text("")
    monkeypatch.setenv("HOME", str(sshd.home))
    with pytest.raises(AutotuneError, match="ssh-keyscan -p .* ssh_trust_new=true"):
        SSHExecutor(sshd.host, "x", python=sys.executable).connect()


def test_a_whole_smoke_tune_runs_through_the_host(trusted, in_tmp, monkeypatch, capsys):
    # The framework-free MLP: the loop over SSH is the same, without a transformers import in every run.
    # `autotune tune` in this process, its SSH executor behind the fake clock (tests/fake_clock.py): each
    # config runs for real once on the host (the frame, the baseline, the trial's change), the repeats and
    # interleaved pairs a decision asks for replay those runs. The path is the subject, not a decision:
    # on this machine's noise a fresh process a run, the trial would take up to sixteen real pairs.
    import autotune.executors as executors
    from fake_clock import FakeClock

    from autotune.cli.main import main

    clocks: list[FakeClock] = []
    real = executors.get_executor

    def clocked(*args, **keys):
        clocks.append(FakeClock(real(*args, **keys), {}, default=0.9))
        return clocks[-1]

    monkeypatch.setattr(executors, "get_executor", clocked)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = main(["tune", "remote", "model=mlp", "mlp_width=64", "mlp_rows=512", "max_len=64", "effective_batch=8",
                 "smoke", "max_trials=1", "time=30m", f"host={trusted.host}", f"ssh_python={sys.executable}"])
    assert code == 0, capsys.readouterr().err[-3000:]
    # A caller's process is left as it was: not made the reaper of orphans (the sshd's detached trials).
    assert not procs.is_subreaper()
    assert [type(clock.inner).__name__ for clock in clocks] == ["SSHExecutor"]
    assert [kind for kind, _ in clocks[0].real_runs][:2] == ["frame", "trial"]
    lines = (in_tmp / "runs" / "remote" / "experiments.jsonl").read_text().splitlines()
    assert len(lines) == 2 and '"decision": "baseline"' in lines[0]
    trial = json.loads(lines[1])
    assert trial["state"] == "complete" and trial["decision"] == "discard" and trial["reason"], trial
    remote_home = Path(pwd.getpwuid(os.getuid()).pw_dir)                 # the sshd session's HOME, not the test's
    assert (remote_home / ".autotune-remote").exists()                   # the trials ran there ...
    assert not (remote_home / ".autotune-remote" / "remote").exists()    # ... and their folder was cleaned


def _session_children(server_pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(server_pid)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def test_a_connection_cut_mid_trial_is_reestablished_and_the_result_recovered(trusted, tmp_path):
    executor = SSHExecutor(trusted.host, "cut", python=sys.executable)
    try:
        _cut_mid_trial(executor, trusted, tmp_path)
    finally:
        executor.close()


def _trial_in_background(executor, tmp_path, waits_for: str, framed: bool = True, **fields):
    """Frame (where the trial reads its rows), then a trial in a thread; returns (thread, results, remote
    folder) once `waits_for` exists. The framework-free MLP's runner: the connection is the subject, not a
    transformers import a run."""
    job = tiny_job(model="mlp", mlp_width=64, mlp_rows=512, effective_batch=8)
    if framed:
        frame = executor.run(make_spec(tmp_path, "frame", job=job, runner="mlp", rows_needed=8 * 14),
                             tmp_path / "frame", timeout_s=300)
        assert frame["state"] == "complete", frame
    else:
        executor.prepare()   # what the frame's run would have done first: the remote folder is known
    spec = make_spec(tmp_path, job=job, runner="mlp", rows_needed=8 * 14, measure_steps=8, warmup_max=4, **fields)
    results: list[dict] = []
    worker = threading.Thread(target=lambda: results.append(executor.run(spec, tmp_path / "001-001", 300)))
    worker.start()
    remote = Path(executor.remote_run) / "001-001"
    deadline = time.monotonic() + 60
    while not (remote / waits_for).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return worker, results, remote


def _cut_mid_trial(executor, trusted, tmp_path):
    worker, results, _ = _trial_in_background(executor, tmp_path, "heartbeat")
    for pid in _session_children(trusted.server.pid):   # the session's sshd child: the connection drops
        os.kill(pid, signal.SIGKILL)
    worker.join(timeout=300)
    assert results and results[0]["state"] == "complete", results
    assert executor.reconnects >= 1


def test_a_trial_whose_heartbeat_stops_is_a_crash_with_the_reason(trusted, tmp_path):
    executor = SSHExecutor(trusted.host, "beat", python=sys.executable, heartbeat_timeout_s=6)
    try:
        # The injected hang comes before the trial reads any rows: no frame needed.
        worker, results, remote = _trial_in_background(executor, tmp_path, "runner.pid", framed=False,
                                                       inject_fault="hang")
        # The box "goes away" for this trial: launcher and runner die without a word. This trial's launcher
        # only (the runner's parent): a pattern would also end other tests' trials running beside this one.
        runner = int((remote / "runner.pid").read_text())
        launcher = int(Path(f"/proc/{runner}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(launcher, signal.SIGKILL)
        os.killpg(runner, signal.SIGKILL)
        worker.join(timeout=120)
        assert results and results[0]["state"] == "crash" and "heartbeat" in results[0]["reason"], results
    finally:
        executor.close()


def _remote_home() -> Path:
    return Path(pwd.getpwuid(os.getuid()).pw_dir)               # the sshd session's HOME, not the test's


def _listing(folder: Path) -> dict[str, set[str]]:
    """The names in `folder` and in its ~/.autotune-remote: a remote run folder that escaped to one of them
    would add its own (pkg, frame, trials) there, and its clean-up would take names away."""
    base = folder / ".autotune-remote"
    return {"home": {p.name for p in folder.iterdir()}, "base": {p.name for p in base.iterdir()} if base.is_dir() else set()}


def _unchanged(before: dict[str, set[str]], after: dict[str, set[str]]) -> bool:
    # Nothing of the home gone (an escaped clean-up removes the home, or ~/.autotune-remote in it), and none
    # of a run folder's names added; other names may come and go with other tunes on this machine meanwhile.
    ours = re.compile(r"pkg|frame|\d{3}-\d{3}|\.made-by-autotune|job\.json|trials")
    return before["home"] <= after["home"] and not any(
        ours.fullmatch(name) for key in before for name in after[key] - before[key])


@pytest.mark.parametrize("run", ["..", "."])
def test_a_run_named_dot_dot_over_ssh_is_refused_before_anything_is_made_or_removed(trusted, tmp_path, capsys, run):
    from autotune.cli.main import main
    from autotune.util.errors import JobError

    home, here = _remote_home(), tmp_path / "here"
    here.mkdir()
    before_home, before_here = _listing(home), _listing(here)
    words = ["model=mlp", "mlp_width=64", "mlp_rows=512", "max_len=64", "effective_batch=8", "smoke", "max_trials=1", "time=30m",
             f"host={trusted.host}", f"ssh_python={sys.executable}"]
    assert main(["tune", "--runs-dir", str(here / "runs"), run, *words]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run name" in err and "Traceback" not in err, err
    with pytest.raises(JobError, match="run name"):               # the executor refuses it too, before connecting
        SSHExecutor(trusted.host, run, python=sys.executable)
    assert _unchanged(before_here, _listing(here)) and _unchanged(before_home, _listing(home))
    assert _listing(here) == before_here                          # here, nothing else runs: nothing at all


@pytest.mark.parametrize("prefix", ["marked", "-marked"])  # a name like an option is still just a name
def test_the_remote_clean_up_removes_only_the_private_folder_it_made_and_marked(trusted, prefix):
    from autotune.executors.ssh import MARKER

    base, name = _remote_home() / ".autotune-remote", f"{prefix}-{os.getpid()}"

    def prepared() -> SSHExecutor:
        # prepare() without its probe of torch on the box (the smoke tune above runs the whole of it).
        executor = SSHExecutor(trusted.host, name, python=sys.executable)
        executor.connect()
        try:
            executor._make_remote_run(str(base))
        except AutotuneError:
            executor.close()
            raise
        return executor

    try:
        made = prepared()
        folder = Path(made.remote_run)
        assert folder == base / name and (folder / MARKER).read_text() == made.token
        assert folder.stat().st_mode & 0o777 == 0o700
        made.close()
        assert not folder.exists()                               # its own folder: removed

        kept = prepared()
        (folder / MARKER).unlink()                               # now a folder without its marker
        kept.close()
        assert (folder / "pkg").is_dir()                         # left alone

        with pytest.raises(AutotuneError, match="exists and was not made by autotune"):
            prepared()                                           # and not taken over by the next tune
        assert (folder / "pkg").is_dir() and not (folder / MARKER).exists()
    finally:
        shutil.rmtree(base / name, ignore_errors=True)


def test_trust_new_appends_the_one_host_line_and_changes_nothing_else_in_known_hosts(sshd, monkeypatch):
    from paramiko.hostkeys import HostKeys

    other = " ".join(sshd.known.split()[1:])                       # a well-formed key, for other hosts
    before = ("# my hosts, by hand\n"
              f"gpu1.example.org,10.0.0.7 {other}\n"
              f"{HostKeys.hash_host('gpu2.example.org')} {other}\n"
              f"@cert-authority *.example.org {other}\n"
              "\n"
              f"[gpu3.example.org]:2222 {other}  # trailing comment\n").encode()
    known = sshd.home / ".ssh" / "known_hosts"
    known.write_bytes(before)
    monkeypatch.setenv("HOME", str(sshd.home))
    executor = SSHExecutor(sshd.host, "trust", trust_new=True, python=sys.executable)
    try:
        executor.connect()
    finally:
        executor.close()
    assert known.read_bytes() == before + sshd.known.encode()       # byte for byte, plus one line
    again = SSHExecutor(sshd.host, "trust", trust_new=True, python=sys.executable)
    try:
        again.connect()                                            # known now: checked, nothing appended
    finally:
        again.close()
    assert known.read_bytes() == before + sshd.known.encode()
    known.write_bytes(before.rstrip(b"\n"))                         # a last line without its newline
    SSHExecutor(sshd.host, "trust", trust_new=True, python=sys.executable).connect().close()
    assert known.read_bytes() == before + sshd.known.encode()


def test_a_revoked_host_key_is_refused_even_with_trust_new(sshd, monkeypatch):
    key = " ".join(sshd.known.split()[1:])
    known = sshd.home / ".ssh" / "known_hosts"
    known.write_text(f"@revoked * {key}\n{sshd.known}")
    monkeypatch.setenv("HOME", str(sshd.home))
    with pytest.raises(AutotuneError, match="revoked"):
        SSHExecutor(sshd.host, "revoked", trust_new=True, python=sys.executable).connect()
    assert known.read_text() == f"@revoked * {key}\n{sshd.known}"


@pytest.mark.parametrize("trust_new", [False, True])
def test_a_key_revoked_in_one_known_hosts_file_is_refused_though_another_lists_it(sshd, tmp_path, monkeypatch,
                                                                                   trust_new):
    # UserKnownHostsFile a b: OpenSSH refuses a key that a revokes, whichever file lists it.
    key = " ".join(sshd.known.split()[1:])
    revoking, listing = tmp_path / "revoking_hosts", tmp_path / "listing_hosts"
    revoking.write_text(f"@revoked * {key}\n")
    listing.write_text(sshd.known)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  UserKnownHostsFile {revoking} {listing}\n")
    monkeypatch.setenv("HOME", str(sshd.home))
    with pytest.raises(AutotuneError) as caught:
        SSHExecutor(sshd.host, "revoked", trust_new=trust_new, python=sys.executable, config=str(config)).connect()
    assert "revoked" in str(caught.value) and "ssh-keyscan" not in str(caught.value), caught.value
    assert revoking.read_text() == f"@revoked * {key}\n" and listing.read_text() == sshd.known


def test_a_trial_whose_heartbeat_never_begins_says_what_its_launcher_said(trusted, tmp_path):
    # A launch that fails on the box (here its python is gone) never beats: the reason is the launcher's
    # own last line, not "the process died".
    executor = SSHExecutor(trusted.host, "nobeat", python=sys.executable, heartbeat_timeout_s=3)
    try:
        executor.prepare()   # the box checked with its real python; then that python is gone
        executor.python = str(tmp_path / "no-such-python")
        result = executor.run(make_spec(tmp_path, "frame", job=tiny_job(), rows_needed=8), tmp_path / "frame", 120)
    finally:
        executor.close()
    assert result["state"] == "crash", result
    assert "never began within 3s" in result["reason"] and "no-such-python" in result["reason"], result["reason"]
