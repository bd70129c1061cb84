"""The console entry point rejects bad jobs with one clear line, exit code 2, and no run folder.

The table of bad jobs runs `main()` in this process (a fresh interpreter per case cost seconds each, 30
times); help, version, a refused run name and the LLM check go through the real console script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import autotune
from autotune.config.job_keys import JOB_KEYS
from autotune.config.knobs import CATALOG

REPO = Path(__file__).resolve().parents[2]
VALID = {"model": "tiny-qwen2", "dataset": "synthetic", "max_len": "64", "effective_batch": "4"}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def autotune_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli.main", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=60)


def autotune_here(cwd: Path, capsys, *args: str) -> subprocess.CompletedProcess:
    """`autotune ARGS` as `main()` in this process, run in `cwd`; what it wrote, as the console's result.
    An exception out of main() fails the test as a traceback on stderr would."""
    from autotune.cli.main import main

    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)


def job_words(drop: tuple[str, ...] = (), **override: str) -> list[str]:
    """The valid job, minus `drop`, with `override` replacing or adding keys."""
    values = {k: v for k, v in VALID.items() if k not in drop}
    values.update(override)
    return [f"{k}={v}" for k, v in values.items()]


# (id, words, key the message must name, further text the message must hold)
BAD_JOBS = [
    ("unknown-key", job_words() + ["foo=1"], "foo", None),
    ("missing-model", job_words(drop=("model",)), "model", "smoke"),
    ("missing-dataset", job_words(drop=("dataset",)), "dataset", None),
    ("missing-max_len", job_words(drop=("max_len",)), "max_len", None),
    ("missing-effective_batch", job_words(drop=("effective_batch",)), "effective_batch", None),
    ("max_len-zero", job_words(max_len="0"), "max_len", None),
    ("effective_batch-not-a-number", job_words(effective_batch="abc"), "effective_batch", "abc"),
    ("dataset-missing-file", job_words(dataset="missing.jsonl"), "dataset", "missing.jsonl"),
    ("model-missing-folder", job_words(model="./nope/model"), "model", "./nope/model"),
    ("time-words", job_words(time="5 minutes"), "time", "5 minutes"),
    ("time-abc", job_words(time="abc"), "time", "abc"),
    ("time-zero", job_words(time="0s"), "time", None),
    ("host-spaces", job_words(host="not a host"), "host", "not a host"),
    ("host-double-at", job_words(host="bad@@host"), "host", "bad@@host"),
    ("repeated-key", job_words() + ["max_len=512", "max_len=1024"], "max_len", "twice"),
    ("micro-does-not-divide", job_words(effective_batch="16", per_device_train_batch_size="3"),
     "per_device_train_batch_size", "effective_batch=16"),
    ("method-ppo", job_words(method="ppo"), "method", "ppo"),
    ("knob-bad-choice", job_words(padding="zero"), "padding", "zero"),
    ("knob-bad-bool", job_words(group_by_length="maybe"), "group_by_length", "maybe"),
    ("knob-bad-int", job_words(dataloader_num_workers="two"), "dataloader_num_workers", "two"),
    ("max_trials-zero", job_words(max_trials="0"), "max_trials", None),
    ("accumulation-does-not-divide", job_words(effective_batch="16", gradient_accumulation_steps="3"),
     "gradient_accumulation_steps", None),
    ("stray-word", job_words() + ["fast"], "fast", None),
    ("empty-value", job_words(gpu=""), "gpu", None),
    ("only-not-a-knob", job_words(only="padding,max_len"), "only", "max_len is not a knob"),
    ("llm_timeout-alone", job_words(llm_timeout="10s"), "llm_timeout", "llm=MODEL"),
    ("llm_timeout-words", job_words(llm="m", llm_timeout="soon"), "llm_timeout", "soon"),
]


def assert_rejected(result: subprocess.CompletedProcess, cwd: Path, key: str, also: str | None) -> str:
    combined = result.stdout + result.stderr
    assert "Traceback" not in combined, combined
    assert result.returncode == 2, (result.returncode, combined)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    line = lines[0]
    assert line.strip() and line.startswith("autotune:"), line
    assert key in line, f"{key!r} not named in {line!r}"
    if also is not None:
        assert also in line, f"{also!r} not in {line!r}"
    assert not (cwd / "runs").exists(), "a rejected job must not create a run folder"
    return line


@pytest.mark.parametrize("words, key, also", [case[1:] for case in BAD_JOBS], ids=[case[0] for case in BAD_JOBS])
def test_bad_job_is_one_line_exit_2_and_no_run_folder(in_tmp, capsys, words, key, also):
    result = autotune_here(in_tmp, capsys, "tune", "demo", *words)
    assert_rejected(result, in_tmp, key, also)


def test_bad_run_name_is_rejected(tmp_path):
    result = autotune_cli(tmp_path, "tune", "../escape", *job_words())
    assert_rejected(result, tmp_path, "run name", "../escape")
    assert not (tmp_path.parent / "escape").exists()


def test_model_folder_without_config_json_is_rejected(in_tmp, capsys):
    (in_tmp / "weights").mkdir()
    result = autotune_here(in_tmp, capsys, "tune", "demo", *job_words(model="./weights"))
    assert_rejected(result, in_tmp, "model", "config.json")


@pytest.mark.parametrize("knob", ["per_device_train_batch_size", "dataloader_num_workers"])
def test_superscript_digit_in_int_knob_is_one_line_not_a_traceback(in_tmp, capsys, knob):
    result = autotune_here(in_tmp, capsys, "tune", "demo", *job_words(**{knob: "\u00b2"}))
    assert_rejected(result, in_tmp, knob, None)


def test_top_level_help(tmp_path):
    result = autotune_cli(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: autotune" in result.stdout
    assert "tune" in result.stdout
    assert "--version" in result.stdout
    assert result.stderr == ""


def test_tune_help_lists_every_key_knob_and_smoke(tmp_path):
    result = autotune_cli(tmp_path, "tune", "--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "autotune tune RUN key=value" in out
    for name in list(JOB_KEYS) + list(CATALOG) + ["gradient_accumulation_steps", "smoke"]:
        assert name in out, f"{name} missing from `autotune tune --help`"
    assert "effective_batch" in out and "smoke" in out
    assert not (tmp_path / "runs").exists()


def test_version(tmp_path):
    result = autotune_cli(tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"autotune {autotune.__version__}"
    assert autotune.__version__[0].isdigit()


def test_a_run_name_already_used_is_refused_and_its_records_kept(tmp_path):
    folder = tmp_path / "runs" / "demo"
    folder.mkdir(parents=True)
    (folder / "experiments.jsonl").write_text('{"kept": true}\n')
    result = autotune_cli(tmp_path, "tune", "demo", *job_words())
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "already holds a run" in result.stderr
    assert (folder / "experiments.jsonl").read_text() == '{"kept": true}\n'


def test_llm_without_a_key_or_a_server_is_one_line(tmp_path):
    env = {k: v for k, v in _env().items() if not k.startswith("OPENAI_")}
    result = subprocess.run([sys.executable, "-m", "autotune.cli.main", "tune", "demo", *job_words(llm="gpt-4o-mini")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert_rejected(result, tmp_path, "llm=gpt-4o-mini", "OPENAI_API_KEY")
