"""The one table of kinds of job (workloads/jobs.py): each kind's words build its Job, a built Job is
recognised as that kind again, and the runner the spec names is the module the kind keeps."""

from __future__ import annotations

import ast
import json
from importlib.util import find_spec
from pathlib import Path

import pytest

import autotune
from autotune.config.job import Job
from autotune.engine import runner_module
from autotune.workloads.jobs import KINDS, kind_of

SCHEMA = Path(autotune.__file__).parent / "schemas" / "trial_spec.json"


def test_every_runner_the_spec_can_name_is_a_module_with_an_entry():
    names = json.loads(SCHEMA.read_text())["properties"]["runner"]["enum"]
    assert {kind.name for kind in KINDS} <= set(names)
    for name in [*names, "realize"]:
        spec = find_spec(runner_module(name))
        assert spec is not None and spec.origin, name
        # Read, not imported: a runner imports torch, and this test must not.
        tree = ast.parse(Path(spec.origin).read_text())
        assert any(isinstance(node, ast.FunctionDef) and node.name == "entry" for node in tree.body), name


def test_a_runner_name_that_is_no_module_name_is_refused():
    with pytest.raises(ValueError, match="not a kind of job"):
        runner_module("../../etc")


@pytest.mark.parametrize("keys,kind", [({"model": "mlp"}, "mlp"), ({"smoke": True}, "hf")])
def test_a_built_job_is_its_kind_again_after_the_round_trip(keys, kind):
    job = autotune.job_from_dict("r", keys)
    again = Job.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again == job and kind_of(again).name == kind
    assert (again.mlp is not None) == (kind == "mlp") and again.script is None and again.llm is None


def test_the_stored_form_stays_flat_as_old_run_folders_hold_it():
    job = autotune.job_from_dict("r", {"model": "mlp", "mlp_width": 64, "llm": "some-model"})
    stored = job.to_dict()
    assert (stored["mlp_width"], stored["llm"], stored["script"], stored["ssh_python"]) == (64, "some-model", "", "python3")
    assert not any(isinstance(value, dict) for key, value in stored.items() if key != "start")
    assert Job.from_dict(stored).llm.model == "some-model" and Job.from_dict(stored).mlp.width == 64
