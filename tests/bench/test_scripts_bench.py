"""bench.scripts' table and cases, without running a tune (the gains are the benchmark's to print)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from bench import byo_setup
from bench.scripts import BYO, CASES, Case, seconds, table


# Names no table holds, which autotune's probe run confirms before the tune (workloads/script/probe.py).
PROBED = {"plain_yaml": ("sort_by_length:group_by_length:probed",)}


def words(case: Case) -> dict[str, str]:
    return dict(word.partition("=")[::2] for word in case.words)


def test_each_case_holds_autotune_to_its_grid_and_names_files_that_exist():
    for case in CASES:
        assert case.only() == "only=" + ",".join(case.grid)
        assert case.held({**dict.fromkeys(case.grid, 1), "optim": "adamw_torch"}) == dict.fromkeys(case.grid, 1)
        assert not case.setup or callable(getattr(byo_setup, case.setup, None)), case.setup
        for word in case.words:
            for part in word.partition("=")[2].split():
                if part.startswith("byo/"):
                    assert (BYO.parent / part).is_file(), part


@pytest.mark.parametrize("case", [c for c in CASES if not c.setup], ids=lambda c: c.name)
def test_every_value_of_a_cases_grid_is_one_its_script_can_be_set_to(case, tmp_path):
    # Read as autotune reads it before any run: each knob of the grid is found in the script's own
    # settings (flags, config keys, Trainer / Accelerator keywords, LightningCLI sections) and each value
    # of the grid is one the script can say, so the grid and the tune range over the same configs.
    from autotune.workloads.script import ScriptAdapter

    shutil.copytree(BYO, tmp_path / "byo")
    given = words(case)
    configs = tuple(given["script_configs"].split()) if "script_configs" in given else ()
    adapter = ScriptAdapter.for_script(tmp_path / given["script"], configs, shlex.split(given.get("script_args", "")),
                                       tmp_path, names=PROBED.get(case.name, ()), launcher=tuple(given.get("script_launcher", "").split()))
    for knob, values in case.grid.items():
        assert knob in adapter.tryable, (knob, adapter.listing())
        for value in values:
            if value != getattr(adapter.start, knob):
                assert adapter.why_not(knob, value, "cpu") is None, (knob, value)


def test_the_trl_case_runs_trls_installed_sft_script_on_inputs_made_at_run_time(tmp_path):
    import trl

    case = next(c for c in CASES if c.name == "trl_sft")
    byo_setup.trl_sft(tmp_path)
    script = tmp_path / words(case)["script"]
    assert script.read_bytes() == (Path(trl.__file__).parent / "scripts" / "sft.py").read_bytes()
    # The config names the model and data made here and leaves precision and checkpointing to SFTConfig.
    config = yaml.safe_load((BYO / "trl_sft.yaml").read_text())
    assert (tmp_path / config["model_name_or_path"] / "config.json").is_file()
    assert len((tmp_path / config["dataset_name"] / "train.jsonl").read_text().splitlines()) == 3000
    assert not {"bf16", "fp16", "gradient_checkpointing", "activation_checkpointing"} & set(config)


def test_the_table_gives_both_gains_and_their_ratio():
    row = {"autotune_gain": 2.02, "hand_gain": 2.11, "gain_ratio": 0.957, "tune_speedup": 2.06, "tune_trials": 5}
    text = table({"plain_yaml": row, "broken": {"error": "tune exit 1"}})
    assert "| plain_yaml | x2.02 | x2.11 | 0.96 | x2.06 | 5 |" in text and "failed: tune exit 1" in text


def test_a_budget_reads_as_time_does_and_a_launched_case_gets_more_of_it():
    assert (seconds("6m"), seconds("90s"), seconds("1h"), seconds("45")) == (360, 90, 3600, 45)
    launched = [c for c in CASES if any(w.startswith("script_launcher=") for w in c.words)]
    assert launched and all(c.scale > 1 for c in launched)
    assert all(c.scale == 1 for c in CASES if c not in launched)
