"""Every process a trial starts ends with it: a script's child that daemonizes (its own session, its
parent gone, its environment wiped or not) is ended whether the trial completes or is stopped at its
timeout; its temporary files go with the trial; and `autotune tune ... | reader` reaches the end of its
output, with autotune's own helper processes gone."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.executors.local import LocalExecutor
from autotune.util import procs

# Two daemons, each a grandchild in a session of its own whose parent has exited: one keeps the
# environment, one runs with an empty one. Then a tiny training loop (or, with HANG, no step at all).
SCRIPT = textwrap.dedent('''
    import argparse, os, sys, tempfile, time
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--grad_accum", type=int, default=4)
    args = parser.parse_args()

    pids, hang = {pids!r}, {hang!r}
    with open({tmp_note!r}, "w") as note:
        note.write(tempfile.mkdtemp(prefix="mine-"))
    before = len(open(pids).read().split()) if os.path.exists(pids) else 0
    for wiped in (False, True):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                code = f"import os, time; open({{pids!r}}, 'a').write(f'{{{{os.getpid()}}}}\\\\n'); time.sleep(600)"
                os.execve(sys.executable, [sys.executable, "-c", code], {{}} if wiped else dict(os.environ))
            os._exit(0)
    for _ in range(500):                       # both daemons are up before the trial goes on
        if os.path.exists(pids) and len(open(pids).read().split()) == before + 2:
            break
        time.sleep(0.02)
    if hang:
        time.sleep(600)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(50):
        for _ in range(args.grad_accum):
            model(torch.randint(0, 64, (args.batch_size, 8))).logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
''')


def running(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


def project(tmp_path: Path, hang: bool = False) -> tuple[Path, Path, Path]:
    folder = tmp_path / "project"
    folder.mkdir()
    pids, note = tmp_path / "pids.txt", tmp_path / "tmp_note.txt"
    (folder / "train.py").write_text(SCRIPT.format(pids=str(pids), hang=hang, tmp_note=str(note)))
    return folder, pids, note


def spec(folder: Path, trial: Path) -> dict:
    return {"schema_version": 1, "kind": "probe", "runner": "script", "job": {"seed": 0, "smoke": True},
            "knobs": {"precision": "fp32"},
            "script": {"path": str(folder / "train.py"), "cwd": str(folder), "configs": [], "edits": {}, "args": [],
                       "expect": {}, "exclude": []},
            "flags": [], "measure_steps": 2, "warmup_max": 0, "workdir": str(trial / "work")}


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.parametrize("hang", [False, True], ids=["completes", "timeout"])
def test_a_trial_ends_every_process_its_script_started_and_its_temporary_files(tmp_path, hang):
    folder, pids, note = project(tmp_path, hang)
    trial = tmp_path / "runs" / "r" / "trials" / "1"
    # The hanging script's daemons are up within seconds of its start (torch imported): 14 s is far from that
    # beside two busy loops, and each second of it is a second of the suite's.
    result = LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}).run(spec(folder, trial), trial, 14 if hang else 300)
    assert result["state"] == ("timeout" if hang else "complete"), result
    daemons = [int(p) for p in pids.read_text().split()]
    assert len(daemons) == 2
    assert not [p for p in daemons if running(p)]
    # The script's temporary folder was made in the trial's folder, which is gone with the trial.
    # In the trial's folder, or (a folder too deep for the sockets made in it) a short one of its own.
    made = Path(note.read_text())
    assert made.is_relative_to(trial / "tmp") or made.parent.name.startswith(f"autotune-{os.getuid()}-")
    assert not (trial / "tmp").exists() and not made.parent.exists()


@pytest.mark.slow
def test_the_command_piped_to_a_reader_reaches_the_end_with_nothing_left(tmp_path, request):
    folder, pids, _ = project(tmp_path)
    command = Path(sys.executable).with_name("autotune")
    # A $TMPDIR too deep for AF_UNIX sockets (a scheduler's per-job scratch folder): the fork server's
    # socket, and the trials' temporary files, go to short private folders instead, removed at the end.
    top = Path(tempfile.mkdtemp(prefix="at-user-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    user_tmp = top / ("scratch-" * 12)
    user_tmp.mkdir()
    started = time.monotonic()
    # stdout is a pipe read to its end, as `| tee log` reads it: any process left holding it would hang here.
    # Held to a knob a script has not got, the tune is its probes, frame and baseline, each run starting the
    # script's daemons; a trial would add runs as many as the machine's noise asks, and nothing to check.
    done = subprocess.run([str(command), "tune", "c", "script=train.py", "max_len=8", "smoke", "max_trials=1",
                           "only=freeze_vision_tower", "fresh"],
                          cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(user_tmp)})
    assert done.returncode == 0, done.stdout[-3000:]
    assert "ready to run:" in done.stdout and time.monotonic() - started < 600
    daemons = [int(p) for p in pids.read_text().split()]
    assert daemons and not [p for p in daemons if running(p)]
    # Nothing of autotune's in the user's $TMPDIR: trials' files went in their folders, the fork server's too.
    assert list(user_tmp.iterdir()) == []


OWNER = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from autotune.executors.local import LocalExecutor

    LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}).run(json.loads(sys.argv[1]), Path(sys.argv[2]), 600)
''')


def test_a_tuner_killed_mid_trial_takes_the_trials_daemons_with_it(tmp_path):
    # The tuner gets SIGKILL: nobody is left to look for the trial's processes but the trial itself,
    # which sees its owner go and ends its descendants (the daemons too) before its own session.
    # Its folder is too deep for sockets, so its temporary files are in a short folder under /tmp, which
    # the trial takes back itself: the tuner that would have is gone.
    folder, pids, _ = project(tmp_path, hang=True)
    trial = tmp_path / ("deep-" * 12) / "runs" / "r" / "trials" / "1"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, json.dumps(spec(folder, trial)), str(trial)])
    short = Path("/tmp") / procs.short_tmp_name(f"{owner.pid}.1")
    deadline = time.monotonic() + 120
    while (not pids.exists() or len(pids.read_text().split()) < 2) and time.monotonic() < deadline:
        time.sleep(0.2)
    daemons = [int(p) for p in pids.read_text().split()]
    assert len(daemons) == 2 and all(running(p) for p in daemons) and short.is_dir()
    home = fork_server_home(owner.pid)   # the fork server's own folder (its torch caches) under /tmp
    assert home is not None and home.is_dir()
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 30
    while ([p for p in daemons if running(p)] or short.exists() or home.exists()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in daemons if running(p)] and not short.exists()
    assert not home.exists()   # the fork server took it back as it ended: no exit handler of the tuner ran


def fork_server_home(owner: int) -> Path | None:
    """The folder the fork server started by `owner` keeps its caches in, read from its environment."""
    from autotune.executors.tmpdirs import FORKSERVER_HOME_ENV

    children = subprocess.run(["pgrep", "-P", str(owner)], capture_output=True, text=True).stdout.split()
    for pid in children:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            name, _, value = item.decode(errors="replace").partition("=")
            if name == FORKSERVER_HOME_ENV:
                return Path(value)
    return None


def test_a_tuner_interrupted_while_its_trial_starts_leaves_no_temporary_folder(tmp_path, monkeypatch):
    """The first trial waits seconds for the fork server's imports: a Ctrl-C or SIGTERM then (the CLI turns
    both into KeyboardInterrupt) still takes back the trial's temporary folder, a short one under /tmp too."""
    folder, _, _ = project(tmp_path)
    trial = tmp_path / ("deep-" * 12) / "runs" / "r" / "trials" / "1"   # too deep: its folder is a short one
    made = []

    def interrupted(self, spec, trial_dir, tag):
        made.append(local.trial_tmp(trial_dir, tag))
        assert made[-1].is_dir()
        raise KeyboardInterrupt

    from autotune.executors import local

    monkeypatch.setattr(LocalExecutor, "_start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        LocalExecutor().run(spec(folder, trial), trial, 60)
    assert made and made[0].parent == local.short_base() and not made[0].exists()
