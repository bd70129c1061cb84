"""A run folder is autotune's own (issue 27): a link or a special file planted in it is refused with one
line and never followed, `resume` and `review` act only on the folder named (a copied folder whose
job.json names another run is refused), an existing folder is made private, records that do not agree
are one line (exit 2), and `resume` runs the way the run was started (`fresh` kept)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import tiny_job
from tests.loop.test_tuner import TableExecutor

from autotune.cli.main import main
from autotune.loop.resume import load_run
from autotune.loop.tuner import Tuner
from autotune.output.records import RunFolder
from autotune.util.errors import JobError

FACTORS = {("padding", "padding_free"): 2.0}


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root as (kind, size, mtime, link target): what a command changed shows."""
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        out[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns,
                                            os.readlink(path) if path.is_symlink() else None)
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One run folder a (stopped after 2 trials), made once with the table executor: copied per test."""
    root = tmp_path_factory.mktemp("made") / "runs"
    Tuner(tiny_job(max_trials=2, run="a", kb=str(root.parent / "kb")), TableExecutor(FACTORS), root).run()
    return root


@pytest.fixture
def runs(finished, tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copytree(finished, tmp_path / "runs", symlinks=True)
    (tmp_path / "outside.txt").write_text("the user's own file\n")
    return tmp_path / "runs"


def refused(argv: list[str], capsys, needle: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and needle in lines[0], err
    return lines[0]


# ---------------------------------------------------------------------------------------- links planted

PLANTED = [".lock", "experiments.jsonl", "state.json", "job.json", "report.md", "trials", "trials/frame",
           "trials/frame/spec.json", "frame.json", "llm.jsonl"]


@pytest.mark.parametrize("name", PLANTED)
@pytest.mark.parametrize("mode", ["resume", "review"])
def test_a_link_planted_in_a_run_folder_is_refused_and_never_followed(runs, capsys, name, mode):
    folder = runs / "a"
    target = runs.parent / "outside.txt"
    planted = folder / name
    planted.parent.mkdir(parents=True, exist_ok=True)  # the table executor makes no trial folders
    if planted.is_dir():
        shutil.rmtree(planted)
    else:
        planted.unlink(missing_ok=True)
    planted.symlink_to(target)
    before = tree(runs.parent)
    line = refused(["tune", "a", mode, "--runs-dir", str(runs)], capsys, "is a symbolic link")
    assert str(planted) in line
    assert tree(runs.parent) == before and target.read_text() == "the user's own file\n"


def test_a_dangling_experiments_link_makes_no_file_outside(runs, capsys):
    folder = runs / "a"
    (folder / "experiments.jsonl").unlink()
    (folder / "experiments.jsonl").symlink_to(runs.parent / "created-outside.jsonl")
    refused(["tune", "a", "resume", "--runs-dir", str(runs)], capsys, "symbolic link")
    assert not (runs.parent / "created-outside.jsonl").exists()


def test_a_run_folder_that_is_itself_a_link_is_refused(runs, capsys):
    (runs.parent / "elsewhere").mkdir()
    (runs / "b").symlink_to(runs.parent / "elsewhere")
    refused(["tune", "b", "review", "--runs-dir", str(runs)], capsys, "is a symbolic link, not a run folder")
    assert list((runs.parent / "elsewhere").iterdir()) == []


def test_the_trials_work_trees_are_the_workloads_own(runs):
    """A script's working tree (trials/*/work) may hold links to its inputs: not looked into."""
    work = runs / "a" / "trials" / "frame" / "work"
    work.mkdir(parents=True)
    (work / "data.jsonl").symlink_to(runs.parent / "outside.txt")
    RunFolder(runs, "a").check_own()


def test_the_lock_file_is_never_opened_through_a_link_even_when_planted_late(tmp_path):
    from autotune.util.io import lock

    (tmp_path / "victim").write_text("keep\n")
    (tmp_path / ".lock").symlink_to(tmp_path / "victim")
    with pytest.raises(JobError, match="symbolic link"):
        lock(tmp_path / ".lock")
    assert (tmp_path / "victim").read_text() == "keep\n"


# ---------------------------------------------------------------------------------------- special files

