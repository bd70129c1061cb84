"""The run folder stays where its name says, belongs to one tuner at a time, and is private to the user:
a RUN of `..` or `.` is refused before anything is made; a second tuner or a `resume` on a live run
stops with one line naming the process that holds it, and writes nothing; run folders, knowledge-base
files and locks are 0700 / 0600."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import TINY_WORDS, tiny_job
from tests.loop.test_tuner import TableExecutor

from autotune.cli.main import main
from autotune.util.errors import JobError
from autotune.workloads.jobs import job_from_words
from autotune.kb import Store
from autotune.kb.experience import Experience
from autotune.output.records import RunFolder
from autotune.loop.tuner import Tuner

FACTORS = {("padding", "padding_free"): 2.0, ("per_device_train_batch_size", 2): 1.5}
REPO = Path(__file__).resolve().parents[2]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and mtime: what a command changed, if anything."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------------------------------ names

@pytest.mark.parametrize("run", ["", ".", "..", "a/b", "../x", "a\\b", "a\x00b", "a\x1b[2Jb", "a\nb", "x" * 256])
def test_a_run_name_that_is_not_one_plain_folder_is_refused_before_anything_is_made(tmp_path, run):
    before = snapshot(tmp_path)
    with pytest.raises(JobError, match="run name"):
        RunFolder(tmp_path / "runs", run)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("run", [".", ".."])
def test_the_job_grammar_refuses_dot_names_with_one_line(run):
    with pytest.raises(JobError, match=r"not '\.' or '\.\.'"):
        job_from_words(run, ["smoke"])


@pytest.mark.parametrize("run, mode", [("..", None), (".", None), ("..", "resume"), ("..", "review"),
                                       ("../outside/victim", "review"), ("../outside/victim", "resume")])
def test_tune_resume_and_review_of_a_dot_name_exit_2_and_touch_nothing_outside(tmp_path, capsys, run, mode):
    # A finished run beside the runs folder: `review ../outside/victim` used to rewrite its report.
    Tuner(tiny_job(run="victim"), TableExecutor(FACTORS), tmp_path / "outside").run()
    before = snapshot(tmp_path)
    words = [mode] if mode else TINY_WORDS
    assert main(["tune", "--runs-dir", str(tmp_path / "runs"), run, *words]) == 2
    assert "run name" in one_line(capsys.readouterr().err)
    assert snapshot(tmp_path) == before                          # not even runs/ was made


# ------------------------------------------------------------------------------------------------ lock

def hold_lock(root: Path) -> subprocess.Popen:
    """Another process holding RUN r's lock (as a live tuner does) until its stdin closes."""
    code = ("import sys\nfrom autotune.output.records import RunFolder\n"
            "with RunFolder(sys.argv[1], 'r').locked():\n    print('held', flush=True)\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_run_folder_held_by_another_process_is_refused_naming_it_and_freed_when_it_dies(tmp_path):
    holder = hold_lock(tmp_path)
    try:
        with pytest.raises(JobError) as refused:
            with RunFolder(tmp_path, "r").locked():
                pass
        assert f"in use by process {holder.pid} on {socket.gethostname()}" in str(refused.value)
    finally:
        holder.kill()                                            # killed, not ended: the kernel frees the lock
        holder.wait()
    with RunFolder(tmp_path, "r").locked():
        pass


class Paused(TableExecutor):
    """Holds the first trial until released: a tuner caught live, mid-run."""

    def __init__(self, factors) -> None:
        super().__init__(factors)
        self.live, self.release = threading.Event(), threading.Event()

    def run(self, spec, trial_dir, timeout_s):
        if spec["kind"] == "trial" and not self.live.is_set():
            self.live.set()
            self.release.wait(60)
        return super().run(spec, trial_dir, timeout_s)


def test_a_second_tuner_or_a_resume_on_a_live_run_stops_with_one_line_and_writes_nothing(tmp_path, capsys,
                                                                                         isolated_kb):
    paused = Paused(FACTORS)
    first = threading.Thread(target=lambda: Tuner(tiny_job(max_trials=3, run="r"), paused, tmp_path).run())
    first.start()
    try:
        assert paused.live.wait(60)
        before = snapshot(tmp_path)
        for words in (TINY_WORDS + ["max_trials=3"], ["resume"], ["review"]):
            assert main(["tune", "--runs-dir", str(tmp_path), "r", *words]) == 2
            line = one_line(capsys.readouterr().err)
            assert f"RUN 'r' is in use by process {os.getpid()} on {socket.gethostname()}" in line, line
        assert snapshot(tmp_path) == before                      # neither the run folder nor the knowledge base
    finally:
        paused.release.set()
        first.join(60)
    trials = [r["trial"] for r in RunFolder(tmp_path, "r").read_experiments()]
    assert trials == sorted(set(trials)) and len(trials) >= 2
    assert sorted(t["trial"] for t in Experience(Store(isolated_kb)).trials()) == trials


# --------------------------------------------------------------------------------------------- privacy

def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_run_folders_knowledge_base_files_and_locks_are_private_to_the_user(tmp_path, capsys):
    previous = os.umask(0o022)                                   # a usual umask: the modes come from autotune
    try:
        kb = tmp_path / "new-kb"
        Tuner(tiny_job(max_trials=2, kb=str(kb), run="r"), TableExecutor(FACTORS), tmp_path / "runs").run()
        folder = RunFolder(tmp_path / "runs", "r")
        assert mode(folder.path) == 0o700 and mode(kb) == 0o700
        files = [p for p in (*folder.path.rglob("*"), *kb.rglob("*")) if p.is_file()]
        assert {folder.job, folder.experiments, folder.state, folder.path / ".lock"} <= set(files)
        assert any(p.suffix == ".jsonl" for p in kb.iterdir())
        assert {str(p): oct(mode(p)) for p in files if mode(p) != 0o600} == {}
        # The report, results and best config of the CLI (and its trials' files) come under its umask.
        for path in (folder.report, folder.results, folder.best):
            path.unlink(missing_ok=True)
        assert main(["tune", "--runs-dir", str(tmp_path / "runs"), "r", "review"]) == 0
        assert {oct(mode(p)) for p in (folder.report, folder.results, folder.best)} == {"0o600"}
        assert os.umask(0o022) == 0o022                          # and the caller's umask is given back
    finally:
        os.umask(previous)
