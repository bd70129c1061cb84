"""What every runner shares: spec in, result out, expected faults as states, a one-line summary."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

STDERR_TAIL = 2000


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


def inject_early_fault(kind: str | None) -> None:
    """Test hooks that end a trial the way real failures do (a dead process, a hang)."""
    if kind == "crash":
        print("autotune: injected crash (the process aborts)", file=sys.stderr, flush=True)
        os.abort()
    if kind == "hang":
        time.sleep(10 ** 6)


def main(body: Callable[[dict[str, Any]], dict[str, Any]], is_oom: Callable[[BaseException], bool],
         fault_type: type) -> None:
    """`python -m autotune.runners.X SPEC RESULT`: run `body(spec)`, always leave a result if alive."""
    spec_path, result_path = Path(sys.argv[1]), Path(sys.argv[2])
    spec = json.loads(spec_path.read_text())
    started = time.time()
    try:
        result = {"state": "complete", "reason": "", **body(spec)}
    except fault_type as fault:
        result = {"state": fault.state, "reason": fault.reason, **getattr(fault, "details", {})}
    except Exception as error:  # noqa: BLE001 - every failure becomes a recorded state
        if is_oom(error):
            result = {"state": "oom", "reason": f"out of memory: {str(error).splitlines()[0][:300]}"}
        else:
            tail = traceback.format_exc()[-STDERR_TAIL:]
            result = {"state": "crash", "reason": f"{error.__class__.__name__}: {error}"[:500], "traceback": tail}
    result.update(schema_version=1, wall_s=round(time.time() - started, 3))
    write_json_atomic(result_path, result)
    measurement = result.get("measurement") or {}
    summary = f"samples/s={measurement['samples_per_s']:.3f}" if "samples_per_s" in measurement else result["reason"]
    print(f"autotune runner: {result['state']} {summary}", flush=True)
    sys.exit(0 if result["state"] == "complete" else 1)
