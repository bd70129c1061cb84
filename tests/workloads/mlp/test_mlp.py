"""The framework-free MLP runner, run in this process on the CPU: what the frame reports, the same rows
in every trial, per-row losses that do not depend on the micro-batch split, and its expected faults."""

from __future__ import annotations

import json

import pytest

from autotune.executors import LocalExecutor
from autotune import job_from_dict
from autotune.workloads.mlp.job import MLP_KNOBS
from autotune.config.knobs import CATALOG, Knobs
from autotune.config.messages import TrialSpec
from autotune.workloads.mlp import runner as mlp
from autotune.engine.train import TrialFault

KEYS = {"model": "mlp", "mlp_width": 32, "mlp_depth": 2, "mlp_rows": 40, "max_len": 16, "effective_batch": 8, "smoke": True}


def spec(tmp_path, kind: str, **knobs) -> dict:
    job = job_from_dict("m", KEYS)
    return {"schema_version": 1, "kind": kind, "runner": "mlp", "job": job.to_dict(),
            "knobs": Knobs(**knobs).to_dict(), "rows_path": str(tmp_path / "rows.json"),
            "measure_steps": 2, "warmup_max": 2, "ceiling": kind == "trial", "profile_steps": 1,
            "peaks": {"matmul_flops": {"fp32": 1e15}}}


def typed(tmp_path, kind: str, **knobs) -> TrialSpec:
    """The spec as the runner's child reads it."""
    return TrialSpec.from_dict(spec(tmp_path, kind, **knobs))


@pytest.fixture
def framed(tmp_path):
    return mlp.frame(typed(tmp_path, "frame"))["frame"]


def test_the_frame_describes_the_mlp_and_drops_sequence_knobs(tmp_path, framed):
    assert framed["model"]["model_type"] == "mlp"
    # 16*32 + 32 (first layer), 32*32 + 32, 32*16 + 16 (classes)
    assert framed["model"]["params"] == 16 * 32 + 32 + 32 * 32 + 32 + 32 * mlp.CLASSES + mlp.CLASSES
    assert framed["data"]["p50_len"] == 16 and framed["data"]["padding_share"] == 0.0
    limited = {limit["knob"] for limit in framed["limits"]}
    assert {"padding", "group_by_length", "attn_implementation", "gradient_checkpointing"} <= limited
    assert limited.isdisjoint(MLP_KNOBS) and limited | set(MLP_KNOBS) == set(CATALOG)
    assert all(limit["silent"] for limit in framed["limits"])
    assert json.loads((tmp_path / "rows.json").read_text())["rows"] == 40


def test_a_trial_measures_rows_and_per_row_losses_that_do_not_depend_on_the_split(tmp_path, framed):
    one = mlp.trial(typed(tmp_path, "trial", per_device_train_batch_size=1))["measurement"]
    four = mlp.trial(typed(tmp_path, "trial", per_device_train_batch_size=4))["measurement"]
    for measurement in (one, four):
        assert measurement["samples_per_s"] > 0 and len(measurement["step_times_s"]) == 2
        assert measurement["ceiling"]["fits"] and measurement["ceiling"]["bytes"] > 0
        assert 0 < measurement["mfu"] < 1 and measurement["breakdown"]["steps"] == 1
        assert [len(v) for v in measurement["parity_losses"].values()] == [8, 8]  # one optimizer step each
    for step in ("step1", "step2"):
        assert one["parity_losses"][step] == pytest.approx(four["parity_losses"][step], rel=1e-5)
    # The second step's losses show the first step's update: training happened.
    assert one["parity_losses"]["step1"] != pytest.approx(one["parity_losses"]["step2"], rel=1e-3)


def test_rows_that_differ_from_the_frames_end_the_trial_as_invalid(tmp_path, framed):
    recipe = json.loads((tmp_path / "rows.json").read_text())
    (tmp_path / "rows.json").write_text(json.dumps({**recipe, "sha256": "0" * 64}))
    with pytest.raises(TrialFault) as fault:
        mlp.trial(typed(tmp_path, "trial"))
    assert fault.value.state == "invalid" and "same rows" in fault.value.reason


@pytest.mark.parametrize("fault,state", [("oom", "oom"), ("nan", "invalid")])
def test_injected_faults_end_as_states(tmp_path, framed, fault, state):
    trial_spec = {**spec(tmp_path, "trial"), "inject_fault": fault}
    (tmp_path / "spec.json").write_text(json.dumps(trial_spec))
    mlp.entry(tmp_path / "spec.json", tmp_path / "result.json")
    assert json.loads((tmp_path / "result.json").read_text())["state"] == state


def test_loader_workers_run_in_the_executors_child(tmp_path):
    """The executor starts trials from a fork server, whose children would start loader workers the same
    way (and fail to pickle the step plan); they are forked, as in a user's own loop."""
    executor = LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""})
    base = {**spec(tmp_path, "frame"), "model_config_path": str(tmp_path / "unused.json")}
    assert executor.run(base, tmp_path / "frame", 300)["state"] == "complete"
    result = executor.run({**spec(tmp_path, "trial", dataloader_num_workers=1)}, tmp_path / "workers", 300)
    assert result["state"] == "complete", result
