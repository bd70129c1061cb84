"""Tracking in MLflow: tunes write to a real local store (SQLite, as MLflow 3 recommends), read back with
MlflowClient: the tune is one parent run, each record of experiments.jsonl one nested run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_resume import FACTORS, KilledAt
from test_tuner import TableExecutor

from autotune import executors
from autotune.cli import main
from autotune.job import job_from_words
from autotune.job_files import job_yaml
from autotune.records import RunFolder

ROOT = Path(__file__).resolve().parents[1]


def _needs_mlflow() -> None:
    if importlib.util.find_spec("mlflow") is None:
        if os.environ.get("CI") == "true":
            pytest.fail('mlflow is not installed; CI installs .[dev], which holds it')
        pytest.skip('needs the mlflow client: pip install -e ".[mlflow]"')


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One SQLite store for the module (making its tables takes seconds); each test has its own experiment."""
    _needs_mlflow()
    return "sqlite:///" + str(tmp_path_factory.mktemp("mlflow") / "mlflow.db")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_RUNS", raising=False)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield tmp_path
    for signum, handler in handlers.items():  # main() installs its own; pytest's come back
        signal.signal(signum, handler)


def table_executor(monkeypatch, executor) -> None:
    """The tune's executor answers from the table (tests/test_tuner.py): the CLI, the loop and the
    tracking are real, the measurements instant."""
    monkeypatch.setattr(executors, "get_executor", lambda *args, **kwargs: executor)


def tracked(store: str, experiment: str) -> tuple[object, list]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == len(runs) - 1
    return parents[0], children


def test_a_tune_is_a_parent_run_and_each_trial_a_nested_run(in_tmp, store, capfd):
    """The cheapest real tune (a small MLP, one trial) with mlflow=: what the run folder holds, the store holds."""
    argv = ["tune", "r", "model=mlp", "mlp_width=64", "mlp_depth=1", "smoke", "max_trials=1", f"mlflow={store}", "mlflow_experiment=real", "--json"]
    assert main(argv) == 0
    out, err = capfd.readouterr()
    result = json.loads(out)
    assert "MLflow" not in err and "Warning" not in err, err
    folder = RunFolder(in_tmp / "runs", "r")
    records = folder.read_experiments()
    parent, children = tracked(store, "real")
    trials = {int(child.data.tags["trial"]): child for child in children}
    assert sorted(trials) == [r["trial"] for r in records] and len(records) == 2
    for record in records:
        child = trials[record["trial"]]
        tags, params, metrics = child.data.tags, child.data.params, child.data.metrics
        assert (tags["state"], tags["decision"], tags["reason"]) == (record["state"], record["decision"], record["reason"])
        assert child.info.status == "FINISHED"
        assert params == {**{k: str(v) for k, v in record["knobs"].items()},
                          "change": record["change"] or "none (the user's config)"}
        assert metrics["samples_per_s"] == pytest.approx(record["samples_per_s"])
        assert metrics["tokens_per_s"] == pytest.approx(record["tokens_per_s"])
        assert metrics["peak_memory_bytes"] == record["peak_memory_bytes"]
        assert metrics["runs"] == len(record["measurements"]) and 0 < metrics["mfu"] < 1
        if record["ratio"] is not None:
            assert metrics["ratio"] == pytest.approx(record["ratio"])
            assert [metrics["interval_low"], metrics["interval_high"]] == pytest.approx(record["interval"])
    assert trials[0].info.run_name == "baseline" and trials[1].info.run_name == f"trial 1: {records[1]['change']}"
    tags, params, metrics = parent.data.tags, parent.data.params, parent.data.metrics
    assert parent.info.status == "FINISHED" and parent.info.run_name == "r"
    frame = json.loads(folder.frame.read_text())
    assert (tags["run"], tags["stop_reason"], tags["device"]) == ("r", result["stop_reason"], frame["device"]["name"])
    assert (params["model"], params["max_trials"], params["mlp_width"]) == ("mlp", "1", "64")
    assert not any(key.startswith("mlflow") for key in params), "the store's URI is not logged into the store"
    assert metrics["baseline_samples_per_s"] == pytest.approx(result["baseline_samples_per_s"])
    assert metrics["best_samples_per_s"] == pytest.approx(result["best_samples_per_s"])
    assert metrics["speedup"] == pytest.approx(result["speedup"])
    if result["speedup_interval"]:
        assert [metrics["speedup_low"], metrics["speedup_high"]] == pytest.approx(result["speedup_interval"])

    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    # The progress curve: the incumbent's speed after each record, at its trial number.
    history = client.get_metric_history(parent.info.run_id, "incumbent_samples_per_s")
    assert [point.step for point in history] == [0, 1]
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "experiments.jsonl", "best_config.json", "results.tsv", "job.yaml", "tune_result.json"} <= names
    plots = {a.path for a in client.list_artifacts(parent.info.run_id, "plots")}
    assert "plots/progress.png" in plots
    local = client.download_artifacts(parent.info.run_id, "tune_result.json", str(in_tmp))
    assert json.loads(open(local).read()) == result
    local = client.download_artifacts(parent.info.run_id, "experiments.jsonl", str(in_tmp / "copy"))
    assert open(local).read() == folder.experiments.read_text()
    # Beside the store's file, not under wherever autotune was started.
    assert not (in_tmp / "mlruns").exists()


