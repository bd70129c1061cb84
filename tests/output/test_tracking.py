"""Tracking in MLflow: tunes write to a real local store (SQLite, as MLflow 3 recommends), read back with
MlflowClient: the tune is one parent run, each record of experiments.jsonl one nested run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.loop.test_resume import FACTORS, KilledAt
from tests.loop.test_tuner import TableExecutor

import autotune
from autotune import executors
from autotune.cli.main import main
from autotune.output.tune_result import result as tune_result, text
from autotune.workloads.jobs import job_from_words
from autotune.config.job_files import job_yaml
from autotune.output.records import RunFolder

ROOT = Path(__file__).resolve().parents[2]


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


def table_executor(monkeypatch, executor) -> None:
    """The tune's executor answers from the table (tests/loop/test_tuner.py): the CLI, the loop and the
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


def test_a_tune_is_a_parent_run_and_each_trial_a_nested_run(in_tmp, store, capfd, monkeypatch):
    """The cheapest real tune (a small MLP, one trial) with mlflow=: what the run folder holds, the store holds.
    On the fake clock (each config runs once for real): what is kept is not the subject here."""
    from fake_clock import install

    install(monkeypatch)
    job = autotune.job_from_dict("r", {"model": "mlp", "mlp_width": 64, "mlp_depth": 1, "smoke": True, "max_trials": 1,
                                       "mlflow": store, "mlflow_experiment": "real", "time": "30m"})
    outcome = autotune.tune(job, runs_dir=in_tmp / "runs")
    out, err = capfd.readouterr()
    result = json.loads(text(tune_result(job, outcome, outcome.best_config)))  # what `--json` prints
    assert "MLflow" not in out + err and "Warning" not in out + err, err
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
    # The fifth run: the baseline's runs and the first trial's are recorded, the second trial is running.
    table_executor(monkeypatch, KilledAt(FACTORS, at=5))
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
    autotune.tune(autotune.job_from_dict("r", {"model": "mlp", "max_trials": 2, "mlflow": f"http://127.0.0.1:{port}"}),
                  runs_dir=in_tmp / "runs")
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
    autotune.tune(autotune.job_from_dict("r", {"model": "mlp", "max_trials": 1}), runs_dir=in_tmp / "runs")
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
    ("databricks-uc", "expected an MLflow tracking URI"),  # a model registry, not a tracking store
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
    job = autotune.job_from_dict("first", {"model": "mlp", "mlflow": "sqlite:///mlflow.db", "mlflow_experiment": "x"})
    (in_tmp / "job.yaml").write_text(job_yaml(job))
    again, _ = job_from_words("second", [f"config={in_tmp / 'job.yaml'}"])
    assert again == dataclasses.replace(job, run="second") and again.tracking.mlflow == "sqlite:///mlflow.db"


def test_databricks_alone_is_a_tracking_uri(in_tmp, monkeypatch, capfd):
    """`databricks` (the default profile) is the usual value, in the key and in MLFLOW_TRACKING_URI."""
    _needs_mlflow()
    assert autotune.job_from_dict("r", {"model": "mlp", "mlflow": "databricks"}).tracking.mlflow == "databricks"
    assert autotune.job_from_dict("r", {"model": "mlp", "mlflow": "databricks://team"}).tracking.mlflow == "databricks://team"
    from autotune.output.tracking import trackers_for

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "databricks")
    job = autotune.job_from_dict("r", {"model": "mlp"})
    assert [tracker.uri for tracker in trackers_for(job)] == ["databricks"]
    assert capfd.readouterr().err == ""


