"""Appends are all or nothing: a short write or a full disk leaves the file at its last whole line and
ends in one line about the disk, for the run folder and the knowledge base alike."""

from __future__ import annotations

import errno
import json
import os

import pytest
from tests.output.test_records import minimal_experiment

from autotune.cli.main import main
from autotune.util.io import DiskError, append_line, write_json_atomic
from autotune.kb.store import Store
from autotune.output.records import RunFolder


def full_disk_after(monkeypatch, allowed: int) -> list[int]:
    """os.write writes at most `allowed` more bytes in all, a few at a time (short writes), then ENOSPC."""
    real, left, calls = os.write, [allowed], []

    def write(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        count = real(fd, bytes(data[:min(left[0], 7)]))
        left[0] -= count
        return count

    monkeypatch.setattr(os, "write", write)
    return calls


def test_short_writes_are_completed_not_dropped(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    calls = full_disk_after(monkeypatch, 10_000)
    append_line(path, b'{"a": 1, "padding": "' + b"x" * 100 + b'"}\n')
    assert len(calls) > 10                                        # it took many short writes
    assert json.loads(path.read_bytes())["padding"] == "x" * 100  # and every byte landed


def test_a_full_disk_mid_line_leaves_the_previous_line_boundary(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    append_line(path, b'{"first": true}\n')
    before = path.read_bytes()
    full_disk_after(monkeypatch, 20)                              # part of the next line gets written
    with pytest.raises(DiskError) as raised:
        append_line(path, b'{"second": "' + b"y" * 200 + b'"}\n')
    assert path.read_bytes() == before
    message = str(raised.value)
    assert "\n" not in message and str(path) in message and "No space left on device" in message


def test_a_write_that_makes_no_progress_is_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with pytest.raises(DiskError, match="No space left on device"):
        append_line(path, b"{}\n")
    assert path.read_bytes() == b""


def test_a_full_disk_keeps_the_old_json_file_and_no_temp_file(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / "state.json"
    write_json_atomic(path, {"old": 1})
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(DiskError, match="could not write .*state.json: No space left on device"):
        write_json_atomic(path, {"new": 2})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert json.loads(path.read_text()) == {"old": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]


def test_a_run_folder_append_on_a_full_disk_says_how_to_resume(tmp_path, monkeypatch):
    folder = RunFolder(tmp_path, "r")
    folder.path.mkdir()
    folder.append_experiment(minimal_experiment(0))
    before = folder.experiments.read_bytes()
    full_disk_after(monkeypatch, 50)
    with pytest.raises(DiskError) as raised:
        folder.append_experiment(minimal_experiment(1))
    assert folder.experiments.read_bytes() == before
    assert "free space and run `autotune tune r resume`" in str(raised.value)
    monkeypatch.undo()
    assert [r["trial"] for r in folder.read_experiments()] == [0]  # the folder still reads


def test_a_knowledge_base_append_on_a_full_disk_keeps_every_file_whole(tmp_path, monkeypatch):
    store = Store(tmp_path / "kb")
    record = {"schema_version": 1, "job_fingerprint": "j", "device_fingerprint": "d", "run_id": "a"}
    store.append("runs", record)
    before = (tmp_path / "kb" / "runs.jsonl").read_bytes()
    full_disk_after(monkeypatch, 30)
    with pytest.raises(DiskError, match="runs.jsonl: No space left on device; free space"):
        store.extend("runs", [{**record, "run_id": "b"}, {**record, "run_id": "c"}])
    monkeypatch.undo()
    assert (tmp_path / "kb" / "runs.jsonl").read_bytes() == before
    assert [r["run_id"] for r in store.all("runs")] == ["a"]
    assert store.append("runs", {**record, "run_id": "b"}) == 2     # the next append continues the ids


def test_the_cli_ends_a_full_disk_in_one_line(tmp_path, monkeypatch, capsys):
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"schema_version": 1, "claims": [], "claim_history": [], "trials": [],
                                  "runs": [{"schema_version": 1, "run_id": "x", "job_fingerprint": "j",
                                            "device_fingerprint": "d"}]}))
    full_disk_after(monkeypatch, 0)
    assert main(["kb", "import", str(export), "--kb", str(tmp_path / "kb")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("autotune: could not write ") and "Traceback" not in err
    assert (tmp_path / "kb" / "runs.jsonl").read_bytes() == b""


def test_a_change_to_several_tables_that_fails_on_the_last_keeps_none(tmp_path, monkeypatch):
    store = Store(tmp_path / "kb")
    run = {"schema_version": 1, "job_fingerprint": "j", "device_fingerprint": "d", "run_id": "a"}
    store.append("runs", run)
    before = {p.name: p.read_bytes() for p in (tmp_path / "kb").glob("*.jsonl")}
    real, calls = os.write, []

    def second_write_fails(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, data)

    monkeypatch.setattr(os, "write", second_write_fails)
    with pytest.raises(DiskError, match="trials.jsonl: Input/output error"):
        store.extend_all({"runs": [{**run, "run_id": "b"}], "trials": [{**run, "trial": 0}]})
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in (tmp_path / "kb").glob("*.jsonl") if p.read_bytes()} == before
    assert [r["run_id"] for r in Store(tmp_path / "kb").all("runs")] == ["a"]
    assert [r["run_id"] for r in store.all("runs")] == ["a"] and store.all("trials") == []


def test_a_tune_that_fills_the_disk_stops_whole_and_resumes(tmp_path, monkeypatch):
    from conftest import tiny_job
    from tests.loop.test_resume import FACTORS
    from tests.loop.test_tuner import TableExecutor

    from autotune.loop.tuner import Tuner

    job, real = tiny_job(max_trials=4, run="r"), os.write
    folder = RunFolder(tmp_path, "r")

    def full_at_trial_2(fd: int, data: bytes) -> int:
        if b'"trial": 2' in data and os.readlink(f"/proc/self/fd/{fd}") == str(folder.experiments):
            count = real(fd, bytes(data[:len(data) // 2]))                   # half a line, then a full disk
            monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(
                OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
            return count
        return real(fd, data)

    monkeypatch.setattr(os, "write", full_at_trial_2)
    with pytest.raises(DiskError, match="experiments.jsonl: No space left on device; free space and run "
                                        "`autotune tune r resume`"):
        Tuner(job, TableExecutor(FACTORS), tmp_path).run()
    monkeypatch.setattr(os, "write", real)
    assert folder.experiments.read_bytes().endswith(b"\n")
    assert [r["trial"] for r in folder.read_experiments()] == [0, 1]
    Tuner(job, TableExecutor(FACTORS), tmp_path).run(resume=True)
    assert [r["trial"] for r in folder.read_experiments()] == [0, 1, 2, 3, 4]
