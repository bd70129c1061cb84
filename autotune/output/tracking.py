"""Tracking in MLflow (mlflow=URI, or MLFLOW_TRACKING_URI): the tune is a parent run, every record of
experiments.jsonl a nested run, logged as it is appended; the report, plots, configs, records and the
--json result are the parent's artifacts at the end. The only module that imports mlflow, lazily.

The run folder is the source of truth; the store is a view of it. A failing store (a server down, a
URI that does not answer) is one warning line, then the tune goes on untracked. A resume finds its
parent by the run folder's id and logs the records the store lacks, never one twice.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..config.job import Job
from ..config.records import TrialRecord
from ..config.types import JsonObject
from ..util.errors import JobError
from .documents import TuneResult
from ..config.job_values import MLFLOW_MISSING, check_mlflow_uri, redact_uri

DEFAULT_EXPERIMENT = "autotune"
RUN_ID_TAG = "autotune.run_id"       # the parent's: state.json's run id, the same across resumes
TRIAL_TAG = "trial"                   # a nested run's: its record's trial number (0 is the baseline)
PARENT_TAG = "mlflow.parentRunId"     # what makes a run nested in MLflow's UI and API
# The files of runs/RUN/ that become the parent's artifacts, where the run wrote them.
ARTIFACTS = ("report.md", "best_config.yaml", "baseline_config.yaml", "best_config.json", "experiments.jsonl",
             "results.tsv", "realized.json", "job.yaml")
PLOTS = ("*.png", "*.svg")
SHARED = ("job.yaml",)  # artifacts written for the store, not copied: credentials in script_args hidden
# A server that is down must cost the tune seconds, not MLflow's default minutes of retries (7 retries,
# backoff factor 2, 120 s timeout). A user's own settings win; these are set only while the tracker's own
# calls run (MLflow reads them per request), so a caller's process keeps its environment.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
# Figures of a record logged as a nested run's metrics, where the record holds a number.
RECORD_METRICS = ("samples_per_s", "tokens_per_s", "peak_memory_bytes", "ratio", "confidence", "noise_floor",
                  "incumbent_samples_per_s", "wall_s")
MAX_PARAM = 6000   # MLflow's longest param value
MAX_TAG = 8000     # and tag value
BATCH = 100        # params and tags in one log_batch


def _say(text: str) -> None:
    """One line on stderr, as the CLI's own; a live display redirects it above its line."""
    print(f"autotune: {text}", file=sys.stderr, flush=True)


def trackers_for(job: Any) -> list[Any]:
    """The observers of a tune's records: an MLflow tracker where mlflow= or MLFLOW_TRACKING_URI names a
    store, none otherwise. A bad MLFLOW_TRACKING_URI (or no client) is a warning: the user did not ask this
    tune for tracking in its words, so it runs untracked rather than not at all."""
    uri = job.tracking.mlflow
    if not uri:
        uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        if not uri:
            return []
        try:
            check_mlflow_uri(uri, "MLFLOW_TRACKING_URI")
        except JobError as error:
            _say(f"{error}; this tune is not tracked in MLflow")
            return []
    else:
        try:
            check_mlflow_uri(uri, "mlflow")  # checked when the job was read; a resume may run elsewhere
        except JobError as error:
            if MLFLOW_MISSING in str(error):
                raise  # the key asks for tracking and nothing can track: one line, exit 2
            _say(f"{error}; this tune is not tracked in MLflow")
            return []
    experiment = job.tracking.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME", "").strip() or DEFAULT_EXPERIMENT
    return [MlflowTracker(uri, experiment)]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def record_metrics(record: TrialRecord) -> dict[str, float]:
    """A record's measurements as metrics: its figures, the interval on its ratio, the median MFU of its runs."""
    metrics = {name: _number(record.get(name)) for name in RECORD_METRICS}  # as stored: some are not typed fields
    low, high = record.interval or (None, None)
    metrics.update(interval_low=_number(low), interval_high=_number(high))
    measurements = record.measurements
    mfus = (_number(m.rest.get("mfu")) for m in measurements)  # MFU: the measurement's own figure, untyped
    metrics["mfu"] = _median([mfu for mfu in mfus if mfu is not None])
    metrics["runs"] = float(len(measurements))
    return {name: value for name, value in metrics.items() if value is not None}


