"""`autotune kb ...`: look into the knowledge base, draw it, share it, prune it.

list, show, history, graph, runs read; export writes a file; import and prune append (the store is
append-only: nothing already written is ever rewritten); repair removes a torn last line. Bad input
is a JobError (one line, exit 2). Ids, names and reasons are printed with control characters escaped.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..util.errors import JobError
from ..config.inputs import check_writable_file, special
from ..util.io import write_json_atomic
from ..kb.beliefs import Beliefs, draw
from ..kb.claims import Claim, Update, condition_text
from ..kb.store import Store, repair
from ..kb.experience import Experience
from ..kb.rows import KbExport
from .kb_args import folder_of as _folder
from .kb_args import store_of as _store
from .kb_import import kb_import
from .kb_import import plain as _plain
from ..reasoner.revise import restructure

TABLES = ("runs", "trials", "claims", "claim_history")


# ------------------------------------------------------------------------------------------- helpers

def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=1, default=str))


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A rich table on a terminal; aligned plain columns otherwise (pipes, files, tests)."""
    if sys.stdout.isatty():
        from rich.table import Table

        from ..output.display import new_console

        table = Table(title=title)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(_plain(x) for x in row))
        new_console().print(table)
        return
    title, rows = _plain(title), [[_plain(x) for x in row] for row in rows]
    print(title)
    widths = [max(len(str(x)) for x in column) for column in zip(columns, *rows)]
    for row in [columns, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def _claim(beliefs: Beliefs, claim_id: str) -> Claim:
    if claim_id not in beliefs:
        raise JobError(f"no claim {claim_id!r} in this knowledge base; `autotune kb list --all` shows the claim ids")
    return beliefs.get(claim_id)


def _number(value: Any, form: str) -> str:
    return format(value, form) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


# ------------------------------------------------------------------------------------------ commands

def kb_list(args: argparse.Namespace) -> int:
    claims = [c for c in Beliefs(_store(args)).claims(active_only=not args.all) if not args.knob or c.knob == args.knob]
    claims.sort(key=lambda c: (c.knob, -c.confidence, c.id))
    if args.json:
        _print_json([c.to_dict() for c in claims])
        return 0
    rows = [[c.id, c.change + (f" from {c.start}" if c.start is not None else ""), c.direction,
             f"x{c.expected_ratio:.2f}", f"{c.confidence:.2f}", str(len(c.evidence)), c.status,
             condition_text(c.condition) or "always", c.origin] for c in claims]
    which = "all claims" if args.all else "active claims"
    _table(f"{len(claims)} {which} in {_folder(args)}",
           ["id", "change", "direction", "ratio", "confidence", "evidence", "status", "condition", "origin"], rows)
    return 0


def kb_show(args: argparse.Namespace) -> int:
    beliefs = Beliefs(_store(args))
    claim = _claim(beliefs, args.claim)
    lineage = beliefs.lineage(claim.id)
    children = beliefs.children(claim.id)
    if args.json:
        _print_json({**claim.to_dict(), "lineage": lineage, "children": children})
        return 0
    a, b = claim.posterior
    status = claim.status + (f" ({claim.status_reason})" if claim.status_reason else "")
    relations = "; ".join(f"{kind} {change}" for kind, change in claim.relations) or "none"
    print(_plain(f"{claim.id}: {claim.change}{f' from {claim.start}' if claim.start is not None else ''} "
                 f"{claim.direction}"))
    for label, value in (("statement", claim.statement or "-"),
                         ("condition", condition_text(claim.condition) or "always (no condition)"),
                         ("source", claim.source or "-"), ("origin", claim.origin),
                         ("prior", f"Beta({claim.alpha:g}, {claim.beta:g})  (ratio x{claim.ratio:g})"),
                         ("posterior", f"Beta({a:g}, {b:g})"),
                         ("confidence", f"{claim.confidence:.3f} (sd {claim.uncertainty:.3f})"),
                         ("expected ratio", f"x{claim.expected_ratio:.3f}"), ("status", status),
                         ("relations", relations),
                         ("lineage", " <- ".join(lineage) + ("" if len(lineage) > 1 else " (no parent)")),
                         ("children", ", ".join(children) or "none")):
        print(f"  {label + ':':<16}{_plain(value)}")
    print(f"  evidence ({len(claim.evidence)}, {claim.agreements} agree):")
    for e in claim.evidence:
        print(_plain(f"    {e.experiment}  x{e.ratio:.3f}  {e.outcome:<7}  "
                     f"{'agrees' if claim.agrees(e) else 'disagrees'}"))
    return 0


def kb_history(args: argparse.Namespace) -> int:
    beliefs = Beliefs(_store(args))
    claim = _claim(beliefs, args.claim)
    events = beliefs.history(claim.id)
    if args.json:
        _print_json(events)
        return 0
    if not events:
        print(_plain(f"{claim.id}: no events; the claim is as defined ({claim.origin})"))
        return 0
    print(_plain(f"{claim.id}: {len(events)} event(s), oldest first"))
    for n, event in enumerate(events, 1):
        op = event["op"]
        if claim.id in (event.get("children") or ()) and event["claim"] != claim.id:
            op = f"{op} of {event['claim']} (created this claim)"
        evidence = event.get("evidence") or {}
        seen = (f"  evidence {evidence.get('experiment')} x{_number(evidence.get('ratio'), '.3f')} "
                f"{evidence.get('outcome', '')}" if evidence else "")
        print(_plain(f"  {n:>3}. {event.get('at', '-')}  {op}  run {event.get('run') or '-'}{seen}"))
        print(_plain(f"       {event.get('reason', '')}"))
    return 0


def kb_graph(args: argparse.Namespace) -> int:
    # A PNG is written whole, by its library: a FIFO, device, socket or looping link is refused here.
    check_writable_file(Path(args.file), "kb graph")
    beliefs = Beliefs(_store(args))
    graph = beliefs.graph
    path = draw(beliefs, Path(args.file).expanduser())
    print(f"wrote {path.resolve()}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges")
    return 0


def kb_runs(args: argparse.Namespace) -> int:
    store = _store(args)
    runs = store.all("runs") if store else []
    if args.json:
        _print_json(runs)
        return 0
    if not runs:
        print(f"no runs recorded in {_folder(args)}")
        return 0
    rows = []
    for r in runs:
        job, trials = r.get("job") or {}, r.get("trials")
        rows.append([str(r.get("run", "-")), str(r.get("run_id", "-")), str(r.get("finished_at", "-")),
                     f"{job.get('model', '-')} max_len={job.get('max_len', '-')} "
                     f"batch={job.get('effective_batch', '-')} {job.get('method', '-')}",
                     str(r.get("device_fingerprint", "-"))[:12],
                     _number((r.get("baseline") or {}).get("samples_per_s"), ".3f"),
                     "x" + _number((r.get("best") or {}).get("speedup"), ".2f"),
                     str(len(trials) if isinstance(trials, list) else trials if trials is not None else "-"),
                     str(r.get("trials_to_best", "-"))])
    _table(f"{len(runs)} run(s) in {_folder(args)}", ["run", "run_id", "when", "job", "device", "baseline samples/s",
                                                     "best", "trials", "trials_to_best"], rows)
    return 0


def _export_target(file: str) -> tuple[Path, int | None]:
    """Where `kb export FILE` writes: (path, None) for a file written whole by rename (a new file, a
    regular one, or the file a link names, the link kept), or (path, fd) for what is written into as
    it is: `-` (stdout), a FIFO with a reader, a character device. Never replaced by a plain file."""
    if file == "-":
        return Path("-"), -1
    path = Path(file).expanduser()
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # a new file; a path under a file is check_writable_file's to word
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise JobError(f"kb export: {path} is a symbolic link that loops; give a file name, a FIFO or - "
                       "(stdout)") from None
    if mode is not None and (stat.S_ISSOCK(mode) or stat.S_ISBLK(mode)):
        raise JobError(f"kb export: {path} is {special(mode)}; give a file name, a FIFO or - (stdout)")
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        try:  # without blocking: a FIFO nobody reads is refused, not waited on
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as error:
            why = "nothing reads it" if error.errno == errno.ENXIO else error.strerror
            raise JobError(f"kb export: {path} is {special(mode)} and {why}; start its reader first, or give "
                           "a file name") from None
        os.set_blocking(fd, True)
        return path, fd
    if os.path.islink(path):
        path = Path(os.path.realpath(path))  # the file the link names is written; the link stays a link
    check_writable_file(path, "kb export")  # before reading: a folder or a read-only path fails fast
    return path, None


def kb_export(args: argparse.Namespace) -> int:
    path, fd = _export_target(args.file)
    try:
        store = _store(args)
        shared = Beliefs(store).export()
        data: KbExport = {"schema_version": 1, "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          "claims": shared["claims"], "claim_history": shared["claim_history"],
                          "runs": Experience(store).runs() if store else [],
                          "trials": Experience(store).trials() if store else []}
        if fd is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, data)
        elif fd < 0:
            _print_json(data)
        else:
            view = memoryview((json.dumps(data, indent=1) + "\n").encode())
            while view:
                view = view[os.write(fd, view):]
    finally:
        if fd is not None and fd >= 0:
            os.close(fd)
    print(f"exported {len(data['claims'])} claims, {len(data['claim_history'])} history events, "
          f"{len(data['runs'])} runs, {len(data['trials'])} trials to {'stdout' if file_is_stdout(path) else path}",
          file=sys.stderr if file_is_stdout(path) else sys.stdout)
    return 0


