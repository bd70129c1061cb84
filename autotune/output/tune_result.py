"""The one JSON object `autotune tune ... --json` prints at the end (schemas/tune_result.json): what a
script or CI acts on, validated before it is printed so a consumer never parses a malformed one.

Exit codes of `autotune tune`: 0 done, 1 error, 2 bad input, 3 no change kept (with --fail-if-no-gain),
130 interrupted (Ctrl-C, SIGTERM, SIGHUP).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ..config.job import Job
from ..config.records import TrialRecord
from ..config.types import JsonObject
from ..util.errors import AutotuneError
from .documents import RealizedVerdict, TuneResult

EXIT_CODES = {0: "done", 1: "error", 2: "bad input", 3: "no change kept (with --fail-if-no-gain)",
              130: "interrupted (Ctrl-C, SIGTERM, SIGHUP); the trials recorded so far stay in the run folder"}
NO_GAIN_EXIT = 3


def _interval(kept: Sequence[TrialRecord]) -> list[float] | None:
    """The kept changes' intervals multiplied, as the report states it; [1, 1] when nothing was kept."""
    if any(not r.interval for r in kept):
        return None
    low = high = 1.0
    for one_low, one_high in filter(None, (r.interval for r in kept)):
        low, high = low * one_low, high * one_high
    return [low, high]


def _realized(path: Path) -> RealizedVerdict | None:
    """runs/RUN/realized.json's verdict, where the hand-over step wrote one."""
    from ..util.errors import RecordError
    from ..config.inputs import read_json

    record = read_json(path / "realized.json", "realized.json", RecordError) if (path / "realized.json").exists() else None
    if not isinstance(record, dict):
        return None
    return {"state": record["state"], "reason": record.get("reason", ""), "speedup": record.get("speedup")}


def result(job: Job, outcome: Any, config: JsonObject) -> TuneResult:
    """The object for `job`'s finished (or reviewed) run; `outcome`: the loop's Outcome, `config`:
    best_config.json's content."""
    path = Path(outcome.folder).resolve()
    kept = [r for r in outcome.records if r.decision == "keep"]
    files = {"folder": str(path), "report": str(path / "report.md"), "results": str(path / "results.tsv"),
             "best_config": str(path / "best_config.json"), "job": str(path / "job.yaml")}
    for name in ("best_config.yaml", "baseline_config.yaml", "realized.json"):
        if (path / name).exists():
            files[name.replace(".", "_")] = str(path / name)
    best = outcome.best.knobs
    data: TuneResult = {"schema_version": 1, "run": job.run, "stop_reason": outcome.stop_reason,
            "trials": len(outcome.records) - 1, "kept": [str(r.change) for r in kept],
            "best_trial": outcome.best.trial, "best_knobs": best.to_dict(),
            "changes": {name: mine for name, (mine, _) in best.diff(job.start).items()},
            "baseline_samples_per_s": outcome.baseline.get("samples_per_s"),
            "best_samples_per_s": outcome.best_speed, "speedup": outcome.speedup,
            "speedup_interval": _interval(kept), "realized": _realized(path),
            "device_runs": outcome.device_runs, "device_s": round(outcome.device_s, 1),
            "files": files, "command": config["command"]}
    from ..schemas import violation

    problem = violation("tune_result", data)
    if problem:
        raise AutotuneError(f"the --json result of run {job.run} is {problem}; the run folder holds the results")
    return data


def text(data: TuneResult) -> str:
    return json.dumps(data, sort_keys=False)
