"""A script trial runs on its own copy of the user's folder: what the script writes, overwrites, saves,
renames or deletes there (or through a link) leaves the user's files as they were; a folder past the
copy's cap is refused in one line."""

from __future__ import annotations

import hashlib
import os
import textwrap
from pathlib import Path

import pytest

from autotune.executors.local import LocalExecutor
from autotune.util.errors import JobError
from autotune.workloads.script import tree

# Every kind of change a training script makes in its own folder, once per optimizer step.
WRITER = textwrap.dedent('''
    import argparse
    import os
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--grad_accum", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(50):
        with open("precious.txt", "a") as log:                  # appends to a file of the user's
            log.write(f"step {step}\\n")
        with open("out/existing.txt", "w") as out:              # overwrites one in an existing output folder
            out.write("overwritten\\n")
        torch.save(model.state_dict(), "out/ckpt.pt")          # a checkpoint where the config says
        with open("linked.txt", "w") as out:                    # through a link to a file outside the folder
            out.write("through the link\\n")
        for gone in ("delete_me.txt", "data/rows.txt"):
            if os.path.exists(gone):
                os.remove(gone)
        if os.path.exists("rename_me.txt"):
            os.rename("rename_me.txt", "renamed.txt")
        for _ in range(args.grad_accum):
            ids = torch.randint(0, 64, (args.batch_size, 8))
            model(ids).float().logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
''')


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def user_folder(root: Path) -> Path:
    folder = root / "project"
    (folder / "out").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "train.py").write_text(WRITER)
    (folder / "precious.txt").write_text("my notes\n")
    (folder / "out" / "existing.txt").write_text("my earlier result\n")
    (folder / "out" / "ckpt.pt").write_bytes(b"my real checkpoint")
    (folder / "delete_me.txt").write_text("keep me\n")
    (folder / "rename_me.txt").write_text("keep my name\n")
    (folder / "data" / "rows.txt").write_text("an input\n")
    (root / "elsewhere.txt").write_text("outside the folder\n")
    (folder / "linked.txt").symlink_to(root / "elsewhere.txt")
    return folder


def test_a_script_that_writes_renames_and_deletes_leaves_the_users_folder_as_it_was(tmp_path):
    folder = user_folder(tmp_path)
    before, outside = hashes(folder), (tmp_path / "elsewhere.txt").read_text()
    trial = tmp_path / "runs" / "r" / "trials" / "1"
    spec = {"schema_version": 1, "kind": "probe", "runner": "script", "job": {"seed": 0, "smoke": True},
            "knobs": {"precision": "fp32"},
            "script": {"path": str(folder / "train.py"), "cwd": str(folder), "configs": [], "edits": {},
                       "args": ["--batch_size", "2"], "expect": {}, "exclude": [str(tmp_path / "runs")]},
            "flags": [], "measure_steps": 2, "warmup_max": 1, "workdir": str(trial / "work")}
    result = LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}).run(spec, trial, 300)
    measurement = result.get("measurement") or result.get("measurement_rejected")
    assert measurement, result
    # The script ran its steps, each one writing as above, and the copy it wrote into says how it was made.
    assert measurement["tree"]["method"] in ("reflink", "copy") and measurement["tree"]["files"] == 8
    assert hashes(folder) == before
    assert (tmp_path / "elsewhere.txt").read_text() == outside and (folder / "linked.txt").is_symlink()
    assert not (trial / "work" / "tree").exists()          # the trial's copy goes with the trial


def test_the_copy_leaves_out_git_caches_the_runs_folder_and_dangling_or_looping_links(tmp_path):
    folder = user_folder(tmp_path)
    (folder / "loop_a").symlink_to(folder / "loop_b")
    (folder / "loop_b").symlink_to(folder / "loop_a")
    (folder / "itself").symlink_to(folder / "itself")
    for name in (".git/objects/x", "__pycache__/train.cpython-311.pyc", "runs/old/experiments.jsonl"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    (folder / "dangling.txt").symlink_to(tmp_path / "no-such-file")
    os.mkfifo(folder / "pipe")
    made = tree.copy(tree.plan(folder, [folder / "runs"]), tmp_path / "copy")
    copied = sorted(str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*"))
    assert copied == ["data", "data/rows.txt", "delete_me.txt", "linked.txt", "out", "out/ckpt.pt",
                      "out/existing.txt", "precious.txt", "rename_me.txt", "train.py"]
    assert not (tmp_path / "copy" / "linked.txt").is_symlink()     # a link is copied as what it points to
    assert (tmp_path / "copy" / "linked.txt").read_text() == "outside the folder\n"
    assert made["files"] == 8 and made["method"] in ("reflink", "copy")
    assert not (tmp_path / "no-such-file").exists()


@pytest.mark.parametrize("env, needle", [({"AUTOTUNE_TREE_CAP_MB": "1"}, "MB (over AUTOTUNE_TREE_CAP_MB=1)"),
                                         ({"AUTOTUNE_TREE_CAP_FILES": "5"}, "more than 5 files and folders")])
def test_a_folder_past_the_cap_is_refused_in_one_line_naming_the_way_out(tmp_path, monkeypatch, env, needle):
    folder = user_folder(tmp_path)
    (folder / "data" / "big.bin").write_bytes(b"\0" * (2 * 2 ** 20))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(JobError) as refused:
        tree.plan(folder)
    line = str(refused.value)
    assert needle in line and "AUTOTUNE_TREE_CAP_MB" in line and "\n" not in line


def test_a_script_job_in_a_folder_past_the_cap_stops_before_any_trial(tmp_path, monkeypatch, capsys):
    from autotune.cli.main import main

    folder = user_folder(tmp_path)
    (folder / "data" / "big.bin").write_bytes(b"\0" * (2 * 2 ** 20))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("AUTOTUNE_TREE_CAP_MB", "1")
    code = main(["tune", "big", "script=train.py", "script_args=--batch_size 2 --grad_accum 2 --max_len 8",
                 "max_len=8", "smoke"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "AUTOTUNE_TREE_CAP_MB" in err[0], err
    assert not (folder / "runs").exists()


@pytest.mark.slow
def test_a_tune_of_a_script_that_writes_its_folder_leaves_it_as_it_was(tmp_path, monkeypatch, capsys):
    # The case as a user met it: `autotune tune ... script=train.py smoke`, every trial writing as above
    # (on the fake clock: each config writes its copy once; what is kept is not the subject).
    from fake_clock import install

    from autotune.cli.main import main

    install(monkeypatch)
    folder = user_folder(tmp_path)
    before, outside = hashes(folder), (tmp_path / "elsewhere.txt").read_text()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = main(["tune", "w", "script=train.py", "max_len=8", "smoke", "max_trials=1", "time=30m", "fresh"])
    assert code == 0, capsys.readouterr().err[-3000:]
    assert {k: v for k, v in hashes(folder).items() if not k.startswith("runs/")} == before
    assert (tmp_path / "elsewhere.txt").read_text() == outside
    report = (folder / "runs" / "w" / "report.md").read_text()
    assert "Each trial ran on its own copy of your folder (" in report
