"""The README's test command on a fresh machine without openssh-server: the SSH tests skip with the
package to install; under CI=true they fail, so CI can never pass without running them."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_ssh_tests(ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["AUTOTUNE_TEST_SSHD"] = str(ROOT / "no-such-sshd")
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-x",
                           "tests/executors/test_ssh.py", "tests/executors/test_ssh_jump.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_without_sshd_the_ssh_tests_skip_naming_the_package():
    result = _run_ssh_tests(ci=False)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "skipped" in result.stdout and "failed" not in result.stdout
    assert "apt-get install openssh-server" in result.stdout


def test_under_ci_a_missing_sshd_fails():
    result = _run_ssh_tests(ci=True)
    assert result.returncode == 1
    assert "apt-get install openssh-server" in result.stdout
