"""`script_knobs=`: a script's own names mapped onto knobs, and the one line that gives that way out
when discovery does not understand a script."""

from __future__ import annotations

from pathlib import Path

import pytest

import autotune.cli.main as cli
from autotune import schemas
from autotune.config.job import Job
from autotune.workloads.jobs import job_from_dict
from autotune.workloads.script import probe

SCRIPT = "import yaml\ncfg = yaml.safe_load(open('own.yaml'))\n"
OWN = "micro_bsz: 2\naccum: 4\nctx: 64\neval:\n  batch_size: 16\nlr: 0.001\n"
MAPPED = ["micro_bsz:per_device_train_batch_size", "accum:gradient_accumulation_steps", "ctx:max_len"]


@pytest.fixture()
def project(tmp_path: Path, monkeypatch) -> Path:
    # micro_bsz and accum would each be tried by a probe run (workloads/script/probe.py, tested end to end in
    # tests/e2e/test_byo_script.py); here the names the user gives, and the line without them, are tested.
    monkeypatch.setattr(probe, "confirmed", lambda *args, **kwargs: ())
    (tmp_path / "own.py").write_text(SCRIPT)
    (tmp_path / "own.yaml").write_text(OWN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def tune(capsys, *words: str) -> tuple[int, list[str]]:
    code = cli.main(["tune", "own", "script=own.py", "script_configs=own.yaml", *words, "smoke"])
    return code, capsys.readouterr().err.strip().splitlines()


def test_the_scripts_own_names_become_the_knobs_and_the_job_keeps_them(project):
    job = job_from_dict("own", {"script": "own.py", "script_configs": "own.yaml", "script_knobs": MAPPED, "smoke": True})
    # micro_bsz beats eval.batch_size, which the built-in names would have read as the micro-batch.
    assert (job.start.per_device_train_batch_size, job.effective_batch, job.max_len) == (2, 8, 64)
    stored = job.to_dict()
    schemas.validate("job", stored)
    assert Job.from_dict(stored).script.knobs == job.script.knobs == (
        "micro_bsz:per_device_train_batch_size", "accum:gradient_accumulation_steps", "ctx:max_len")
    from autotune.workloads.script import ScriptAdapter

    adapter = ScriptAdapter.for_script(Path("own.py"), ("own.yaml",), [], names=job.script.knobs)
    files, flags = adapter.edits(job.start.with_change("per_device_train_batch_size", 4))
    assert files == {"own.yaml": [(["micro_bsz"], 4), (["accum"], 2)]} and flags == []
    assert "own.yaml:micro_bsz = 2 -> micro_batch" in adapter.listing()


def test_a_micro_batch_not_understood_is_one_line_naming_what_was_found_and_the_key(project, capsys):
    (project / "own.yaml").write_text(OWN.replace("eval:\n  batch_size: 16\n", ""))
    code, err = tune(capsys)
    assert code == 2 and len(err) == 1
    assert "no micro-batch size found" in err[0] and "micro_bsz=2 (own.yaml)" in err[0]
    assert "looked for per_device_train_batch_size" in err[0]
    assert err[0].endswith("script_knobs=micro_bsz:per_device_train_batch_size,accum:gradient_accumulation_steps")


def test_a_script_whose_only_batch_setting_is_for_eval_is_told_which_names_to_map(project, capsys):
    code, err = tune(capsys)
    assert code == 2 and len(err) == 1
    assert "own.yaml:eval.batch_size = 16 read as micro_batch" in err[0]
    assert err[0].endswith("script_knobs=micro_bsz:per_device_train_batch_size,accum:gradient_accumulation_steps")


def test_a_missing_length_gives_the_key_for_it(project, capsys):
    code, err = tune(capsys, "script_knobs=micro_bsz:per_device_train_batch_size,accum:gradient_accumulation_steps")
    assert code == 2 and len(err) == 1 and "no sequence length found" in err[0] and "script_knobs=ctx:max_len" in err[0]


@pytest.mark.parametrize("value, needle", [
    ("micro_bsz", "is not NAME:KNOB"),
    ("micro_bsz:batch", "'batch' is no knob autotune knows"),
    ("micro_bsz:per_device_train_batch_size,micro-bsz:optim", "micro-bsz is mapped twice"),
    ("mbs:per_device_train_batch_size", "mbs is not a setting of the script"),
    ("a b:optim", "is not a setting's name"),
])
def test_a_bad_script_knobs_value_is_one_line_and_exit_2(project, capsys, value, needle):
    code, err = tune(capsys, f"script_knobs={value}")
    assert code == 2 and len(err) == 1 and needle in err[0], err
