"""The parallel loop without a cluster: fake GPU slots that answer from the table of outcomes. A tune
with several slots must record what the serial tune records, trial for trial, and keep every run of a
trial on one slot. The same loop on a real Ray cluster is in tests/executors/test_ray.py."""

from __future__ import annotations

import pytest

from conftest import tiny_job
from table_outcomes import Table, TableSlots

from autotune.output.records import RunFolder
from autotune.loop.tuner import Tuner

NOTHING_KEPT = ["dataloader_num_workers", "attn_implementation", "optim"]


def facts(records: list[dict]) -> list[tuple]:
    return [(r["trial"], r["change"], r["knobs"], r["state"], r["decision"]) for r in records]


def same_search(parallel: list[dict], serial: list[dict]) -> None:
    """The same changes kept in the same order, and the same configs tried with the same decisions but for
    one near the end: a trial decided on its first runs compares with the incumbent's runs on its card (on
    a card with none yet, one measured then), so its ratio, the order the model proposes near-ties in and
    whether its last proposal clears the noise floor may differ from the serial tune's."""
    import collections
    import json

    def kept(records: list[dict]) -> list[dict]:
        return [r["knobs"] for r in records if r["decision"] == "keep"]

    def tried(records: list[dict]) -> collections.Counter:
        return collections.Counter(json.dumps([r["knobs"], r["state"], r["decision"]], sort_keys=True) for r in records)

    assert kept(parallel) == kept(serial)
    ours, theirs = tried(parallel), tried(serial)
    assert sum(((ours - theirs) + (theirs - ours)).values()) <= 1


def same_figures(parallel: list[dict], serial: list[dict]) -> None:
    """Each trial measured the same runs with the same figures. Only a look on a trial's first runs may
    differ: it compares with the incumbent's runs on the trial's card (on a card with none yet, the
    incumbent's first paired run, measured before the verdict), not with every run of it."""
    for ours, theirs in zip(parallel, serial):
        runs = (len(ours["measurements"]), len(theirs["measurements"]))
        if ours["change"] != theirs["change"]:
            continue  # near-ties proposed in another order (configs)
        if runs[0] != runs[1] and ours["decision"] == theirs["decision"] == "keep":
            continue  # kept on its first runs here, on pairs there
        if runs[0] != runs[1]:
            # Which slot a trial gets is whichever is free first, so a screen can read another card's
            # handful of incumbent runs than the serial tune's and end a losing trial one run earlier or
            # later: both discard it, and the runs both made are the same.
            assert 1 in runs and ours["decision"] == theirs["decision"] == "discard", ours["trial"]
            first = [(record["measurements"][0]["samples_per_s"], record["measurements"][0]["step_times_s"])
                     for record in (ours, theirs)]
            assert first[0] == first[1], ours["trial"]
            continue
        assert ours["samples_per_s"] == theirs["samples_per_s"], ours["trial"]
        assert runs[0] == 1 or ours["ratio"] == theirs["ratio"], ours["trial"]


def tune(root, executor, run, monkeypatch, **keys):
    # Each tune starts from the shipped priors: what one learns must not steer the other.
    (root / "kb").mkdir(parents=True)
    monkeypatch.setenv("AUTOTUNE_KB", str(root / "kb"))
    # A budget the tables' simulated walls never reach: against the smoke budget, whether a trial has room
    # for its second run would depend on how busy this machine is (time.monotonic), not on the tables.
    tuner = Tuner(tiny_job(run=run, **{"time": "10h", **keys}), executor, root)
    return tuner, tuner.run()


