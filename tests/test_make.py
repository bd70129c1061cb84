"""The two commands of a fresh clone (`make demo`, `make test`): the set-up runs once and is redone only
when what it installed from changes, on a stand-in virtual environment whose `python` records its calls
(no real install here: that is what CI's fresh `.venv` does)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import torch_index  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make (apt-get install make)")


@pytest.fixture
def clone(tmp_path):
    """The files the Makefile reads, and a `.venv` whose python appends its arguments to calls.txt."""
    for name in ("Makefile", "pyproject.toml", "scripts/torch_index.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/../calls.txt"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def make(folder: Path, *words: str) -> subprocess.CompletedProcess:
    # Not the variables of a `make test` this suite may run under (MAKEFLAGS carries its PYTEST_ARGS=...).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "PYTEST_ARGS")}
    done = subprocess.run(["make", "--no-print-directory", f"PYTHON={sys.executable}", *words], cwd=folder,
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done


def calls(folder: Path) -> list[str]:
    path = folder / ".venv" / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_the_set_up_runs_once_and_again_only_when_its_inputs_change(clone):
    make(clone, "setup")
    first = calls(clone)
    assert [line.split()[:3] for line in first] == [["-m", "pip", "install"]] * 2
    assert "torch==2.13.0" in first[0] and first[1].endswith('-e .[dev]')
    make(clone, "setup")
    assert calls(clone) == first                  # the stamp is newer than its inputs: nothing to do
    later = time.time() + 5
    os.utime(clone / "pyproject.toml", (later, later))   # a pull that changed the dependencies
    make(clone, "setup")
    assert calls(clone) == first + first
    # The build this machine wants changed (a driver installed since): installed again.
    (clone / ".venv" / ".torch-choice").write_text("torch==2.12.0\n")
    make(clone, "setup")
    assert calls(clone)[4:] == ["-m pip uninstall -q -y torch", *first]


def test_demo_and_test_run_their_command_after_the_set_up_and_a_missing_venv_is_made(clone):
    dry = make(clone, "-n", "demo", "VENV=fresh").stdout.splitlines()
    assert any(re.search(r"-m venv fresh$", line) for line in dry)
    assert dry[-1] == "fresh/bin/autotune tune demo smoke"
    assert any("pip install -q -e \".[dev]\"" in line for line in dry)
    make(clone, "setup")
    dry = [line.rstrip() for line in make(clone, "-n", "test").stdout.splitlines()]
    assert dry[-1] == ".venv/bin/python -m pytest -q --durations=15 -n 2 --dist worksteal"
    # The README's test command is this one, and .ci/run runs it through `make test`.
    assert dry[-1] in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_torch_build_is_cuda_where_a_driver_answers_and_cpu_where_none_does():
    assert torch_index.choice(True, True)[0] == ["torch==2.13.0"]
    args, why = torch_index.choice(False, True)
    assert args == ["torch==2.13.0", "--extra-index-url", torch_index.CPU_INDEX] and "CPU build" in why
    args, why = torch_index.choice(False, False)
    assert args == ["torch==2.13.0"] and "does not resolve" in why