def test_a_resume_logs_what_the_store_lacks_and_nothing_twice(in_tmp, store, monkeypatch, capfd):
    """MLFLOW_TRACKING_URI turns tracking on without the key. Records reach the store as they are written
    (a killed tune's are there); the resume finds its parent and adds only the records it lacks."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    table_executor(monkeypatch, KilledAt(FACTORS, at=10))
    assert main(["tune", "r", "model=mlp", "max_trials=5", "mlflow_experiment=resume"]) == 130
    killed = RunFolder(in_tmp / "runs", "r").read_experiments()
    parent, children = tracked(store, "resume")
    assert parent.info.status == "KILLED" and len(children) == len(killed) >= 2
    assert parent.data.tags["stop_reason"].startswith("interrupted")
    # A kill between the run folder's append and the store's: the store lacks the last record.
    client = MlflowClient(store)
    lost = max(children, key=lambda run: int(run.data.tags["trial"]))
    client.delete_run(lost.info.run_id)
    kept_ids = {run.info.run_id for run in children} - {lost.info.run_id}

    table_executor(monkeypatch, TableExecutor(FACTORS))
    assert main(["tune", "r", "resume"]) == 0
    records = RunFolder(in_tmp / "runs", "r").read_experiments()
    again, children = tracked(store, "resume")
    assert again.info.run_id == parent.info.run_id and again.info.status == "FINISHED"
    assert again.data.tags["stop_reason"] == "max_trials=5 reached"
    assert len(records) > len(killed)
    assert sorted(int(run.data.tags["trial"]) for run in children) == [r["trial"] for r in records]
    assert kept_ids <= {run.info.run_id for run in children}, "a record the store held was logged again"
    assert "MLflow" not in capfd.readouterr().err


def test_a_store_that_does_not_answer_is_one_warning_and_the_tune_completes(in_tmp, monkeypatch, capfd):
    _needs_mlflow()
    with socket.socket() as probe:  # a port nothing listens on: the server is down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    table_executor(monkeypatch, TableExecutor(FACTORS))
    assert main(["tune", "r", "model=mlp", "max_trials=2", f"mlflow=http://127.0.0.1:{port}"]) == 0
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines() if "MLflow" in line]
    assert len(warnings) == 1 and f"127.0.0.1:{port} stopped; the tune goes on" in warnings[0], err
    folder = RunFolder(in_tmp / "runs", "r")
    assert len(folder.read_experiments()) == 3 and folder.report.exists()


def test_without_the_client_the_key_is_one_line_exit_2_and_the_variable_a_warning(in_tmp, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what an install without the extra has: no module
    assert main(["tune", "r", "model=mlp", "mlflow=sqlite:///mlflow.db"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and 'pip install -e ".[mlflow]"' in err and err.startswith("autotune: mlflow=")
    assert not (in_tmp / "runs").exists() and not (in_tmp / "mlflow.db").exists()
    # Set for other tools, the variable does not stop a tune: it runs untracked, saying so once.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    table_executor(monkeypatch, TableExecutor(FACTORS))
    assert main(["tune", "r", "model=mlp", "max_trials=1"]) == 0
    err = capfd.readouterr().err
    assert [line for line in err.splitlines() if "mlflow" in line.lower()] == [
        'autotune: MLFLOW_TRACKING_URI=sqlite:///mlflow.db: the mlflow client is not installed; '
        'pip install -e ".[mlflow]"; this tune is not tracked in MLflow']


@pytest.mark.parametrize("uri, says", [
    ("ftp://host/x", "expected an MLflow tracking URI"),
    ("mlruns", "expected an MLflow tracking URI"),
    ("http://", "no host"),
    ("sqlite:///no/such/folder/mlflow.db", "no folder no/such/folder"),
    ("sqlite://mlflow.db", "three slashes"),
    ("file:///tmp/mlruns", "MLflow 3 refuses file stores"),
])
def test_a_uri_of_the_wrong_shape_is_one_line_exit_2(in_tmp, capfd, uri, says):
    assert main(["tune", "r", "model=mlp", f"mlflow={uri}"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"autotune: mlflow={uri!r}") and says in err, err
    assert not (in_tmp / "runs").exists()


def test_the_experiment_goes_with_a_uri_and_job_yaml_keeps_both(in_tmp, capfd):
    assert main(["tune", "r", "model=mlp", "mlflow_experiment=x"]) == 2
    assert "mlflow_experiment goes with mlflow=URI" in capfd.readouterr().err
    _needs_mlflow()
    job, _ = job_from_words("first", ["model=mlp", "mlflow=sqlite:///mlflow.db", "mlflow_experiment=x"])
    (in_tmp / "job.yaml").write_text(job_yaml(job))
    again, _ = job_from_words("second", [f"config={in_tmp / 'job.yaml'}"])
    assert again == dataclasses.replace(job, run="second") and again.mlflow == "sqlite:///mlflow.db"


def _store_tests_without_mlflow(ci: bool) -> subprocess.CompletedProcess:
    """The store's tests in a Python where `import mlflow` fails, as on an install without the extra."""
    code = "import sys; sys.modules['mlflow'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-c", code, "-q", "-rs", "-p", "no:cacheprovider", "-x", __file__,
                           "-k", "does_not_answer"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_without_the_client_the_store_tests_skip_naming_the_extra_and_fail_under_ci():
    result = _store_tests_without_mlflow(ci=False)
    assert result.returncode == 0 and "skipped" in result.stdout and "failed" not in result.stdout, result.stdout
    assert 'pip install -e ".[mlflow]"' in result.stdout
    result = _store_tests_without_mlflow(ci=True)
    assert result.returncode != 0 and "mlflow is not installed" in result.stdout, result.stdout[-2000:]