def test_parallel_records_what_serial_records(tmp_path, monkeypatch):
    start = tiny_job().start.to_dict()
    _, serial = tune(tmp_path / "serial", Table(start), "s", monkeypatch)
    executor = TableSlots(start, 3)
    _, parallel = tune(tmp_path / "parallel", executor, "p", monkeypatch)
    assert serial.best.knobs == parallel.best.knobs and serial.best.knobs.padding == "padding_free"
    # The same trials, decisions and figures: each trial's runs were on one slot, its seeds the serial ones.
    same_search(parallel.records, serial.records)
    same_figures(parallel.records, serial.records)
    on_disk = RunFolder(tmp_path / "parallel", "p").read_experiments()
    assert [r["trial"] for r in on_disk] == list(range(len(parallel.records)))
    # Every trial ran on one slot (its placement), and the slots shared the work.
    trials = tmp_path / "parallel" / "p" / "trials"
    for record in parallel.records[1:]:
        slots = {path.read_text() for path in trials.glob(f"{record['trial']:03d}-*/slot.txt")}
        assert slots == {record["placement"]["gpu"]}
    assert len({r["placement"]["gpu"] for r in parallel.records[1:]}) > 1
    assert parallel.parallel["slots"] == 3 and parallel.parallel["replayed"] > 0
    assert not (tmp_path / "parallel" / "p" / "speculative").exists()


def test_a_gain_tried_on_a_slower_card_is_judged_on_that_card_alone(tmp_path, monkeypatch):
    # The second card runs at 0.7 of the first: against the baseline's runs on the first card, the x1.3
    # batch change on it would look slower after one run and be screened out. The first card takes 0.3 s
    # of wall time a run, so the second is the first free when that change (trial 3) waits for a slot:
    # with both answering at once, which one frees first is the machine's load, not the tables.
    start = tiny_job().start.to_dict()
    _, serial = tune(tmp_path / "serial", Table(start), "s", monkeypatch)
    executor = TableSlots(start, 2, card_speeds=(1.0, 0.7), sleeps_s=(0.3, 0.0))
    _, parallel = tune(tmp_path / "parallel", executor, "p", monkeypatch)
    same_search(parallel.records, serial.records)
    assert parallel.best.knobs == serial.best.knobs and parallel.best.knobs.per_device_train_batch_size == 2
    slow = [r for r in parallel.records[1:] if r["placement"]["gpu"] == "1"]
    assert any(r["decision"] == "keep" for r in slow), [(r["change"], r["reason"]) for r in slow]
    # Its figures are the slow card's own: the kept ratio holds, the speed is 0.7 of the fast card's.
    kept = next(r for r in slow if r["decision"] == "keep")
    twin = next(r for r in serial.records if r["trial"] == kept["trial"])
    # (within the step noise: a first-run keep compares with that card's own incumbent run)
    assert kept["ratio"] == pytest.approx(twin["ratio"], rel=0.03)
    assert kept["samples_per_s"] == pytest.approx(0.7 * twin["samples_per_s"], rel=0.03)
    # The report says so when the best config's speed and the baseline's come from two cards.
    from autotune.output.report import _other_card

    assert parallel.best.trial == kept["trial"]
    assert _other_card(parallel) == ", on 10.0.0.1 GPU 1; the baseline on 10.0.0.1 GPU 0"
    assert _other_card(serial) == ""


def test_a_lost_slot_is_a_crash_and_the_tune_goes_on(tmp_path, monkeypatch):
    start = tiny_job().start.to_dict()
    # The first card takes 0.3 s a run: the second is free first, whatever this machine's load, and
    # is given a trial even where every trial is decided on one run.
    executor = TableSlots(start, 2, sleeps_s=(0.3, 0.0))
    doomed = executor.slots()[1]
    real = doomed.run

    def lost(spec, trial_dir, timeout_s):
        if not trial_dir.name.startswith("000"):
            doomed.alive = False
            return {"state": "crash", "reason": "node 10.0.0.1 (GPU 1): it was lost mid-trial", "wall_s": 0.1,
                    "placement": {"node": "10.0.0.1", "gpu": "1", "model": "FAKE"}}
        return real(spec, trial_dir, timeout_s)

    doomed.run = lost
    # Nothing here is kept, so every speculation is committed: the lost one too.
    _, outcome = tune(tmp_path / "lost", executor, "c", monkeypatch, only=NOTHING_KEPT)
    crashed = [r for r in outcome.records if r["state"] == "crash"]
    assert len(crashed) == 1 and "lost mid-trial" in crashed[0]["reason"]
    assert [r["trial"] for r in outcome.records] == list(range(len(outcome.records)))
    assert outcome.best.trial == 0 and outcome.parallel["slots_left"] == 1 and len(outcome.records) > 3


