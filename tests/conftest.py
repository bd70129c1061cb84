"""Shared fixtures: tiny jobs and specs that run the real runner on the CPU in seconds."""

from __future__ import annotations

import random
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from autotune.executors import LocalExecutor
from autotune.workloads.jobs import job_from_dict
from autotune.config.knobs import Knobs

# Fast enough for unit tests of the runner: short rows, few of them.
TINY = {"model": "tiny-qwen2", "dataset": "synthetic", "max_len": 64, "effective_batch": 4, "smoke": True}
# The same job as `autotune tune` words, for the tests whose subject is the command line.
TINY_WORDS = [f"{key}={value}" for key, value in TINY.items() if key != "smoke"] + ["smoke"]


@pytest.fixture(scope="session")
def peak_cache(tmp_path_factory):
    """Measured device peaks shared by every test (measuring them takes seconds), nothing else."""
    return tmp_path_factory.mktemp("peaks") / "device_peaks.json"


@pytest.fixture(autouse=True)
def isolated_kb(tmp_path, peak_cache, monkeypatch):
    """Each test (and the tuners it starts) has its own knowledge base, out of the user's home: what one
    test's tuner learns must not steer another's."""
    folder = tmp_path / "kb"
    folder.mkdir()
    if peak_cache.exists():
        shutil.copy(peak_cache, folder / peak_cache.name)
    monkeypatch.setenv("AUTOTUNE_KB", str(folder))
    # A developer's MLflow server is no test's to write to: tracking is on only where a test turns it on.
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    yield folder
    if (folder / peak_cache.name).exists():
        shutil.copy(folder / peak_cache.name, peak_cache)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """A CLI run in a fresh working folder; the signal handlers `main()` installs are put back after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_RUNS", raising=False)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield tmp_path
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--order", default="file", metavar="file|random|SEED",
                     help="test order: file (as written), random (a fresh seed, printed in the header) or SEED (an "
                          "integer: that order again). Modules are shuffled, then the tests within each module, so "
                          "a module's fixtures are still set up once.")


def order_seed(config: Any) -> int | None:
    """The --order seed, None for file order. One seed per run: xdist's workers get the controller's,
    since each worker must collect the same order."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "order_seed" in workerinput:
        return workerinput["order_seed"]
    if not hasattr(config, "_order_seed"):
        value = config.getoption("--order")
        if value == "file":
            config._order_seed = None
        elif value == "random":
            config._order_seed = random.SystemRandom().randrange(10**6)
        elif value.isdigit():
            config._order_seed = int(value)
        else:
            raise pytest.UsageError(f"--order {value}: give file, random or an integer seed (--order 1234)")
    return config._order_seed


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["order_seed"] = order_seed(node.config)


def pytest_report_header(config: Any) -> str:
    seed = order_seed(config)
    return "test order: file" if seed is None else f"test order: random, seed {seed} (--order {seed} repeats it)"


def shuffled(items: list[Any], seed: int) -> list[Any]:
    """Modules in a seeded order, then each module's tests in a seeded order."""
    rng = random.Random(seed)
    modules: dict[str, list[Any]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    names = sorted(modules)
    rng.shuffle(names)
    out = []
    for name in names:
        group = modules[name]
        rng.shuffle(group)
        out += group
    return out


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    seed = order_seed(config)
    if seed is not None:
        items[:] = shuffled(items, seed)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip)


def tiny_job(run: str = "t", **keys: Any):
    """The tiny job with `keys` added or replaced, built through the library API (values as Python's)."""
    return job_from_dict(run, {**TINY, **keys})


def make_spec(tmp_path: Path, kind: str = "trial", job=None, knobs: Knobs | None = None, **fields: Any) -> dict:
    job = job or tiny_job()
    spec = {"schema_version": 1, "kind": kind, "runner": "hf", "job": job.to_dict(),
            "knobs": (knobs or job.start).to_dict(), "rows_path": str(tmp_path / "rows.json"),
            "model_config_path": str(tmp_path / "model_config.json"),
            "rows_needed": job.effective_batch * 6, "measure_steps": 3, "warmup_max": 2, "ceiling": False,
            "inject_fault": None}
    spec.update(fields)
    return spec


def run_runner(tmp_path: Path, spec: dict, name: str) -> dict:
    """The runner in a child process, as the tuner runs it (CPU only, whatever the machine has)."""
    return LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}).run(spec, tmp_path / name, timeout_s=300)


@pytest.fixture(scope="session")
def tiny_frame(tmp_path_factory) -> tuple[dict, Path]:
    """The tiny job's frame, run once per session: its facts and its rows file."""
    folder = tmp_path_factory.mktemp("tiny-frame")
    result = run_runner(folder, make_spec(folder, "frame"), "frame")
    assert result["state"] == "complete", result
    return result["frame"], folder / "rows.json"


@pytest.fixture
def framed(tmp_path: Path, tiny_frame):
    """Rows of the tiny job in tmp_path (trials read them from there); returns the frame facts.

    A job other than the default tiny one runs its own frame.
    """
    def make(job=None) -> dict:
        if job is None or job.to_dict() == tiny_job().to_dict():
            shutil.copy(tiny_frame[1], tmp_path / "rows.json")
            shutil.copy(tiny_frame[1].with_name("model_config.json"), tmp_path / "model_config.json")
            return tiny_frame[0]
        result = run_runner(tmp_path, make_spec(tmp_path, "frame", job=job), "frame")
        assert result["state"] == "complete", result
        return result["frame"]
    return make