def file_is_stdout(path: Path) -> bool:
    return str(path) == "-"


def kb_repair(args: argparse.Namespace) -> int:
    """What a torn-line error says to run: remove the torn last line of each table, and only that."""
    folder = _folder(args)
    done = repair(folder, dry_run=args.dry_run) if folder.is_dir() else []
    if not done:
        print(_plain(f"nothing to repair in {folder}: no table file ends in a torn line"))
    for fix in done:
        verb = "would remove" if args.dry_run else "removed"
        print(_plain(f"{verb} torn line {fix.line} of {fix.path} ({fix.removed_bytes} bytes, an append that "
                     f"never completed): {fix.preview}"))
    if args.dry_run:
        print("dry run: nothing was changed" + (f"; `autotune kb repair --kb {_plain(folder)}` does it" if done else ""))
        return 0
    if folder.is_dir():
        store = Store(folder)
        for table in TABLES:  # what repair cannot fix (a bad complete line) is named now, not at the next run
            store.all(table)
    return 0


def kb_prune(args: argparse.Namespace) -> int:
    beliefs = Beliefs(_store(args, writing=not args.dry_run))
    updates: list[Update] = []
    for claim in beliefs.claims(active_only=True):
        last = claim.evidence[-1].experiment if claim.evidence else "none"
        updates += [replace(u, run=u.run or "kb prune") for u in restructure(claim, last)]
    if not updates:
        print("nothing to prune: every active claim is still coherent with its evidence")
        return 0
    if args.dry_run:
        done = [(u.op, u.claim, [c.id for c in u.children], u.reason) for u in updates]
    else:
        done = [(e["op"], e["claim"], e["children"], e["reason"]) for e in beliefs.apply(updates)]
    print(f"{'would apply' if args.dry_run else 'applied'} {len(done)} update(s)"
          f"{' (dry run: nothing written)' if args.dry_run else ''}:")
    for op, claim_id, children, reason in done:
        print(_plain(f"  {op} {claim_id}{' -> ' + ', '.join(children) if children else ''}: {reason}"))
    return 0