def test_the_replay_gives_the_tape_while_it_matches_then_measures_on_the_tapes_slot(tmp_path):
    from autotune.loop.parallel import Tape, _Replay, _same
    from autotune.reasoner import Hypothesis

    start = tiny_job().start.to_dict()
    executor = TableSlots(start, 2)
    slots = executor.slots()
    screen = {"kind": "trial", "knobs": {**start, "padding": "padding_free"}, "ceiling": True}
    incumbent = {"kind": "trial", "knobs": start, "ceiling": False}
    taped = {"state": "complete", "wall_s": 2.0, "measurement": {"samples_per_s": 1.0}}
    tape = Tape(1, Hypothesis.__new__(Hypothesis), (), slots[1], tmp_path / "tape",
                runs=[(_same(screen), taped, tmp_path / "none"), (_same(screen), taped, tmp_path / "none")])
    replay = _Replay(tape, executor)
    assert replay.run(screen, tmp_path / "a", 60) == taped  # the tape's first run
    live = replay.run(incumbent, tmp_path / "b", 60)  # not on the tape: measured now, on the tape's slot
    assert live["placement"]["gpu"] == "1" and (tmp_path / "b" / "slot.txt").read_text() == "1"
    # Once a run was measured live, the rest of the tape (made before it) is not used.
    again = replay.run(screen, tmp_path / "c", 60)
    assert again != taped and replay.position == 1 and replay.live == 2


def test_a_trial_whose_slot_was_lost_before_it_began_runs_whole_on_a_live_slot(tmp_path):
    from autotune.loop.parallel import Tape, _Recording, _Replay
    from autotune.reasoner import Hypothesis

    start = tiny_job().start.to_dict()
    executor = TableSlots(start, 2)
    home, lost = executor.slots()
    lost.alive = False
    tape = Tape(1, Hypothesis.__new__(Hypothesis), (), lost, tmp_path / "tape")
    screen = {"kind": "trial", "knobs": {**start, "padding": "padding_free"}, "ceiling": True}
    incumbent = {"kind": "trial", "knobs": start, "ceiling": False}
    # The speculation found its slot gone before its first run: nothing of it is on the tape ...
    assert _Recording(tape).run(screen, tmp_path / "s", 60)["reason"] == "slot lost before the trial began"
    assert tape.runs == []
    # ... so the committed trial is measured, all of it, on a live slot instead of being a crash.
    replay = _Replay(tape, executor)
    runs = [replay.run(spec, tmp_path / name, 60) for spec, name in ((screen, "a"), (incumbent, "b"), (screen, "c"))]
    assert [r["state"] for r in runs] == ["complete"] * 3
    assert {r["placement"]["gpu"] for r in runs} == {home.where["gpu"]}


def test_an_incumbent_rebuilt_from_records_or_the_knowledge_base_keeps_each_runs_card():
    from autotune.kb.experience import _slim
    from autotune.loop.outcome import Incumbent

    here, there = {"node": "10.0.0.1", "gpu": "0"}, {"node": "10.0.0.1", "gpu": "1"}
    from autotune.config.measurement import Measurement

    run = {"samples_per_s": 2.0, "step_times_s": [0.5, 0.5]}
    incumbent = Incumbent(tiny_job().start, [], 0)
    incumbent.add(Measurement.from_dict(dict(run, placement=here)))
    incumbent.add(Measurement.from_dict(run), placement=there)  # an older record: the placement is the trial's
    incumbent.add(Measurement.from_dict(run))  # a local run: no card
    assert incumbent.runs_on(here) == incumbent.runs_on(there) == incumbent.runs_on(None) == [[0.5, 0.5]]
    assert _slim(dict(run, placement=here, device="cpu"))["placement"] == here
