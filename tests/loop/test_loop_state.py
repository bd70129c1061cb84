"""The loop's state (autotune/loop/state.py): saved after each trial through its schema, read back
whole, refused in one line when damaged, and rebuilt from the records alone for a state file written
before the state was explicit (version 1)."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_job
from tests.loop.test_resume import FACTORS, KilledAt, Recording
from tests.loop.test_tuner import TableExecutor

from autotune.cli.main import main
from autotune.loop.state import LoopState
from autotune.loop.tuner import Tuner
from autotune.output.records import RunFolder
from autotune.schemas import violation
from autotune.util.errors import RecordError

OOM = {("padding", "padding_free"): "oom"}


def fields(state: LoopState) -> dict:
    """What a state holds, less the clock (saved as elapsed seconds) and the records (experiments.jsonl)."""
    data = state.to_dict()
    return {k: v for k, v in data.items() if k not in ("elapsed_s", "records_covered")}


def test_a_saved_state_reads_back_as_it_was_written(tmp_path):
    Tuner(tiny_job(max_trials=4, run="r"), TableExecutor(FACTORS, states=OOM), tmp_path).run()
    folder = RunFolder(tmp_path, "r")
    saved = json.loads(folder.state.read_text())
    assert saved["schema_version"] == 2 and violation("loop_state", saved) is None
    assert saved["blocked"] and saved["measured"] and saved["walls"] and saved["frame_facts"]["device"]
    state = LoopState.load(folder.state, tiny_job().start)
    assert fields(state) == {k: v for k, v in saved.items() if k not in ("elapsed_s", "records_covered")}
    assert state.covered == saved["records_covered"] == len(folder.read_experiments())
    assert abs(state.elapsed_s - saved["elapsed_s"]) < 1  # the clock goes on from where it stopped
    state.save(tmp_path / "again.json")
    assert fields(LoopState.load(tmp_path / "again.json", tiny_job().start)) == fields(state)


def test_a_state_the_schema_refuses_is_not_written(tmp_path):
    state = LoopState.new("r", "r@1", tiny_job().start)
    state.runs = -1
    with pytest.raises(RecordError, match="loop_state.json: at runs"):
        state.save(tmp_path / "state.json")
    assert not (tmp_path / "state.json").exists()


def test_the_records_alone_rebuild_what_the_live_loop_kept(tmp_path):
    # The OOM bookkeeping and the incumbent follow a record in one place (LoopState.conclude), live
    # and when a resume takes records in: both give the same state.
    Tuner(tiny_job(max_trials=5, run="r"), TableExecutor(FACTORS, states=OOM), tmp_path).run()
    folder = RunFolder(tmp_path, "r")
    live = LoopState.load(folder.state, tiny_job().start)
    rebuilt = LoopState.new("r", live.run_id, tiny_job().start)
    rebuilt.catch_up(folder.read_experiments(), tiny_job().start)
    assert rebuilt.blocked == live.blocked and rebuilt.measured == live.measured
    assert rebuilt.incumbent.knobs == live.incumbent.knobs and rebuilt.incumbent.trial == live.incumbent.trial
    assert rebuilt.noise_floor == live.noise_floor and rebuilt.trials_done == live.trials_done


@pytest.mark.parametrize("text, says", [
    ('{"schema_version": 2, "run": "r"', "state.json: not JSON"),
    ('{"schema_version": 2, "run": "r", "run_id": "r@1"}', "state.json is not a state autotune wrote"),
    ('{"schema_version": 7}', "state.json is not a state autotune wrote"),
])
def test_a_torn_or_foreign_state_file_is_one_line_naming_it(tmp_path, capsys, text, says):
    with pytest.raises(KeyboardInterrupt):
        Tuner(tiny_job(max_trials=4, run="r"), KilledAt(FACTORS, 6), tmp_path).run()
    folder = RunFolder(tmp_path, "r")
    folder.state.write_text(text)
    before = folder.experiments.read_bytes()
    assert main(["tune", "--runs-dir", str(tmp_path), "r", "resume"]) == 2  # bad input: exit 2, as #27 asks
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert folder.experiments.read_bytes() == before and folder.state.read_text() == text  # nothing rewritten


def test_a_run_folder_with_a_version_1_state_file_resumes_to_the_same_result(tmp_path):
    reference = Tuner(tiny_job(max_trials=6, kb=str(tmp_path / 'ref-kb'), run="ref"), TableExecutor(FACTORS),
                      tmp_path / "ref").run()
    job = tiny_job(max_trials=6, run="r")
    with pytest.raises(KeyboardInterrupt):
        Tuner(job, KilledAt(FACTORS, 9), tmp_path).run()
    folder = RunFolder(tmp_path, "r")
    now = json.loads(folder.state.read_text())
    # The state file as autotune wrote it before LoopState: the run id, the clock, the incumbent's summary.
    old = {"schema_version": 1, "run": "r", "run_id": now["run_id"], "trials_done": now["trials_done"],
           "incumbent_trial": now["incumbent_trial"], "incumbent_knobs": now["incumbent_knobs"],
           "incumbent_samples": now["incumbent_samples"], "noise_floor": now["noise_floor"], "elapsed_s": 3.0}
    folder.state.write_text(json.dumps(old))
    before = folder.read_experiments()
    again = Recording(FACTORS)
    outcome = Tuner(job, again, tmp_path).run(resume=True)
    records = folder.read_experiments()
    assert [r.to_dict() for r in records[:len(before)]] == [r.to_dict() for r in before] and min(again.trials) > before[-1]["trial"]  # none measured again
    assert [(r["trial"], r["change"], r["decision"]) for r in records] == \
        [(r["trial"], r["change"], r["decision"]) for r in reference.records]
    assert outcome.best.knobs == reference.best.knobs
    state = json.loads(folder.state.read_text())
    assert state["schema_version"] == 2 and state["run_id"] == old["run_id"] and state["elapsed_s"] >= 3.0
