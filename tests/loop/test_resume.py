"""resume continues a stopped or killed run from its folder without repeating or losing a trial;
review writes a finished run's outputs again without a device."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import tiny_job
from tests.loop.test_tuner import TableExecutor

from autotune.cli.main import main
from autotune.kb import Store, kb_folder
from autotune.kb.experience import Experience
from autotune.output.records import RunFolder
from autotune.loop.state import LoopState
from autotune.loop.tuner import Tuner

FACTORS = {("padding", "padding_free"): 2.0, ("per_device_train_batch_size", 2): 1.5,
           ("attn_implementation", "sdpa"): 1.3}


class KilledAt(TableExecutor):
    """Dies (as a Ctrl-C or SIGTERM does in the tuner) when the n-th measurement starts."""

    def __init__(self, factors, at: int):
        super().__init__(factors)
        self.at = at

    def run(self, spec, trial_dir, timeout_s):
        if len(self.specs) == self.at:
            raise KeyboardInterrupt("killed")
        return super().run(spec, trial_dir, timeout_s)


class Recording(TableExecutor):
    """Notes the trial number of each measurement (its folder is NNN-MMM)."""

    def __init__(self, factors):
        super().__init__(factors)
        self.trials: list[int] = []

    def run(self, spec, trial_dir, timeout_s):
        if spec["kind"] == "trial":
            self.trials.append(int(trial_dir.name[:3]))
        return super().run(spec, trial_dir, timeout_s)


def finished(tmp_path, run: str, executor, **keys: Any) -> list[tuple]:
    Tuner(tiny_job(max_trials=6, run=run, **keys), executor, tmp_path).run()
    return [(r["trial"], r["change"], r["decision"]) for r in RunFolder(tmp_path, run).read_experiments()]


@pytest.mark.parametrize("at", [2, 5, 7, 9])
def test_a_run_killed_at_any_point_resumes_to_the_same_result_without_repeats(tmp_path, at):
    # Its own knowledge base: what the reference run learns must not steer the run under test.
    reference = finished(tmp_path / "ref", "ref", TableExecutor(FACTORS), kb=str(tmp_path / "ref-kb"))
    job = tiny_job(max_trials=6, run="r")
    with pytest.raises(KeyboardInterrupt):
        Tuner(job, KilledAt(FACTORS, at), tmp_path).run()
    before = RunFolder(tmp_path, "r").read_experiments()
    again = Recording(FACTORS)
    outcome = Tuner(job, again, tmp_path).run(resume=True)
    records = RunFolder(tmp_path, "r").read_experiments()
    assert [r["trial"] for r in records] == list(range(len(records)))          # none duplicated, none lost
    assert [r.to_dict() for r in records[:len(before)]] == [r.to_dict() for r in before]  # what was recorded stays
    assert [(r["trial"], r["change"], r["decision"]) for r in records] == reference
    assert outcome.best.knobs.padding == "padding_free"
    # Completed trials are not measured again: the resumed run measured only trials after them.
    last_before = before[-1]["trial"] if before else -1
    assert again.trials and min(again.trials) > last_before
    run_id = json.loads(RunFolder(tmp_path, "r").state.read_text())["run_id"]
    experience = Experience(Store(kb_folder()))
    trials = [t["trial"] for t in experience.trials(run_id)]
    assert sorted(trials) == sorted(set(trials)) == [r["trial"] for r in records]  # the knowledge base agrees
    assert [r["run_id"] for r in experience.runs()].count(run_id) == 1


def test_a_trial_the_folder_holds_but_the_knowledge_base_lost_is_written_back_not_remeasured(tmp_path, monkeypatch):
    # The run folder's record is written first (Tuner._journal): a kill before the knowledge base's
    # copy leaves the trial in experiments.jsonl alone, and resume writes the copy from it.
    job = tiny_job(max_trials=4, run="r")
    original = Experience.record_trial

    def dies_on_trial_2(self, run_id, identity, features, incumbent, record, hypothesis=None):
        if record["trial"] == 2:
            raise KeyboardInterrupt("killed between the two writes")
        return original(self, run_id, identity, features, incumbent, record, hypothesis)

    monkeypatch.setattr(Experience, "record_trial", dies_on_trial_2)
    with pytest.raises(KeyboardInterrupt):
        Tuner(job, TableExecutor(FACTORS), tmp_path).run()
    monkeypatch.setattr(Experience, "record_trial", original)
    kept = RunFolder(tmp_path, "r").read_experiments()[2]
    assert Experience(Store(kb_folder())).trials()[-1]["trial"] == 1     # the knowledge base lacks trial 2
    again = Recording(FACTORS)
    Tuner(job, again, tmp_path).run(resume=True)
    records = RunFolder(tmp_path, "r").read_experiments()
    assert [r["trial"] for r in records] == [0, 1, 2, 3, 4] and records[2].to_dict() == kept.to_dict()
    assert min(again.trials) == 3                                # trial 2 came back from the folder
    run_id = json.loads(RunFolder(tmp_path, "r").state.read_text())["run_id"]
    written = [t for t in Experience(Store(kb_folder())).trials(run_id) if t["trial"] == 2]
    assert len(written) == 1 and written[0]["knobs"] == kept["knobs"] and written[0]["decision"] == kept["decision"]


def test_a_torn_last_line_is_the_interrupted_trial_and_is_redone(tmp_path):
    job = tiny_job(max_trials=3, run="r")
    with pytest.raises(KeyboardInterrupt):
        Tuner(job, KilledAt(FACTORS, 6), tmp_path).run()
    with open(RunFolder(tmp_path, "r").experiments, "ab") as handle:
        handle.write(b'{"run": "r", "trial": 9')
    Tuner(job, TableExecutor(FACTORS), tmp_path).run(resume=True)
    assert [r["trial"] for r in RunFolder(tmp_path, "r").read_experiments()] == [0, 1, 2, 3]


def test_review_writes_the_outputs_again_and_resume_of_a_finished_run_says_so(tmp_path, capsys):
    finished(tmp_path, "done", TableExecutor(FACTORS))
    folder = RunFolder(tmp_path, "done")
    report = folder.report
    for path in (folder.report, folder.results, folder.best):
        path.unlink(missing_ok=True)
    assert main(["tune", "--runs-dir", str(tmp_path), "done", "review"]) == 0
    assert "## Trials" in report.read_text() and folder.results.exists()
    assert json.loads(folder.best.read_text())["knobs"]["padding"] == "padding_free"
    assert main(["tune", "--runs-dir", str(tmp_path), "done", "resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["tune", "--runs-dir", str(tmp_path), "nothing", "review"]) == 2
    assert main(["tune", "--runs-dir", str(tmp_path), "done", "resume", "max_trials=3"]) == 2


def evidence_events(kb) -> list[tuple]:
    """(op, claim, trial) of every history event carrying a trial's evidence, run ids left out."""
    from autotune.kb.beliefs import Beliefs

    return sorted((e["op"], e["claim"], e["evidence"]["experiment"].rsplit("#", 1)[1])
                  for e in Beliefs(Store(kb)).history() if e.get("evidence"))


