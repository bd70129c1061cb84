"""Optional parts are extras: a job that needs one that is missing stops with one line naming the pip command."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.util.errors import JobError
from autotune.util.extras import MissingExtra, need

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def without(monkeypatch):
    """Make importing these modules fail, as on a machine where they are not installed."""
    def hide(*modules):
        for module in modules:
            for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
                monkeypatch.delitem(sys.modules, name)
            monkeypatch.setitem(sys.modules, module, None)
    return hide


def test_a_missing_extra_is_a_job_error_naming_the_command(without):
    without("paramiko")
    with pytest.raises(MissingExtra) as raised:
        need("paramiko", "host=me@box")
    assert isinstance(raised.value, JobError)
    message = str(raised.value)
    assert "\n" not in message and "host=me@box" in message and "pip install 'autotune[ssh]'" in message


def test_ssh_host_without_paramiko(without):
    from autotune.executors import get_executor

    without("paramiko", "autotune.executors.ssh")
    with pytest.raises(MissingExtra, match=r"autotune\[ssh\]"):
        get_executor("me@box.example", "run")


def test_llm_without_openai(without):
    from autotune.reasoner.llm import LLMProposer, LLMSettings

    without("openai")
    with pytest.raises(MissingExtra, match=r"llm=some-model .*autotune\[llm\]"):
        LLMProposer(LLMSettings("some-model"))


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path):
    # A fresh interpreter where openai cannot be imported, as after `pip install -e .` alone.
    code = textwrap.dedent('''
        import sys
        sys.modules["openai"] = None
        from autotune.cli.main import main
        sys.exit(main(["tune", "x", "smoke", "llm=some-model", "--runs-dir", sys.argv[1]]))
    ''')
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPENAI_API_KEY": "unused", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert done.returncode == 2
    assert "pip install 'autotune[llm]'" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
