"""On the remote box: start a runner in its own session and touch a heartbeat file while it lives.

    python -m autotune.executors.heartbeat RUNNER SPEC RESULT HEARTBEAT

Started detached by the SSH executor (`setsid nohup ...`), so it survives the connection. The executor
reads the heartbeat's age against the remote clock: a runner whose heartbeat stops (the box rebooted,
the process was killed) is a `crash` with that reason. The runner's temporary files (tempfile,
multiprocessing's pymp-*, torch.compile's caches) go in the trial's folder, `tmp` there, or where that
path is too long for the sockets made in it a private folder under /tmp; either is removed when the runner
ends, before the exit code says it has. Imports nothing but the standard library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..engine import runner_module
from .tmpdirs import TMP_PATH_MAX, short_base, tmp_env

BEAT_S = 2.0


def trial_tmp() -> Path:
    """The runner's TMPDIR, made private: `tmp` in the trial's folder (the working directory), or a
    short folder under /tmp where that path is too long."""
    inside = Path.cwd() / "tmp"
    if len(str(inside)) <= TMP_PATH_MAX:
        inside.mkdir(mode=0o700)
        return inside
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"autotune-{os.getuid()}-", dir=short_base()))


def main(runner: str, spec: str, result: str, heartbeat: str) -> int:
    beat = Path(heartbeat)
    tmp = trial_tmp()
    env = {**os.environ, **tmp_env(tmp, os.environ)}
    try:
        with open("stdout.txt", "w") as out, open("stderr.txt", "w") as err:
            child = subprocess.Popen([sys.executable, "-m", runner_module(runner), spec, result],
                                     stdout=out, stderr=err, env=env, start_new_session=True)
            Path("runner.pid").write_text(str(child.pid))
            while child.poll() is None:
                beat.touch()
                time.sleep(BEAT_S)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    beat.touch()
    Path("exit_code").write_text(str(child.returncode))
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(*sys.argv[1:5]))
