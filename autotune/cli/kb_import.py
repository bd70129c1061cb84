"""`autotune kb import FILE`: merge a file written by `kb export`, all of it or nothing.

Everything is checked before anything is written: the file's shape, every id and name (plain printable
text: an id with terminal escape bytes could rewrite what a later `kb list` shows), every claim and
history event, and every record against its table's schema. Then the new claims, events, runs and
trials go in as one change (`Store.extend_all`), so an import that fails writes nothing at all;
one run again skips what is already there.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Mapping, TypeVar, cast

from ..util.errors import JobError, RecordError
from ..config.inputs import check_not_special, check_writable_folder, read_json
from ..kb.beliefs import Beliefs
from ..kb.claims import Claim, Evidence, Update
from ..config.types import JsonObject
from ..kb.rows import KbExport
from ..kb.store import InvalidRecordError
from .kb_args import folder_of, store_of

TABLES = ("runs", "trials", "claims", "claim_history")
Record = TypeVar("Record", bound=Mapping[str, object])


def plain(value: Any) -> str:
    """The text as printed: control and escape characters shown escaped, never sent to the terminal raw."""
    text = str(value)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _read_export(path: Path) -> KbExport:
    """The export file, its shape checked before anything is written (one JobError line otherwise)."""
    check_not_special(path, "kb import")
    if not path.is_file():
        raise JobError(f"kb import: {path} does not exist (write one with `autotune kb export FILE`)")
    # Bounded before it is decoded (size, depth, digits of a number); one line naming the file otherwise.
    data = read_json(path, "kb import", hint="give a file written by `autotune kb export FILE`")

    def bad(why: str) -> JobError:
        return JobError(f"kb import: {path} is not a knowledge-base export ({why})")

    if not isinstance(data, dict) or data.get("schema_version") != 1:
        raise bad("expected an object with schema_version 1")
    for table in TABLES:
        if not isinstance(data.get(table, []), list) or not all(isinstance(x, dict) for x in data.get(table, [])):
            raise bad(f"{table} must be a list of objects")
        if any(x.get("schema_version") != 1 for x in data.get(table, []) if table != "claim_history"):
            raise bad(f"a record of {table} lacks schema_version 1")
    for run in data.get("runs", []):
        if not all(isinstance(run.get(k), str) and run.get(k) for k in ("run_id", "job_fingerprint",
                                                                         "device_fingerprint")):
            raise bad("a run lacks run_id, job_fingerprint or device_fingerprint")
    for trial in data.get("trials", []):
        if "trial" in trial and (isinstance(trial["trial"], bool) or not isinstance(trial["trial"], int)):
            raise bad("a trial's number is not a whole number")
        if any(k in trial and not (isinstance(trial[k], str) and trial[k]) for k in ("job_fingerprint",
                                                                                   "device_fingerprint")):
            raise bad("a trial has an empty job or device fingerprint")
    for event in data.get("claim_history", []):
        if not isinstance(event.get("children") or [], list):
            raise bad("a history event's children are not a list of claim ids")
        if event.get("evidence") is not None and not isinstance(event["evidence"], dict):
            raise bad("a history event's evidence is not an object")
    for table, field_, value in _names(data):
        if not isinstance(value, str) or not value.isprintable() or len(value) > MAX_NAME:
            raise JobError(f"kb import: {path}: {table} {field_} {plain(repr(value))[:MAX_NAME + 20]} is not plain "
                           f"printable text of at most {MAX_NAME} characters (no control or escape characters); "
                           f"nothing was written")
    return cast(KbExport, data)  # its shape as checked here; each record is checked again before it is written


MAX_NAME = 200  # characters of an id or a name: enough for any id autotune makes, short enough to print


def _names(data: JsonObject) -> Iterator[tuple[str, str, object]]:
    """(table, field, value) of every id and name in an export: what is printed and looked up by. `data`:
    the file as read, whose ids are not yet known to be text."""
    for claim in data.get("claims", []):
        yield "claim", "id", claim.get("id")
        if claim.get("parent") is not None:
            yield "claim", "parent", claim.get("parent")
    for event in data.get("claim_history", []):
        yield "history event", "claim", event.get("claim")
        for child in event.get("children") or ():
            yield "history event", "child", child
        if event.get("run"):
            yield "history event", "run", event.get("run")
        if isinstance(event.get("evidence"), dict):
            yield "history event", "experiment", event["evidence"].get("experiment")
    for table in ("runs", "trials"):
        for record in data.get(table, []):
            for field_ in ("run_id", "run", "experiment", "job_fingerprint", "device_fingerprint"):
                if field_ in record:
                    yield table[:-1], field_, record[field_]


def _updates(data: KbExport, path: Path, imported: dict[str, Claim], beliefs: Beliefs) -> tuple[list[Update], int]:
    """The history events as Updates (each once), and how many speak of a claim known neither here nor there."""
    updates, keys, unknown = [], set(), 0
    for event in data.get("claim_history", []):
        try:
            if event["claim"] not in imported and event["claim"] not in beliefs:
                unknown += 1
                continue
            children = tuple(imported[i] if i in imported else beliefs.get(i) for i in event.get("children") or ())
            evidence = Evidence.from_dict(event["evidence"]) if event.get("evidence") else None
            update = Update(str(event["op"]), event["claim"], str(event.get("reason", "")), evidence=evidence,
                            children=children, run=str(event.get("run") or ""))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise JobError(f"kb import: {path}: a history event is not valid ({error!r})") from None
        key = (update.op, update.claim, evidence.experiment if evidence else None, tuple(c.id for c in children))
        if key not in keys:
            keys.add(key)
            updates.append(update)
    return updates, unknown


def _check_no_cycle(imported: dict[str, Claim], beliefs: Beliefs, path: Path) -> None:
    """No imported claim is its own ancestor (through the claims here and in the file): a lineage that
    loops would make `kb show` and every walk up the parents endless."""
    def parent(claim_id: str) -> str | None:
        claim = imported.get(claim_id) or (beliefs.get(claim_id) if claim_id in beliefs else None)
        return claim.parent if claim is not None else None

    for start in imported:
        seen, at = {start}, parent(start)
        while at is not None:
            if at in seen:
                raise JobError(f"kb import: {path}: the parents of claim {plain(start)[:MAX_NAME]!r} form a cycle "
                               f"(through {plain(at)[:MAX_NAME]!r}); a claim is split from an older one, never "
                               "from itself; nothing was written")
            seen.add(at)
            at = parent(at)


def _new(records: list[Record], have: set[Hashable], key: Callable[[Record], Hashable]) -> list[Record]:
    """The records whose key is in neither `have` nor an earlier record of the list."""
    fresh = []
    for record in records:
        if key(record) not in have:
            have.add(key(record))
            fresh.append(record)
    return fresh


def kb_import(args: argparse.Namespace) -> int:
    """Everything is checked first (shape, ids, claims, events, every record's schema), then written as
    one change: a file with one bad record writes nothing at all."""
    path = Path(args.file).expanduser()
    data = _read_export(path)
    try:
        imported = {c.id: c for c in (Claim.from_definition(d) for d in data.get("claims", []))}
    except (RecordError, KeyError, TypeError, ValueError, AttributeError) as error:
        raise JobError(f"kb import: {path}: a claim definition is not valid ({error}); nothing was written") from None
    check_writable_folder(folder_of(args), f"--kb {folder_of(args)}")
    _check_no_cycle(imported, Beliefs(store_of(args)), path)  # before the folder is made
    store = store_of(args, writing=True)
    beliefs = Beliefs(store)
    updates, unknown = _updates(data, path, imported, beliefs)
    new_claims = [c for c in imported.values() if c.id not in beliefs]
    try:
        definitions, events = beliefs.plan(updates, define=new_claims)
    except RecordError as error:
        raise JobError(f"kb import: {path}: {error}; nothing was written") from None
    runs = _new(data.get("runs", []), {r.get("run_id") for r in store.all("runs")}, lambda r: r["run_id"])
    trials = _new(data.get("trials", []), {(t.get("run_id"), t.get("trial")) for t in store.all("trials")},
                  lambda t: (t.get("run_id"), t.get("trial")))
    try:
        store.extend_all({"claims": definitions, "claim_history": events, "runs": runs, "trials": trials})
    except InvalidRecordError as error:
        raise JobError(f"kb import: {path}: {plain(error)}") from None
    applied = beliefs.fold(definitions, events)
    history = len(data.get("claim_history", []))
    print(plain(f"imported from {path} into {store.folder}:"))
    print(f"  claims:  {len(new_claims)} added, {len(imported) - len(new_claims)} skipped (already known)")
    print(f"  history: {len(applied)} events applied, {history - len(applied)} skipped (already folded"
          f"{f'; {unknown} about claims unknown here' if unknown else ''})")
    print(f"  runs:    {len(runs)} added, {len(data.get('runs', [])) - len(runs)} skipped (already recorded)")
    print(f"  trials:  {len(trials)} added, {len(data.get('trials', [])) - len(trials)} skipped (already recorded)")
    return 0
