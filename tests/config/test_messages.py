"""The parent/child messages: TrialSpec, RunResult and Measurement round-trip through their schemas, a
malformed one on either side ends that run as `invalid` with its reason, and the child never writes
into its spec. Records written before the messages were typed (tests/data/experiments_v1_*.jsonl, from
`autotune tune ... smoke` at that commit) still load."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from conftest import make_spec, tiny_job

from autotune import job_from_dict
from autotune.loop import trial_spec
from autotune.util.errors import RecordError
from autotune.executors import LocalExecutor
from autotune.config.knobs import Knobs
from autotune.config.messages import (PARITY_STEPS, Measurement, RunResult, TrialSpec, measured_ids, parity_ids,
                               read_result, rows_needed)
from autotune.output.records import RunFolder
from autotune.engine import common
from autotune.workloads.mlp import runner as mlp
from autotune.loop.trial_spec import StepBudget

DATA = Path(__file__).resolve().parents[1] / "data"
OLD = sorted(DATA.glob("experiments_v1_*.jsonl"))
MLP = {"model": "mlp", "mlp_width": 16, "mlp_depth": 1, "mlp_rows": 40, "max_len": 8, "effective_batch": 4,
       "smoke": True}


def mlp_spec(tmp_path: Path, kind: str) -> dict:
    return {"schema_version": 1, "kind": kind, "runner": "mlp", "job": job_from_dict("m", MLP).to_dict(),
            "knobs": Knobs().to_dict(), "rows_path": str(tmp_path / "rows.json"), "rows_needed": 24,
            "measure_steps": 2, "warmup_max": 1, "ceiling": False, "inject_fault": None, "profile_steps": 0,
            "peaks": {"matmul_flops": {"fp32": 1e15}}}


def old_measurements() -> list[dict]:
    return [m for path in OLD for line in path.read_text().splitlines() for m in json.loads(line)["measurements"]]


# -- round trips ----------------------------------------------------------------------------------

def built_specs(tmp_path: Path) -> list[dict]:
    """Specs as the tuner builds them (trial_spec.Specs.spec, the one builder): a frame, a trial, an MLP trial."""
    specs = []
    peaks = {"matmul_flops": {"fp32": 1e12}}
    for job in (tiny_job(), job_from_dict("m", MLP)):
        built = trial_spec.Specs(job, StepBudget.for_job(job), RunFolder(tmp_path, "t"), None, tmp_path, {1: "nan"})
        specs += [built.spec("frame", job.start, 0, peaks, peak_cache={}),
                  built.spec("trial", job.start, 1, peaks, ceiling=True)]
    return specs


def test_specs_round_trip_exactly(tmp_path):
    for spec in built_specs(tmp_path):
        assert TrialSpec.from_dict(spec).to_dict() == spec
    # A hand-made spec gains the defaults the runners read as always there, and nothing else.
    assert TrialSpec.from_dict(make_spec(tmp_path)).to_dict() == {**make_spec(tmp_path), "profile_steps": 0}


def test_measurements_and_results_round_trip_whole(tmp_path):
    found = old_measurements()
    assert found
    for measurement in found:
        assert Measurement.from_dict(measurement).to_dict() == measurement
        result = {"state": "complete", "reason": "", "measurement": measurement, "wall_s": 1.5, "exit_code": 0}
        assert RunResult.from_dict(result).to_dict() == result
    typed = Measurement.from_dict(found[0])
    assert typed.samples_per_s == found[0]["samples_per_s"] and typed.rest["mfu"] == found[0]["mfu"]


def test_a_message_cannot_be_edited(tmp_path):
    spec = TrialSpec.from_dict(make_spec(tmp_path))
    with pytest.raises(TypeError):
        spec.job["max_len"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        spec.kind = "frame"  # type: ignore[misc]


# -- refused messages -----------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["knobs", "measure_steps", "rows_path"])
def test_a_spec_missing_a_field_is_refused_with_its_name(tmp_path, field):
    spec = make_spec(tmp_path)
    del spec[field]
    with pytest.raises(RecordError, match=f"'{field}'"):
        TrialSpec.from_dict(spec)


def test_the_executor_ends_a_malformed_spec_as_invalid_without_running_it(tmp_path):
    spec = {k: v for k, v in make_spec(tmp_path).items() if k != "measure_steps"}
    result = LocalExecutor().run(spec, tmp_path / "t", timeout_s=60)
    assert result["state"] == "invalid" and "'measure_steps'" in result["reason"]
    assert not (tmp_path / "t" / "spec.json").exists() and not (tmp_path / "t" / "stdout.txt").exists()


def test_a_probe_of_a_script_carries_only_what_its_hooks_read(tmp_path):
    """workloads/script/probe.py's run: a partial job and knobs are a valid spec as kind=probe, never as a trial."""
    probe = {"schema_version": 1, "kind": "probe", "runner": "script", "job": {"seed": 0, "smoke": True},
             "knobs": {"precision": "fp32"}, "flags": [], "measure_steps": 1, "warmup_max": 0,
             "script": {"path": "train.py", "cwd": str(tmp_path), "configs": [], "edits": {}, "args": []},
             "workdir": str(tmp_path / "w")}
    assert TrialSpec.from_dict(probe).to_dict() == {**probe, "ceiling": False, "inject_fault": None,
                                                    "profile_steps": 0}
    with pytest.raises(RecordError, match="at job"):
        TrialSpec.from_dict({**probe, "kind": "trial"})
    with pytest.raises(RecordError, match="'precision'"):
        TrialSpec.from_dict({**probe, "knobs": {}})


