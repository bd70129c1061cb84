"""The knowledge-base store: validated records, append-only files that survive SIGKILL, shared folders.

Figures (kills, torn lines, writers, lookup latency) are printed; run with `-s` to see them.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.util.errors import RecordError
from autotune.kb.store import (CorruptFileError, InvalidRecordError, Repair, Store, TornLineError,
                               repair)


def run(job: str = "job-a", device: str = "dev-1", **fields) -> dict:
    return {"schema_version": 1, "job_fingerprint": job, "device_fingerprint": device, **fields}


# One writer process: appends `count` runs records and prints "id tag" after each append returns.
# It prints "ready" after its first append; tear_after >= 0: on that many appends later, it writes half of the
# line and SIGKILLs itself (a torn write, on purpose).
WRITER = r"""
import os, random, signal, sys, time
from pathlib import Path
from autotune.kb.store import Store

folder, tag, count, seed, tear_after, big_share, wait = sys.argv[1:8]
count, tear_after, big_share = int(count), int(tear_after), float(big_share)
rng = random.Random(int(seed))
if wait == "wait":  # start together with the other writers
    while not Path(folder, "go").exists():
        time.sleep(0.001)
store = Store(folder)
if tear_after >= 0:
    real_write, done = os.write, [0]
    def tearing_write(fd, data):
        if done[0] == tear_after + 1:  # counted after the first append
            real_write(fd, data[: max(1, len(data) // 2)])
            os.kill(os.getpid(), signal.SIGKILL)
        return real_write(fd, data)
    os.write = tearing_write
for i in range(count):
    pad = rng.randint(16_000, 64_000) if rng.random() < big_share else rng.randint(0, 300)
    record = {"schema_version": 1, "job_fingerprint": "job-" + tag, "device_fingerprint": "dev",
              "run": f"{tag}/{i}", "pad": "x" * pad}
    record_id = store.append("runs", record)
    if tear_after >= 0:
        done[0] += 1
    print(record_id, f"{tag}/{i}", flush=True)
    if i == 0:
        print("ready", flush=True)  # imports done, schemas loaded: appending at full speed from here
"""


def start_writer(folder: Path, tag: str, count: int, seed: int, tear_after: int = -1, big_share: float = 0.0,
                 wait: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder), tag, str(count), str(seed), str(tear_after), str(big_share),
         "wait" if wait else "now"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reported(stdout: str) -> dict[int, str]:
    """id -> tag of every append the writer finished and reported (a line cut by the kill is not one)."""
    done = {}
    for line in stdout.splitlines(keepends=True):
        if line.endswith("\n") and line != "ready\n":
            record_id, tag = line.split()
            assert int(record_id) not in done
            done[int(record_id)] = tag
    return done


# --------------------------------------------------------------------------------------- round trip

def test_records_round_trip_and_other_stores_see_them(tmp_path):
    store = Store(tmp_path)
    assert store.all("runs") == [] and store.get("runs", 1) is None
    assert store.append("runs", run(knobs=("bf16", 1), run="r1")) == 1
    assert store.append("runs", run(device="dev-2", run="r2")) == 2
    assert store.append("claims", {"schema_version": 1, "claim": "c1", "alpha": 2.0}) == 1
    assert store.extend("trials", [{"schema_version": 1, "trial": n} for n in range(3)]) == [1, 2, 3]
    assert store.all("runs")[0]["knobs"] == ["bf16", 1]  # stored as JSON: a tuple comes back a list
    assert [r["run"] for r in store.search("runs", job_fingerprint="job-a")] == ["r1", "r2"]
    assert store.search("runs", job_fingerprint="job-a", device_fingerprint="dev-2")[0]["run"] == "r2"
    assert store.items("trials", trial=2) == [(3, {"schema_version": 1, "trial": 2})]

    copy = store.get("runs", 1)
    copy["knobs"].append("changed")
    assert store.get("runs", 1)["knobs"] == ["bf16", 1]  # handed-out records are copies

    other = Store(tmp_path)  # another tuner on the same folder
    assert other.all("runs") == store.all("runs") and other.all("claims")[0]["claim"] == "c1"
    assert other.append("runs", run(run="r3")) == 3
    assert [r["run"] for r in store.all("runs")] == ["r1", "r2", "r3"]  # the first store takes it in
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["claims.jsonl", "runs.jsonl", "trials.jsonl"]
    line = json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[2])
    assert line == {"id": 3, "record": run(run="r3")}
    with pytest.raises(RecordError, match="unknown knowledge-base table 'nope'"):
        store.all("nope")


@pytest.mark.parametrize("bad, why", [
    ({"job_fingerprint": "j", "device_fingerprint": "d"}, "'schema_version' is a required property"),
    (run(job=5), "at job_fingerprint: 5 is not of type 'string'"),
    ({**run(), "schema_version": 2}, "at schema_version: 1 was expected"),
    ({"schema_version": 1, "job_fingerprint": "j"}, "'device_fingerprint' is a required property"),
    (run(speed=float("nan")), "not plain JSON"),
    (run(when=object()), "not plain JSON"),
    (["schema_version", 1], "must be a JSON object"),
])
def test_an_invalid_record_is_refused_and_nothing_is_written(tmp_path, bad, why):
    store = Store(tmp_path)
    with pytest.raises(InvalidRecordError, match=why):
        store.append("runs", bad)
    assert not (tmp_path / "runs.jsonl").exists()
    store.append("runs", run())
    before = (tmp_path / "runs.jsonl").read_bytes()
    with pytest.raises(InvalidRecordError, match=why):
        store.append("runs", bad)
    with pytest.raises(InvalidRecordError, match="#2 of the batch"):
        store.extend("runs", [run(), bad, run()])  # one bad record: none of the batch is written
    assert (tmp_path / "runs.jsonl").read_bytes() == before
    assert len(Store(tmp_path).all("runs")) == 1


# --------------------------------------------------------------------------------- damaged files

def edit_line(path: Path, number: int, old: str, new: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new)
    path.write_text("".join(lines))


@pytest.mark.parametrize("old, new, why", [
    ('"job_fingerprint":"job-a"', '"job_fingerprint":5',
     "record 2 is not valid against kb_run.json: at job_fingerprint"),
    ('"record":{', '"record":[', "line 2: not JSON"),
    ('"id":2', '"id":1', "id 1 does not follow id 1"),
])
def test_a_hand_edited_invalid_line_is_reported_with_file_and_line(tmp_path, old, new, why):
    store = Store(tmp_path)
    for n in range(3):
        store.append("runs", run(run=f"r{n}"))
    path = tmp_path / "runs.jsonl"
    edit_line(path, 2, old, new)
    for reader in (Store(tmp_path), store):  # a fresh open and a store that had read the file before
        with pytest.raises(CorruptFileError, match=why) as caught:
            reader.all("runs")
        assert not isinstance(caught.value, TornLineError)
        assert caught.value.path == path and caught.value.line == 2
        assert str(path) in str(caught.value) and "line 2" in str(caught.value)
        assert "by hand" in str(caught.value)  # how to recover
    with pytest.raises(CorruptFileError):
        store.append("runs", run())  # nothing is appended to a file that reads wrong
    assert repair(tmp_path) == []  # repair never removes a complete line


def test_the_checked_prefix_cache_does_not_hide_an_edit(tmp_path):
    store = Store(tmp_path)
    store.extend("runs", [run(run=f"r{n}") for n in range(300)])
    assert (tmp_path / ".runs.checked.json").exists()  # written once 256 new lines passed the schema
    assert len(Store(tmp_path).all("runs")) == 300
    edit_line(tmp_path / "runs.jsonl", 100, '"schema_version":1', '"schema_version":2')  # same length
    with pytest.raises(CorruptFileError, match=r"runs.jsonl, line 100: record 100 is not valid.*schema_version"):
        Store(tmp_path).all("runs")


def test_a_torn_last_line_is_reported_and_repair_removes_only_it(tmp_path):
    store = Store(tmp_path)
    for n in range(3):
        store.append("runs", run(run=f"r{n}"))
    path = tmp_path / "runs.jsonl"
    intact = path.read_bytes()
    torn = json.dumps({"id": 4, "record": run(run="r3")}).encode()[:25]
    path.write_bytes(intact + torn)  # what a writer killed halfway through its write leaves
    for reader in (Store(tmp_path), store):
        with pytest.raises(TornLineError) as caught:
            reader.all("runs")
        message = str(caught.value)
        assert caught.value.path == path and caught.value.line == 4
        assert str(path) in message and "line 4: the last line is torn (25 bytes" in message
        assert f"`autotune kb repair --kb {tmp_path}`" in message and "no finished record is lost" in message
    with pytest.raises(TornLineError):
        store.append("runs", run(run="after"))  # never glued onto the torn line
    assert path.read_bytes() == intact + torn

    fixed = store.repair()
    assert fixed == [Repair(path, 4, 25, repr(torn.decode()))]
    assert "removed torn line 4 (25 bytes" in str(fixed[0])
    assert path.read_bytes() == intact
    assert repair(tmp_path) == []
    assert [r["run"] for r in store.all("runs")] == ["r0", "r1", "r2"]
    assert store.append("runs", run(run="r3")) == 4


# ------------------------------------------------------------------------------------- fault test

def test_sigkill_at_random_moments_loses_no_completed_record(tmp_path):
    rng = random.Random(4)
    rounds, tear_rounds = 40, set(random.Random(5).sample(range(40), 6))
    path = tmp_path / "runs.jsonl"
    completed: dict[int, str] = {}
    kills = torn_seen = checks = 0
    started = time.perf_counter()
    for r in range(rounds):
        tear_after = rng.randint(0, 5) if r in tear_rounds else -1
        writer = start_writer(tmp_path, f"r{r}", 10**6, seed=r, tear_after=tear_after, big_share=0.05)
        head = [writer.stdout.readline()]
        if head[-1] != "ready\n":
            head.append(writer.stdout.readline())
        if head[-1] != "ready\n":
            writer.kill()
            pytest.fail(f"writer {r} did not start: {head} {writer.communicate()[1]}")
        if tear_after < 0:
            time.sleep(rng.uniform(0.0, 0.1))
            writer.send_signal(signal.SIGKILL)
            kills += 1
        # The rest through the stream readline() used: it may hold lines already read from the pipe, which
        # communicate() (reading the pipe itself) would skip, and those appends would look unreported.
        out, err = writer.stdout.read(), writer.stderr.read()
        writer.wait(timeout=60)
        assert writer.returncode == -signal.SIGKILL, err
        completed.update(reported("".join(head) + out))

        before = path.read_bytes() if path.exists() else b""
        try:
            records = dict(Store(tmp_path).items("runs"))
        except TornLineError as error:  # the only damage allowed: the last line, cut off
            torn_seen += 1
            keep = before.rfind(b"\n") + 1
            assert error.path == path and error.line == before.count(b"\n") + 1
            assert [(f.path, f.removed_bytes) for f in repair(tmp_path)] == [(path, len(before) - keep)]
            assert path.read_bytes() == before[:keep]
            records = dict(Store(tmp_path).items("runs"))
        for record_id, tag in completed.items():
            assert records[record_id]["run"] == tag, f"round {r}: record {record_id} ({tag}) lost"
            checks += 1
        tags = [record["run"] for record in records.values()]
        assert len(tags) == len(set(tags))
        assert list(records) == list(range(1, len(records) + 1))
        # appended but not yet reported when the kill came: at most one per round
        assert len(completed) <= len(records) <= len(completed) + r + 1
    assert torn_seen >= len(tear_rounds)
    print(f"\nkill test: {kills} SIGKILLs at random moments + {len(tear_rounds)} writers killed mid-write, "
          f"{len(records)} records in the store, {len(completed)} reported complete, {checks} record checks, "
          f"{torn_seen} torn last lines seen and repaired ({torn_seen - len(tear_rounds)} from random kills), "
          f"{path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - started:.1f} s")


def test_four_writers_at_once_lose_nothing_and_duplicate_nothing(tmp_path):
    writers = [start_writer(tmp_path, f"w{w}", 200, seed=w, wait=True) for w in range(4)]
    (tmp_path / "go").touch()
    done: dict[int, str] = {}
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        ids = reported(out)
        assert len(ids) == 200 and not set(ids) & set(done)
        done.update(ids)
    records = dict(Store(tmp_path).items("runs"))
    assert sorted(records) == list(range(1, 801))
    assert {record_id: record["run"] for record_id, record in records.items()} == done
    assert sorted(done.values()) == sorted(f"w{w}/{i}" for w in range(4) for i in range(200))
    order = [records[i]["run"].split("/")[0] for i in sorted(records)]
    switches = sum(a != b for a, b in zip(order, order[1:]))
    print(f"\n4 writers x 200 appends: {len(records)} records, none lost, none duplicated, "
          f"writer changed {switches} times along the file")


# ----------------------------------------------------------------------------------------- lookup

def test_lookup_by_job_and_device_fingerprint_among_10000_runs_finds_the_one_run(tmp_path):
    """The right run among 10,000, cached or not. How long it takes is printed, not asserted: a loaded
    machine's seconds are a benchmark's business."""
    rng = random.Random(1)
    records = [run(job=f"job-{n % 2000:04d}", device=f"dev-{n % 7}", run=f"run-{n}", samples_per_s=rng.random(),
                   knobs={"per_device_train_batch_size": 4, "bf16": True, "gradient_checkpointing": False},
                   trials=[{"trial": k, "ratio": 1.0 + k / 100} for k in range(8)]) for n in range(10_000)]
    Store(tmp_path).extend("runs", records)
    expected = [r["run"] for r in records if r["job_fingerprint"] == "job-0123" and r["device_fingerprint"] == "dev-4"]
    assert len(expected) == 1  # n = 123 + 2000k with n % 7 == 4

    start = time.perf_counter()
    store = Store(tmp_path)  # a fresh process's first lookup: the whole file is read
    found = store.search("runs", job_fingerprint="job-0123", device_fingerprint="dev-4")
    cold = time.perf_counter() - start
    start = time.perf_counter()
    again = store.search("runs", job_fingerprint="job-0456", device_fingerprint="dev-2")
    warm = time.perf_counter() - start
    (tmp_path / ".runs.checked.json").unlink()
    start = time.perf_counter()
    unchecked = Store(tmp_path).search("runs", job_fingerprint="job-0123", device_fingerprint="dev-4")
    full = time.perf_counter() - start

    assert [r["run"] for r in found] == expected and unchecked == found
    assert [r["run"] for r in again] == ["run-6456"]
    size = (tmp_path / "runs.jsonl").stat().st_size / 1e6
    print(f"\nlookup by job+device fingerprint among 10,000 runs ({size:.1f} MB):"
          f" first in a fresh Store {cold * 1000:.0f} ms, then {warm * 1000:.1f} ms;"
          f" fresh Store with every record schema-checked again (no cache) {full * 1000:.0f} ms")
