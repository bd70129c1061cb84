"""The discovery probe runs the user's script only once every key of the job is checked, and with the
run's lock held: a refused job (or a run in use) has not run it."""

from __future__ import annotations

import fcntl
import os
import textwrap

import pytest

from autotune.util.errors import JobError
from autotune import job_from_words

# Says, outside its folder, that it ran and whether runs/p/.lock was held by someone else meanwhile.
SCRIPT = textwrap.dedent('''
    import fcntl
    import torch
    import yaml

    with open({marker!r}, "a") as marker, open({lock!r}, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            marker.write("ran, lock free\\n")
        except BlockingIOError:
            marker.write("ran, lock held\\n")
    cfg = yaml.safe_load(open("loop.yaml"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(50):
        for _ in range(cfg["accum_every"]):
            ids = torch.randint(0, 64, (cfg["batch_size"], cfg["max_len"]))
            model(ids).logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
''')
WORDS = ["script=loop.py", "script_configs=loop.yaml", "smoke"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    marker, lock = tmp_path / "ran.txt", folder / "runs" / "p" / ".lock"
    (folder / "loop.py").write_text(SCRIPT.format(marker=str(marker), lock=str(lock)))
    # accum_every is in no name table: only a probe run can say it is the accumulation.
    (folder / "loop.yaml").write_text("batch_size: 2\naccum_every: 2\nmax_len: 8\n")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return folder, marker


@pytest.mark.parametrize("bad", ["time=banana", "mem_margin=5", "max_len=3", "max_trials=0", "host=no host"])
def test_a_job_refused_for_any_key_has_not_run_the_script(project, capsys, bad):
    from autotune.cli.main import main

    folder, marker = project
    code = main(["tune", "p", *WORDS, bad])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert not marker.exists() and not (folder / "runs").exists()


def test_a_run_in_use_is_refused_before_the_script_runs(project):
    folder, marker = project
    (folder / "runs" / "p").mkdir(parents=True)
    with open(folder / "runs" / "p" / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(JobError, match="is in use by"):
            job_from_words("p", WORDS, folder / "runs")
    assert not marker.exists()


def test_the_probe_runs_with_the_run_lock_held_and_confirms_the_setting(project):
    folder, marker = project
    job, _ = job_from_words("p", WORDS)              # runs/ relative to the folder, as the CLI's default
    assert job.script.knobs == ("accum_every:gradient_accumulation_steps:probed",)
    runs = marker.read_text().splitlines()
    assert runs and set(runs) == {"ran, lock held"}, runs
    # The probe's folders went in the run folder and are gone; the user's folder gained only runs/.
    assert sorted(p.name for p in (folder / "runs" / "p").iterdir()) == [".lock"]
    assert sorted(p.name for p in folder.iterdir()) == ["loop.py", "loop.yaml", "runs"]
    assert os.stat(folder / "runs" / "p").st_mode & 0o077 == 0


def test_a_job_refused_after_its_probe_leaves_no_run_folder(project, capsys):
    from autotune.cli.main import main

    folder, marker = project
    (folder / "loop.yaml").write_text("batch_size: two\naccum_every: 2\nmax_len: 8\n")
    stamp = os.stat(folder).st_mtime_ns
    code = main(["tune", "p", *WORDS])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "whole number" in err[0], err
    assert marker.exists()                               # the probe ran, under the lock ...
    assert not (folder / "runs").exists() and os.stat(folder).st_mtime_ns == stamp   # ... and left nothing
