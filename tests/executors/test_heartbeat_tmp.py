"""The SSH trial's temporary folder (issue 27, point 6): the remote heartbeat gives its runner a private
TMPDIR (and torch's caches) in the remote trial folder, or a short folder under /tmp where that path is
too long for a socket, and removes it when the runner ends."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from autotune.executors import heartbeat

RUNNER = """import json, os, sys, tempfile
tmp = os.environ["TMPDIR"]
open(os.path.join(tempfile.gettempdir(), "left.txt"), "w").write("a temporary file")
json.dump({"tmp": tmp, "mode": oct(os.stat(tmp).st_mode & 0o777), "inductor": os.environ["TORCHINDUCTOR_CACHE_DIR"],
           "gettempdir": tempfile.gettempdir()}, open(sys.argv[2], "w"))
"""


@pytest.mark.parametrize("deep", [False, True], ids=["in the trial folder", "too deep: under /tmp"])
def test_the_runner_s_tmpdir_is_private_and_removed_at_its_end(tmp_path, monkeypatch, request, deep):
    (tmp_path / "fake_tmp_runner.py").write_text(RUNNER)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(heartbeat, "runner_module", lambda runner: "fake_tmp_runner")
    monkeypatch.setattr(heartbeat, "BEAT_S", 0.05)
    # pytest's tmp_path is itself past the limit: the short trial folder is one of /tmp's own
    trial = Path(tempfile.mkdtemp(dir="/tmp")) if not deep else tmp_path / ("d" * 70) / "t"
    trial.mkdir(parents=True, exist_ok=True)
    if not deep:
        monkeypatch.setattr(heartbeat, "TMP_PATH_MAX", len(str(trial / "tmp")))
        request.addfinalizer(lambda: shutil.rmtree(trial, ignore_errors=True))
    monkeypatch.chdir(trial)
    assert heartbeat.main("hf", "spec.json", "result.json", "heartbeat") == 0
    assert (trial / "exit_code").read_text() == "0", (trial / "stderr.txt").read_text()
    seen = json.loads((trial / "result.json").read_text())
    tmp = Path(seen["tmp"])
    assert seen["gettempdir"] == str(tmp) and seen["mode"] == "0o700"
    assert seen["inductor"] == str(tmp / "inductor")
    assert tmp.parent == (Path("/tmp") if deep else trial)
    assert not tmp.exists()  # removed when the runner ended, its file with it
