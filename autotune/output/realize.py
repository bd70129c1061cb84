"""The last step of a Hugging Face text tune: hand over files that ran.

A child process (workloads/hf/realize.py, in the trials' discipline: no CUDA in this process) writes what
the files name, builds `baseline_config.yaml` / `best_config.yaml` by the installed SFTConfig's names
and, unless the job says `realize=false`, runs both through `trl sft`, interleaved on the run's rows.
This process stores the outcome in `realized.json` (schema `realized`), which the report and `review` read.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence, TypedDict, cast

from ..util.io import write_json_atomic
from .records import RunFolder
from ..schemas import validate
from ..config.job import Job
from ..config.records import RecordLike, typed
from ..config.types import JsonObject, KnobConfig
from .documents import Realized

REALIZED = "realized.json"
# Each file's timed window (2N - N steps) lasts about this long at the loop's speed: long enough that
# the two runs' start-up differences are small beside it, short enough for a smoke run's five minutes.
WINDOW_S = {"smoke": 3.0, "full": 20.0}
MAX_STEPS = 400
ROUNDS = {"smoke": 1, "full": 2}
RUN_TIMEOUT_S = {"smoke": 150, "full": 1800}


class Candidate(TypedDict):
    """A config the child hands over if it runs: one of the spec's `candidates`."""

    trial: int
    knobs: KnobConfig
    steps: int  # N: the file runs N and 2N optimizer steps


def skip_reason(job: Job, frame: JsonObject) -> str:
    """Why the files are written but not run ('' when they run)."""
    if not job.realize:
        return "realize=false: the files were written, not run in `trl sft`"
    if (frame.get("model") or {}).get("vision"):
        return ("an image-text model: autotune's rows carry pre-processed image blocks, which `trl sft` does not "
                "take; the files were not run (for a preset or synthetic images they name a model and rows that "
                "only this run's trials had: point them at your model and image dataset)")
    if job.host != "local":
        return (f"trials ran on {job.host}: the files were written here, not run; run `trl sft --config FILE` there "
                "(its paths are this machine's)")
    return ""


def candidates(job: Job, stored: Sequence[RecordLike], best_trial: int) -> list[Candidate]:
    """The kept configs from the best back, then the baseline, each with its N steps."""
    records = typed(stored)
    kept = [r for r in records if r.decision == "keep" and r.trial <= best_trial]
    mode = "smoke" if job.smoke else "full"
    chosen: list[Candidate] = []
    for record in [*reversed(kept), records[0]]:
        speed = record.samples_per_s or 0.0
        step_s = job.effective_batch / speed if speed > 0 else WINDOW_S[mode]
        steps = max(2, min(MAX_STEPS, math.ceil(WINDOW_S[mode] / step_s)))
        chosen.append({"trial": record.trial, "knobs": dict(record.knobs), "steps": steps})
    return chosen


def hand_over(folder: RunFolder, job: Job, executor: Any, outcome: Any) -> Realized | None:
    """Run the child and store `realized.json`; None for jobs whose hand-over is not a TRL file."""
    if job.is_mlp or job.script is not None:
        return None
    from ..executors.local import LocalExecutor

    frame = outcome.frame
    reason = skip_reason(job, frame)
    mode = "smoke" if job.smoke else "full"
    chain = candidates(job, outcome.records, outcome.best.trial)
    run_path = folder.path.resolve()
    spec = {"schema_version": 1, "kind": "realize", "runner": "realize", "job": job.to_dict(),
            "knobs": job.start.to_dict(), "rows_path": str(folder.rows.resolve()),
            "model_config_path": str(folder.model_config.resolve()), "run_path": str(run_path),
            "work_dir": str(folder.trial_dir("realize").resolve() / "work"), "candidates": chain,
            "rounds": ROUNDS[mode], "realize": not reason, "skip_reason": reason,
            "cpu": (frame.get("device") or {}).get("kind") != "cuda", "run_timeout_s": RUN_TIMEOUT_S[mode],
            "offline": job.is_preset or job.smoke or job.weights == "random"}
    runs = 2 + 4 * ROUNDS[mode] + len(chain)
    local = executor if job.host == "local" and hasattr(executor, "run") else LocalExecutor()
    result = local.run(spec, folder.trial_dir("realize"), 300 + runs * RUN_TIMEOUT_S[mode])
    record: JsonObject = {"schema_version": 1, "loop_best_trial": outcome.best.trial, "loop_speedup": outcome.speedup}
    if result["state"] != "complete":
        record.update(state="failed", reason=f"the hand-over step ended {result['state']}: {result['reason']}"[:600])
    else:
        realized = result["realized"]
        best_trial = realized.get("best_trial", outcome.best.trial)
        knobs = next(c["knobs"] for c in chain if c["trial"] == best_trial)
        record.update({k: v for k, v in realized.items()}, best_trial=best_trial, best_knobs=knobs,
                      configs={"baseline": result["files"]["0"], "best": result["files"][str(best_trial)]},
                      kwargs={"baseline": result["kwargs"]["0"], "best": result["kwargs"][str(best_trial)]},
                      steps={str(c["trial"]): c["steps"] for c in chain})
    validate("realized", record, str(folder.path / REALIZED))
    write_json_atomic(folder.path / REALIZED, record)
    return cast(Realized, record)  # what the schema just accepted


def read(folder: RunFolder) -> Realized | None:
    path = folder.path / REALIZED
    return cast(Realized, json.loads(path.read_text())) if path.exists() else None  # checked when written


def summary(record: Realized | None) -> str:
    """One line: the realized speed-up in `trl sft` beside the loop's, or why there is none."""
    if not record:
        return ""
    loop = record.get("loop_speedup")
    refused = "".join(f"; trial {r['trial']}'s file was refused: {r['error']}" for r in record.get("refused", []))
    if record["state"] == "complete" and "baseline_samples_per_s" not in record:
        return f"realized in `trl sft`: {record['reason']}{refused}"
    if record["state"] != "complete":
        return f"realized in `trl sft`: not measured ({record.get('reason') or 'no timed runs'}){refused}"
    share = f", {record['speedup'] / loop:.2f} of the loop's" if loop else ""
    return (f"realized in `trl sft`: baseline {record['baseline_samples_per_s']:.3f} samples/s, best (trial "
            f"{record['best_trial']}) {record['best_samples_per_s']:.3f} samples/s, **x{record['speedup']:.2f}** "
            f"beside the loop's x{loop:.2f}{share}{refused}")