# ---------------------------------------------------------------------------------------------- parser

def add_parser(commands: Any) -> None:
    kb = commands.add_parser("kb", help="inspect, draw, share and prune the knowledge base",
                             description="The knowledge base: claims (beliefs), their history, and recorded runs.")
    sub = kb.add_subparsers(dest="kb_command", metavar="KB_COMMAND", required=True)
    where = ("knowledge-base folder (default: $AUTOTUNE_KB, else ~/.autotune/kb)")

    def command(name: str, handler: Any, help_: str, json_: bool = False) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help_, description=help_)
        parser.add_argument("--kb", metavar="PATH", default="", help=where)
        if json_:
            parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.set_defaults(handler=handler)
        return parser

    listing = command("list", kb_list, "the claims, sorted by knob then confidence", json_=True)
    listing.add_argument("--all", action="store_true", help="also split and deleted claims")
    listing.add_argument("--knob", metavar="K", help="only claims about this knob")
    command("show", kb_show, "one claim in full, with its evidence", json_=True).add_argument("claim", metavar="CLAIM")
    command("history", kb_history, "the events of one claim, oldest first",
            json_=True).add_argument("claim", metavar="CLAIM")
    command("graph", kb_graph, "draw the belief graph to a PNG").add_argument(
        "file", metavar="FILE", nargs="?", default="kb_graph.png", help="default: kb_graph.png here")
    command("runs", kb_runs, "the runs recorded", json_=True)
    command("export", kb_export, "write learned claims, their history, runs and trials to a JSON file").add_argument(
        "file", metavar="FILE", help="a file (written whole or not at all), a FIFO or device (written into), or - for "
                                     "stdout")
    command("import", kb_import, "merge a file written by `kb export`, without duplicates").add_argument(
        "file", metavar="FILE")
    command("prune", kb_prune, "split or delete the active claims their evidence calls for").add_argument(
        "--dry-run", action="store_true", help="only list what would change")
    command("repair", kb_repair, "remove the torn last line a killed writer left in a table file").add_argument(
        "--dry-run", action="store_true", help="only say what would be removed")


__all__ = ["add_parser"]