def test_a_kill_between_the_trial_record_and_its_belief_update_loses_no_evidence(tmp_path, monkeypatch):
    from autotune.kb.beliefs import Beliefs

    finished(tmp_path / "ref", "ref", TableExecutor(FACTORS), kb=str(tmp_path / "ref-kb"))
    reference = evidence_events(tmp_path / "ref-kb")
    assert any(trial == "2" for _, _, trial in reference)        # trial 2 does teach something
    job = tiny_job(max_trials=6, run="r")
    original = Beliefs.apply

    def dies_applying_trial_2(self, updates, run=""):
        updates = list(updates)
        if any(u.evidence and u.evidence.experiment.endswith("#2") for u in updates):
            raise KeyboardInterrupt("killed after the trial's record, before its evidence")
        return original(self, updates, run)

    monkeypatch.setattr(Beliefs, "apply", dies_applying_trial_2)
    with pytest.raises(KeyboardInterrupt):
        Tuner(job, TableExecutor(FACTORS), tmp_path).run()
    monkeypatch.setattr(Beliefs, "apply", original)
    assert Experience(Store(kb_folder())).trials()[-1]["trial"] == 2    # the knowledge base holds trial 2
    assert not any(trial == "2" for _, _, trial in evidence_events(kb_folder()))
    Tuner(job, TableExecutor(FACTORS), tmp_path).run(resume=True)
    assert evidence_events(kb_folder()) == reference                     # every update, each once
    records = RunFolder(tmp_path, "r").read_experiments()
    assert records[2]["beliefs"] and [r["trial"] for r in records] == list(range(7))


def test_evidence_applied_before_the_kill_is_not_applied_again_on_resume(tmp_path, monkeypatch):
    finished(tmp_path / "ref", "ref", TableExecutor(FACTORS), kb=str(tmp_path / "ref-kb"))
    job = tiny_job(max_trials=6, run="r")
    original = LoopState.save

    def dies_after_trial_2(self, path):
        if self.trials_done == 2:
            raise KeyboardInterrupt("killed after every write of trial 2 but the state's")
        original(self, path)

    monkeypatch.setattr(LoopState, "save", dies_after_trial_2)
    with pytest.raises(KeyboardInterrupt):
        Tuner(job, TableExecutor(FACTORS), tmp_path).run()
    monkeypatch.setattr(LoopState, "save", original)
    assert json.loads(RunFolder(tmp_path, "r").state.read_text())["trials_done"] == 1
    again = Recording(FACTORS)
    Tuner(job, again, tmp_path).run(resume=True)
    assert min(again.trials) == 3                                  # trial 2 is taken in from the folder
    assert evidence_events(kb_folder()) == evidence_events(tmp_path / "ref-kb")