@pytest.mark.parametrize("name", ["state.json", "job.json", "experiments.jsonl", "frame.json"])
def test_a_fifo_where_a_record_belongs_is_refused_without_waiting(runs, capsys, name):
    path = runs / "a" / name
    path.unlink()
    os.mkfifo(path)
    refused(["tune", "a", "resume", "--runs-dir", str(runs)], capsys, "is a FIFO")


def test_a_folder_where_a_record_belongs_is_refused(runs, capsys):
    path = runs / "a" / "experiments.jsonl"
    path.unlink()
    path.mkdir()
    refused(["tune", "a", "resume", "--runs-dir", str(runs)], capsys, "is a folder")


# ------------------------------------------------------------------------------------ the folder named

def test_a_copied_run_folder_is_refused_and_the_original_untouched(runs, capsys):
    shutil.copytree(runs / "a", runs / "b", symlinks=True)
    before = tree(runs / "a")
    for mode in ("resume", "review"):
        line = refused(["tune", "b", mode, "--runs-dir", str(runs)], capsys, "is the job of run 'a'")
        assert "config=" in line  # the way on: a new run from its job file
    assert tree(runs / "a") == before


def test_an_existing_run_folder_is_made_private(tmp_path):
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    RunFolder(tmp_path / "runs", "r").make()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_an_empty_runs_dir_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(["tune", "r", "model=mlp", "--runs-dir", ""], capsys, "--runs-dir is empty")
    monkeypatch.setenv("AUTOTUNE_RUNS", "")
    refused(["tune", "r", "model=mlp"], capsys, "--runs-dir is empty")
    assert [p.name for p in tmp_path.iterdir()] == ["kb"]  # only the test's own knowledge base (conftest)


# ------------------------------------------------------------------------------ records that disagree

def _edit_state(folder: Path, **changes) -> None:
    data = json.loads((folder / "state.json").read_text())
    data.update(changes)
    (folder / "state.json").write_text(json.dumps(data))


def _edit_records(folder: Path, edit) -> None:
    lines = [json.loads(line) for line in (folder / "experiments.jsonl").read_text().splitlines()]
    (folder / "experiments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edit(lines)))


DISAGREE = {
    "baseline-without-measurements": lambda f: _edit_records(
        f, lambda rs: [{**rs[0], "measurements": []}, *rs[1:]]),
    "state-covers-more-than-recorded": lambda f: _edit_state(f, records_covered=99, stop_reason=""),
    "baseline-knobs-not-knobs": lambda f: _edit_records(
        f, lambda rs: [{**rs[0], "knobs": {"per_device_train_batch_size": -3}}, *rs[1:]]),
    "first-record-not-the-baseline": lambda f: _edit_records(f, lambda rs: rs[1:]),
}


class Unused:
    """Where a resume gets past its records to measuring: only the reading is under test."""

    def run(self, *_args):
        raise JobError("would measure now")


@pytest.mark.parametrize("damage", DISAGREE, ids=list(DISAGREE))
def test_resume_and_review_of_records_that_disagree_are_one_line_exit_2(runs, capsys, damage, monkeypatch):
    folder = runs / "a"
    _edit_state(folder, stop_reason="")  # stopped, not finished: resume would continue it
    DISAGREE[damage](folder)
    monkeypatch.setattr("autotune.executors.get_executor", lambda *a, **k: Unused())
    for mode in ("resume", "review"):
        code = main(["tune", "a", mode, "--runs-dir", str(runs)])
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
        assert code in (0, 2), (mode, code, err)  # refused in one line, or (review) written again


# ------------------------------------------------------------------------------------------ fresh kept

def test_resume_keeps_fresh_as_the_run_was_started(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    Tuner(tiny_job(max_trials=1, run="f", kb=str(tmp_path / "kb")), TableExecutor(FACTORS), root, fresh=True).run()
    Tuner(tiny_job(max_trials=1, run="g", kb=str(tmp_path / "kb")), TableExecutor(FACTORS), root).run()
    assert load_run(root, "f")[1] == ["fresh"] and load_run(root, "g")[1] == []
    seen = {}

    def tune(job, executor, runs_dir, fresh=False, resume=False):
        seen[job.run] = (fresh, resume)
        raise JobError("stopped here")

    monkeypatch.setattr("autotune.api.tune", tune)
    for run in ("f", "g"):
        assert main(["tune", run, "resume", "--runs-dir", str(root)]) == 2
    assert seen == {"f": (True, True), "g": (False, True)}
