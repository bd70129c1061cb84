"""A child process on this machine per trial, in its own session so a timeout kills its workers too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..runners.common import STDERR_TAIL, write_json_atomic


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-STDERR_TAIL:]
    except OSError:
        return ""


class LocalExecutor:
    def __init__(self, python: str = sys.executable, extra_env: dict[str, str] | None = None) -> None:
        self.python = python
        self.extra_env = extra_env or {}

    def run(self, spec: dict[str, Any], trial_dir: Path, timeout_s: float) -> dict[str, Any]:
        trial_dir.mkdir(parents=True, exist_ok=True)
        spec_path, result_path = trial_dir / "spec.json", trial_dir / "result.json"
        result_path.unlink(missing_ok=True)
        write_json_atomic(spec_path, spec)
        env = {**os.environ, **self.extra_env, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
        if spec["job"].get("smoke"):
            env["CUDA_VISIBLE_DEVICES"] = ""  # smoke is a CPU dry run, whatever the machine has
        started = time.monotonic()
        with open(trial_dir / "stdout.txt", "w") as out, open(trial_dir / "stderr.txt", "w") as err:
            child = subprocess.Popen(
                [self.python, "-m", f"autotune.runners.{spec.get('runner', 'hf')}", str(spec_path), str(result_path)],
                stdout=out, stderr=err, env=env, start_new_session=True)
            try:
                code = child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                return {"state": "timeout", "reason": f"no result after {timeout_s:.0f}s; the trial was stopped",
                        "wall_s": round(time.monotonic() - started, 3), "exit_code": None}
        wall = round(time.monotonic() - started, 3)
        if result_path.exists():
            result = json.loads(result_path.read_text())
            result.update(wall_s=wall, exit_code=code)
            if result["state"] == "crash":
                result["stderr_tail"] = _tail(trial_dir / "stderr.txt")
            return result
        tail = _tail(trial_dir / "stderr.txt")
        if code == -signal.SIGKILL:
            state, reason = "oom", "killed by SIGKILL without a result: most likely the kernel's out-of-memory killer"
        else:
            last = next((line for line in reversed(tail.splitlines()) if line.strip()), "no output")
            state, reason = "crash", f"exit code {code}: {last[:300]}"
        return {"state": state, "reason": reason, "stderr_tail": tail, "wall_s": wall, "exit_code": code}