def test_a_key_no_runner_reads_is_refused(tmp_path):
    with pytest.raises(RecordError, match="'rows_wanted' was unexpected"):
        TrialSpec.from_dict({**make_spec(tmp_path), "rows_wanted": 3})


@pytest.mark.parametrize("path, value, says", [
    (("samples_per_s",), 0.0, "samples_per_s"),
    (("step_times_s",), [0.1, -0.2], "step_times_s/1"),
    (("peak_memory", "bytes"), -5, "peak_memory/bytes"),
    (("mfu",), -0.5, "mfu"),
])
def test_a_result_with_an_impossible_value_is_invalid_with_where(path, value, says):
    measurement = copy.deepcopy(old_measurements()[0])
    *parents, last = path
    target = measurement
    for key in parents:
        target = target[key]
    target[last] = value
    raw = {"state": "complete", "reason": "", "measurement": measurement}
    with pytest.raises(RecordError, match=says):
        RunResult.from_dict(raw)
    read = read_result(json.dumps(raw))
    assert read["state"] == "invalid" and f"measurement/{says}" in read["reason"]
    assert read["measurement_rejected"] == measurement  # kept to look at, never as a measurement


def test_a_complete_result_without_what_it_measured_is_invalid():
    assert read_result('{"state": "complete", "reason": ""}')["state"] == "invalid"
    assert read_result('{"state": "done", "reason": ""}')["reason"].count("\n") == 0


def test_a_torn_result_is_invalid_not_a_traceback():
    read = read_result(b'{"state": "complete", "measurement": {"samp', "t/result.json")
    assert read["state"] == "invalid" and "t/result.json is not JSON" in read["reason"]


def test_the_child_refuses_a_malformed_spec_file_and_says_which_field(tmp_path):
    spec = {k: v for k, v in mlp_spec(tmp_path, "trial").items() if k != "knobs"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    ran = []
    code = common.execute(lambda s: ran.append(s) or {}, lambda e: False, RuntimeError, tmp_path / "spec.json",
                          tmp_path / "result.json")
    result = json.loads((tmp_path / "result.json").read_text())
    assert code == 1 and not ran
    assert result["state"] == "invalid" and "'knobs'" in result["reason"]


def test_the_child_writes_an_impossible_reading_as_invalid(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps(mlp_spec(tmp_path, "trial")))
    bad = {**old_measurements()[0], "tokens_per_s": -1.0}
    common.execute(lambda s: {"measurement": bad}, lambda e: False, RuntimeError, tmp_path / "spec.json",
                   tmp_path / "result.json")
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["state"] == "invalid" and "measurement/tokens_per_s" in written["reason"]
    assert read_result((tmp_path / "result.json").read_text()) == written


# -- the child never writes into its inputs ----------------------------------------------------------

def test_a_real_mlp_frame_and_trial_leave_their_spec_as_it_was(tmp_path):
    for kind in ("frame", "trial"):
        spec = TrialSpec.from_dict(mlp_spec(tmp_path, kind))
        before = copy.deepcopy(spec.to_dict())
        result = (mlp.frame if kind == "frame" else mlp.trial)(spec)
        assert spec.to_dict() == before == mlp_spec(tmp_path, kind)
        assert "frame" in result if kind == "frame" else result["measurement"]["samples_per_s"] > 0


def test_the_child_reads_its_spec_typed(tmp_path):
    spec = TrialSpec.from_dict(mlp_spec(tmp_path, "trial"))
    assert spec.job == job_from_dict("m", MLP) and spec.whole_job.mlp.rows == 40
    assert spec.knobs == Knobs() and spec.knobs.per_device_train_batch_size == 1
    assert spec.peak_flops("fp32") == 1e15 and spec.peak_flops("bf16") is None


def test_a_runner_that_writes_into_its_spec_is_a_crash_that_names_the_key(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps(mlp_spec(tmp_path, "frame")))

    def sneaky(spec: TrialSpec) -> dict:
        spec.job.pad_id = 0  # type: ignore[misc, union-attr]
        return {"frame": {"device": {}}}

    common.execute(sneaky, lambda e: False, RuntimeError, tmp_path / "spec.json", tmp_path / "result.json")
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["state"] == "crash" and "wrote into its spec" in written["reason"]
    assert "pad_id" in written["reason"]


# -- the parity steps, once -------------------------------------------------------------------------

def test_the_rows_a_trial_needs_are_the_parity_and_measured_steps_in_order():
    parity, measured = parity_ids(4), measured_ids(4, 3)
    assert len(parity) == PARITY_STEPS * 4 and measured[0] == parity[-1] + 1
    assert parity + measured == list(range(rows_needed(4, 3)))


def test_a_real_trial_pairs_as_many_parity_steps_as_the_rule_says(tmp_path):
    mlp.frame(TrialSpec.from_dict(mlp_spec(tmp_path, "trial")))
    measurement = mlp.trial(TrialSpec.from_dict(mlp_spec(tmp_path, "trial")))["measurement"]
    assert sorted(measurement["parity_losses"]) == [f"step{n + 1}" for n in range(PARITY_STEPS)]
    assert len(measurement["step_times_s"]) == 2


# -- old records ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", OLD, ids=[p.name for p in OLD])
def test_records_written_before_the_typed_messages_still_load(tmp_path, path):
    folder = RunFolder(tmp_path, "old")
    folder.make()
    shutil.copy(path, folder.experiments)
    records = folder.read_experiments()
    assert records and all(r["measurements"] for r in records if r["state"] == "complete")
    for record in records:
        for measurement in record["measurements"]:
            assert Measurement.from_dict(measurement).to_dict() == measurement