def test_a_password_in_the_uri_is_never_printed_written_to_job_yaml_or_logged(in_tmp, monkeypatch, capfd):
    _needs_mlflow()
    for name in ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    assert main(["tune", "r", "model=mlp", "mlflow=ftp://me:s3cret@host"]) == 2
    err = capfd.readouterr().err
    assert "s3cret" not in err and "ftp://me:***@host" in err, err
    with socket.socket() as probe:  # a server that is down: the warning names the store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"http://me:s3cret@127.0.0.1:{port}"
    table_executor(monkeypatch, TableExecutor(FACTORS))
    autotune.tune(autotune.job_from_dict("r", {"model": "mlp", "max_trials": 1, "mlflow": uri}), runs_dir=in_tmp / "runs")
    err = capfd.readouterr().err
    assert "s3cret" not in err and f"MLflow tracking at http://me:***@127.0.0.1:{port} stopped" in err, err
    folder = in_tmp / "runs" / "r"
    assert "s3cret" not in (folder / "job.yaml").read_text() and "me:***@" in (folder / "job.yaml").read_text()
    assert json.loads((folder / "job.json").read_text())["mlflow"] == uri, "a resume still reaches the store"
    # Rerun from job.yaml: the hidden password is one line naming where it goes, unless it is set there.
    assert main(["tune", "r2", f"config={folder / 'job.yaml'}"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "MLFLOW_TRACKING_PASSWORD" in err, err
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
    assert job_from_words("r2", [f"config={folder / 'job.yaml'}"])[0].tracking.mlflow == f"http://me:***@127.0.0.1:{port}"


def test_credential_flags_of_script_args_reach_the_store_hidden(in_tmp):
    """`--hub_token X` in script_args: the store's params and its job.yaml hold ***, the run folder's the value."""
    from autotune.config.job import ScriptJob
    from autotune.output.tracking import job_params

    job = autotune.job_from_dict("r", {"model": "mlp"})
    job = dataclasses.replace(job, script=ScriptJob("train.py", args="--hub_token s3cret --tokenizer_name gpt2 "
                                                                     "--api-key=k3y password=pw --lr 1e-4"))
    shown = "--hub_token *** --tokenizer_name gpt2 --api-key=*** password=*** --lr 1e-4"
    assert job_params(job)["script_args"] == shown
    import yaml

    assert yaml.safe_load(job_yaml(job, shared=True))["script_args"] == shown
    assert yaml.safe_load(job_yaml(job))["script_args"] == job.script.args, "the run folder's reruns as it ran"


def test_a_failure_writing_the_report_ends_the_parent_failed(in_tmp, store, monkeypatch, capfd):
    from autotune.output import report

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "write_report", full_disk)
    table_executor(monkeypatch, TableExecutor(FACTORS))
    assert main(["tune", "r", "model=mlp", "max_trials=1", f"mlflow={store}", "mlflow_experiment=late"]) != 0
    parent, _ = tracked(store, "late")
    assert parent.info.status == "FAILED" and "No space left" in parent.data.tags["stop_reason"]


def test_a_tracked_tune_leaves_the_callers_environment_as_it_was(in_tmp, store, monkeypatch):
    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    job = autotune.job_from_dict("api", {"model": "mlp", "smoke": True, "max_trials": 1, "mlflow": store,
                                         "mlflow_experiment": "env", "mlp_width": 64, "mlp_depth": 1})
    table_executor(monkeypatch, TableExecutor(FACTORS))
    autotune.tune(job, runs_dir=in_tmp / "runs")
    assert tracked(store, "env")[0].info.status == "FINISHED"
    assert dict(os.environ) == before


# Both runs in one Python, its imports paid once: the store's tests without CI, then with CI=true, each
# run's output after its own marker line and its exit code on the line that ends it.
WITHOUT_MLFLOW = """
import os, sys
sys.modules["mlflow"] = None
import pytest
for ci in ("", "true"):
    if ci:
        os.environ["CI"] = ci
    print(f"== CI={ci} ==", flush=True)
    code = int(pytest.main(sys.argv[1:]))
    print(f"== exit {code} ==", flush=True)
"""


def _store_tests_without_mlflow() -> dict[str, tuple[int, str]]:
    """The store's tests in a Python where `import mlflow` fails, as on an install without the extra:
    {"": (exit code, output) without CI, "true": (...) with CI=true}."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run([sys.executable, "-c", WITHOUT_MLFLOW, "-q", "-rs", "-p", "no:cacheprovider", "-x", __file__,
                           "-k", "does_not_answer"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    runs = {}
    for part in done.stdout.split("== CI=")[1:]:
        ci, _, rest = part.partition(" ==\n")
        out, _, code = rest.rpartition("== exit ")
        runs[ci] = (int(code.split()[0]), out)
    assert set(runs) == {"", "true"}, done.stdout[-2000:] + done.stderr[-2000:]
    return runs


def test_without_the_client_the_store_tests_skip_naming_the_extra_and_fail_under_ci():
    runs = _store_tests_without_mlflow()
    code, out = runs[""]
    assert code == 0 and "skipped" in out and "failed" not in out, out
    assert 'pip install -e ".[mlflow]"' in out
    code, out = runs["true"]
    assert code != 0 and "mlflow is not installed" in out, out[-2000:]
