"""On the remote box: start a runner in its own session and touch a heartbeat file while it lives.

    python -m autotune.executors.heartbeat RUNNER SPEC RESULT HEARTBEAT

Started detached by the SSH executor (`setsid nohup ...`), so it survives the connection. The executor
reads the heartbeat's age against the remote clock: a runner whose heartbeat stops (the box rebooted,
the process was killed) is a `crash` with that reason. Imports nothing but the standard library.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ..engine import runner_module

BEAT_S = 2.0


def main(runner: str, spec: str, result: str, heartbeat: str) -> int:
    beat = Path(heartbeat)
    with open("stdout.txt", "w") as out, open("stderr.txt", "w") as err:
        child = subprocess.Popen([sys.executable, "-m", runner_module(runner), spec, result],
                                 stdout=out, stderr=err, start_new_session=True)
        Path("runner.pid").write_text(str(child.pid))
        while child.poll() is None:
            beat.touch()
            time.sleep(BEAT_S)
    beat.touch()
    Path("exit_code").write_text(str(child.returncode))
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(*sys.argv[1:5]))
