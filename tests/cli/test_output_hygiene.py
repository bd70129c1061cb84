"""What reaches the screen and what `kb export` writes into (issue 27): a reader that has gone is a
quiet exit, a full disk names the command that recovers, escape codes from a script or a word are shown
escaped, and `kb export` writes into stdout, a FIFO or a device, or refuses, never replacing it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from autotune.cli.main import main
from autotune.output.display import Progress, new_console
from autotune.util.io import DiskError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("words", [["kb", "list", "--all", "--json"], ["suggest", "model=7B", "max_len=512"]],
                         ids=["print", "rich"])
def test_a_closed_stdout_is_a_quiet_exit(tmp_path, words):
    """`autotune kb list --json | head -0`, `autotune suggest ... | head -0`: the reader has gone before the
    output is written. suggest prints through rich, whose own answer to a broken pipe is exit 1, no line."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNE_KB": str(tmp_path / "kb")}
    child = subprocess.Popen([sys.executable, "-m", "autotune.cli.main", *words],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    child.stdout.close()  # before the child has imported anything: its first write meets no reader
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) in (0, 141)
    assert err == "", err


def test_a_stdout_started_closed_is_written_nowhere(tmp_path):
    """`autotune kb runs >&-`: fd 1 is /dev/null for the command, not the number of the next file it opens."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNE_KB": str(tmp_path / "kb")}
    done = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m", "autotune.cli.main",
                           "suggest", "model=7B", "max_len=512"], stderr=subprocess.PIPE, env=env, cwd=tmp_path,
                          timeout=120)
    assert (done.returncode, done.stderr.decode()) == (0, "")


def test_the_console_s_broken_pipe_is_python_s():
    """rich raises SystemExit(1) for a broken pipe; autotune's console raises what main quietly ends on."""
    console = new_console(file=StringIO())
    with pytest.raises(BrokenPipeError):
        console.on_broken_pipe()
    assert console.quiet


def test_a_full_disk_in_a_tune_names_resume(tmp_path, capsys, monkeypatch):
    def full(*_args, **_kwargs):
        raise DiskError(tmp_path / "runs" / "r" / "state.json", OSError(28, "No space left on device"))

    monkeypatch.setattr("autotune.api.tune", full)
    assert main(["tune", "r", "model=mlp", "--runs-dir", str(tmp_path / "runs")]) == 1
    line = capsys.readouterr().err.strip()
    assert "No space left on device" in line and "`autotune tune r resume` continues the run" in line
    assert "run the command again" not in line


def _record(**changes) -> dict:
    return {"trial": 1, "decision": "discard", "samples_per_s": 0.0, "ratio": None, "state": "crash",
            "change": "padding=longest", "reason": "exit code 1: \x1b[2J\x1b[31mboom [bold]x[/y]", **changes}


def test_escape_codes_from_a_crashing_script_are_shown_escaped():
    out = StringIO()
    display = Progress(Console(file=out, width=200, force_terminal=False))
    display.finished(_record())
    display.running(1, "gpu \x1b]0;title\x07 label")
    text = out.getvalue() + display.status_line()
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "[bold]x[/y]" in text  # shown as text: no escape, no markup (no error)


def test_kb_export_writes_into_a_fifo_and_leaves_it_a_fifo(tmp_path, capsys):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there first (an export of a few KB fits
    try:                                                 # the pipe's buffer, read after the export ends)
        assert main(["kb", "export", str(fifo)]) == 0
        text = b""
        while chunk := os.read(reader, 65536):
            text += chunk
    finally:
        os.close(reader)
    assert json.loads(text)["schema_version"] == 1
    assert fifo.is_fifo()


def test_kb_export_to_a_fifo_nobody_reads_is_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    # A hang guard, not a timing: opening a FIFO nobody reads blocks for good; refused, it returns.
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["kb", "export", str(fifo)])), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert codes == [2], "kb export blocked on a FIFO nobody reads"
    assert fifo.is_fifo()
    assert "nothing reads it" in capsys.readouterr().err


def test_kb_export_to_stdout_and_into_a_device(tmp_path, capsys):
    assert main(["kb", "export", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["schema_version"] == 1 and "to stdout" in err
    assert main(["kb", "export", os.devnull]) == 0
    assert Path(os.devnull).is_char_device()


def test_kb_export_through_a_link_writes_the_file_it_names_and_keeps_the_link(tmp_path, capsys):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    assert main(["kb", "export", str(tmp_path / "link.json")]) == 0
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "real.json").read_text())["schema_version"] == 1


def test_kb_export_to_a_socket_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short relative name: a socket's path has at most 107 bytes
    server = socket.socket(socket.AF_UNIX)
    server.bind("s.sock")
    try:
        assert main(["kb", "export", "s.sock"]) == 2
        assert "is a socket" in capsys.readouterr().err
        assert Path("s.sock").is_socket()
    finally:
        server.close()


@pytest.mark.parametrize("argv", [["kb", "export"], ["tune"], ["tune", "r", "--nope"], ["kb", "nope"],
                                  ["suggest", "--nope"]])
def test_a_usage_error_is_one_line_exit_2(capsys, argv):
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: ") and "--help" in lines[0], lines


def test_job_words_may_follow_the_options(tmp_path, capsys, monkeypatch):
    seen = {}

    def tune(job, *_args, **_kwargs):
        seen["job"] = job
        raise DiskError(tmp_path / "x", OSError(28, "full"))

    monkeypatch.setattr("autotune.api.tune", tune)
    main(["tune", "r", "--runs-dir", str(tmp_path / "runs"), "model=mlp", "max_trials=3"])
    assert seen["job"].max_trials == 3