def job_params(job: Any) -> dict[str, str]:
    """The job's keys as a job file holds them; the store's own URI stays out of the store, and so do the
    values of credential flags in script_args (`--hub_token X` is logged as `--hub_token ***`)."""
    from ..config.job_files import job_mapping

    mapping = job_mapping(job, shared=True)
    return {key: str(value)[:MAX_PARAM] for key, value in mapping.items() if not key.startswith("mlflow")}


@contextmanager
def _http_defaults() -> Iterator[None]:
    """HTTP_DEFAULTS in the environment for the block, where the user set none; as it was after."""
    added = [name for name in HTTP_DEFAULTS if name not in os.environ]
    os.environ.update({name: HTTP_DEFAULTS[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


class MlflowTracker:
    """One tune's runs in one MLflow store. Every call is guarded: the first failure warns and ends the
    tracking for this tune."""

    def __init__(self, uri: str, experiment: str) -> None:
        self.uri, self.experiment = uri, experiment
        self.shown = redact_uri(uri)     # the URI as messages name it: no password
        self.client: Any = None
        self.experiment_id = ""
        self.parent = ""                 # the parent run's id, once opened
        self.logged: set[int] = set()    # trial numbers with a nested run in the store
        self.off = False

    @contextmanager
    def _guard(self, tuner: Any) -> Iterator[None]:
        """MLflow's failures (and its deprecation warnings and INFO lines) kept off the tune."""
        try:
            with warnings.catch_warnings(), _http_defaults():
                warnings.simplefilter("ignore")
                yield
        except Exception as error:  # noqa: BLE001 - a store's failure of any kind must not end the tune
            self.off = True
            why = " ".join(str(error).split()).replace(self.uri, self.shown)
            why = why if len(why) <= 200 else why[:197] + "..."
            # The why goes last: a store's message (a URL, a stack of causes) is long, the line's point is not.
            _say(f"MLflow tracking at {self.shown} stopped; the tune goes on and {tuner.folder.path} holds every "
                 f"result ({type(error).__name__}: {why})")

    # -- the tuner's calls --------------------------------------------------------------------
    def trial(self, tuner: Any, record: JsonObject) -> None:
        """A record was appended to experiments.jsonl: it (and any the store lacks) becomes a nested run."""
        if self.off:
            return
        with self._guard(tuner):
            self._sync(tuner)

    def finish(self, tuner: Any, job: Job, outcome: Any, config: JsonObject) -> None:
        """The tune ended and its outputs are written: the summary, the artifacts, the parent FINISHED."""
        if self.off:
            return
        with self._guard(tuner):
            self._sync(tuner)
            from .tune_result import result

            summary = result(job, outcome, config)
            self._log(self.parent, metrics=self._summary_metrics(summary),
                      tags={"stop_reason": outcome.stop_reason, "device": outcome.frame["device"].get("name", ""),
                            "best_trial": str(summary["best_trial"]), "kept": ", ".join(summary["kept"]) or "none"})
            folder = Path(tuner.folder.path)
            for name in ARTIFACTS:
                if name in SHARED:
                    from ..config.job_files import job_yaml

                    self.client.log_text(self.parent, job_yaml(job, shared=True), name)
                elif (folder / name).is_file():
                    self.client.log_artifact(self.parent, str(folder / name))
            for pattern in PLOTS:
                for plot in sorted(folder.glob(pattern)):
                    self.client.log_artifact(self.parent, str(plot), "plots")
            self.client.log_dict(self.parent, summary, "tune_result.json")
            self.client.set_terminated(self.parent, "FINISHED")

    def stopped(self, tuner: Any, error: BaseException) -> None:
        """The tune ended early (an interrupt, an error): the parent says so; a resume reopens it."""
        if self.off or not self.parent:
            return
        with self._guard(tuner):
            self._sync(tuner)
            interrupted = isinstance(error, KeyboardInterrupt)
            why = " ".join(str(error).split()) or type(error).__name__
            self._log(self.parent, tags={"stop_reason": (f"interrupted ({why})" if interrupted else why)[:MAX_TAG]})
            self.client.set_terminated(self.parent, "KILLED" if interrupted else "FAILED")

    # -- the store ----------------------------------------------------------------------------
    def _open(self, tuner: Any) -> None:
        """The client, the experiment and the parent: the one this run folder opened before, or a new one."""
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."
        self.client = MlflowClient(tracking_uri=self.uri)
        found = self.client.get_experiment_by_name(self.experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(
            self.experiment, artifact_location=self._artifact_location())
        run_id = tuner.memory.run_id
        parents = self.client.search_runs([self.experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1)
        if parents:
            self.parent = parents[0].info.run_id
            self.client.update_run(self.parent, "RUNNING")
            self.logged = {int(run.data.tags[TRIAL_TAG]) for run in self._children() if TRIAL_TAG in run.data.tags}
            return
        job = tuner.job
        tags = {RUN_ID_TAG: run_id, "run": job.run, "folder": str(Path(tuner.folder.path).resolve()),
                "model": job.model, "gpu": job.gpu}
        self.parent = self.client.create_run(self.experiment_id, tags=tags, run_name=job.run).info.run_id
        self._log(self.parent, params=job_params(job))

    def _artifact_location(self) -> str | None:
        """Beside a SQLite file the tune names: MLflow's default is ./mlruns under wherever autotune started."""
        if not self.uri.startswith("sqlite:///"):
            return None  # a server or database decides where its artifacts go
        return (Path(self.uri[len("sqlite:///"):]).expanduser().resolve().parent / "mlruns").as_uri()

    def _children(self) -> list[Any]:
        runs, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], f"tags.`{PARENT_TAG}` = '{self.parent}'",
                                           max_results=1000, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def _sync(self, tuner: Any) -> None:
        if self.client is None:
            self._open(tuner)
        new: list[TrialRecord] = [record for record in tuner.records if record.trial not in self.logged]
        for record in new:
            self._log_record(record)
        best = self._best(tuner.records)
        if new and best is not None:  # the progress curve: one point per record, at its trial number
            self._log(self.parent, metrics={"incumbent_samples_per_s": best}, step=new[-1].trial)

    @staticmethod
    def _best(records: list[TrialRecord]) -> float | None:
        """The speed of the config the loop builds on after these records: the last kept, else the baseline."""
        chain = [r for r in records if r.decision in ("baseline", "keep")]
        return _number(chain[-1].samples_per_s) if chain else None

    def _log_record(self, record: TrialRecord) -> None:
        trial = record.trial
        name = "baseline" if record.decision == "baseline" else f"trial {trial}: {record.change}"
        tags = {PARENT_TAG: self.parent, TRIAL_TAG: str(trial), "state": record.state,
                "decision": record.decision, "reason": record.reason[:MAX_TAG],
                "mlflow.note.content": record.reason[:MAX_TAG]}
        if record.get("replayed_from"):
            tags["replayed_from"] = str(record["replayed_from"])
        child = self.client.create_run(self.experiment_id, tags=tags, run_name=name[:250]).info.run_id
        params = {knob: str(value) for knob, value in record.knobs.items()}
        params["change"] = str(record.change or "none (the user's config)")
        self._log(child, params=params, metrics=record_metrics(record))
        failed = record.state not in ("complete", "replayed")
        self.client.set_terminated(child, "FAILED" if failed else "FINISHED")
        self.logged.add(trial)

    @staticmethod
    def _summary_metrics(summary: TuneResult) -> dict[str, float]:
        metrics = {"baseline_samples_per_s": summary["baseline_samples_per_s"],
                   "best_samples_per_s": summary["best_samples_per_s"], "speedup": summary["speedup"],
                   "trials": summary["trials"]}
        if summary["speedup_interval"]:
            metrics.update(speedup_low=summary["speedup_interval"][0], speedup_high=summary["speedup_interval"][1])
        realized = summary["realized"]
        if realized and realized.get("speedup") is not None:
            metrics["realized_speedup"] = realized["speedup"]
        return {name: value for name, value in ((n, _number(v)) for n, v in metrics.items()) if value is not None}

    def _log(self, run_id: str, params: dict[str, str] | None = None, metrics: dict[str, float] | None = None,
             tags: dict[str, str] | None = None, step: int = 0) -> None:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.utils.time import get_current_time_millis

        now = get_current_time_millis()
        items = ([Param(k, v) for k, v in (params or {}).items()], [RunTag(k, v) for k, v in (tags or {}).items()])
        metric_items = [Metric(k, v, now, step) for k, v in (metrics or {}).items()]
        params_left, tags_left = items
        while params_left or tags_left or metric_items:
            self.client.log_batch(run_id, metrics=metric_items, params=params_left[:BATCH], tags=tags_left[:BATCH])
            params_left, tags_left, metric_items = params_left[BATCH:], tags_left[BATCH:], []
