"""Every process a trial started ends with the trial, and autotune's own helpers end with the CLI.

A trial runs in its own session, so killing its process group reaches its loader workers; but a script
may fork a child that calls setsid (a daemon, a server it starts), which leaves the group. Three ways
find those:
- the trial process is a child subreaper (Linux prctl): an orphan of the script reparents to it, not
  to init, so at its end it ends every descendant it has (`end_descendants`);
- every process of a trial carries its tag in the environment (TAG_ENV), inherited through fork and
  exec, which the tuner looks for in /proc when the trial ends, however it ended (`end_trial`);
- the CLI process is a subreaper too: where a trial dies before it could clean up, its orphans
  reparent to the tuner, and the tuner's own children started since the trial began, in another
  session and not its own helpers, are ended with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

TAG_ENV = "AUTOTUNE_TRIAL_TAG"


def short_tmp_name(tag: str) -> str:
    """The name of a trial's short temporary folder (under /tmp, where its own folder's path is too long
    for sockets): found again by the trial itself when its tuner is gone, as by the executor."""
    return f"autotune-{os.getuid()}-{tag}"
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
ROUNDS = 20
_reaping = False   # whether this process was made a subreaper (orphans reparent to it only then)
_before: bool | None = None   # the status before `become_subreaper`, for `give_back_subreaper`


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def is_subreaper() -> bool:
    """Whether orphaned descendants of this process reparent to it (Linux prctl; False elsewhere)."""
    libc = _libc()
    if libc is None:
        return False
    flag = ctypes.c_int(0)
    try:
        return libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value != 0
    except AttributeError:
        return False


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; False where the OS has no such thing."""
    global _reaping, _before
    libc = _libc()
    if libc is None:
        return False
    if _before is None:
        _before = is_subreaper()
    try:
        _reaping = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except AttributeError:
        _reaping = False
    return _reaping


def give_back_subreaper() -> None:
    """The status `become_subreaper` found, back: a caller whose process goes on after the command (the
    CLI's `main()` called in Python) is not left the reaper of every orphan below it, such as the
    detached processes of a server it started."""
    global _reaping, _before
    libc = _libc()
    if libc is None or _before is None:
        return
    try:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, int(_before), 0, 0, 0)
    except AttributeError:
        return
    _reaping, _before = _before, None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every living descendant of `pid` (Linux /proc; empty elsewhere)."""
    out, pending = [], _children(pid)
    while pending:
        child = pending.pop()
        if child not in out:
            out.append(child)
            pending += _children(child)
    return out


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None for a process gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def tagged(tag: str) -> list[int]:
    """This user's processes whose environment holds TAG_ENV=tag."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid == os.getuid() and needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _start_ticks(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[19]) if fields else 0   # field 22 of stat: start time in clock ticks since boot


def now_ticks() -> int:
    """The clock `_start_ticks` reads, now: a trial's start, to know the orphans that came after it."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _orphans(since: int, known: set[int]) -> list[int]:
    """This process's children that reparented to it (it is a subreaper): started after `since`, in a
    session of their own, and none of `known` (its helpers and live trials)."""
    if not _reaping:
        return []
    own = os.getsid(0)
    out = []
    for pid in _children(os.getpid()):
        try:
            if pid not in known and _start_ticks(pid) >= since and os.getsid(pid) not in (own, *known):
                out.append(pid)
        except OSError:
            continue
    return out


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _reap(pids: list[int] | set[int], wait_s: float = 1.0) -> None:
    """Collect the exit of those that are this process's children (orphans that reparented here), so
    that none is left a zombie for a parent that may be gone before it could collect it."""
    pending = set(pids) & set(_children(os.getpid()))
    deadline = time.monotonic() + wait_s
    while pending:
        for pid in list(pending):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    pending.discard(pid)
            except ChildProcessError:
                pending.discard(pid)
        if not pending or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def end_descendants() -> None:
    """SIGKILL every descendant of this process, orphans that reparented to it included, until none is left."""
    for _ in range(ROUNDS):
        found = [p for p in descendants(os.getpid()) if _alive(p)]
        if not found:
            return
        _kill(found)
        _reap(found)
        time.sleep(0.02)


def end_trial(tag: str, pid: int | None = None, since: int = 0, known: frozenset[int] | set[int] = frozenset()) -> None:
    """End everything a trial started: every process carrying its tag; with `pid` (the trial's process,
    its session's leader, while it has not been waited for) its group and its descendants; with `since`
    (the trial's start) and `known` (the processes to spare), orphans that reparented to this process."""
    spare = {*known, *([pid] if pid else [])}
    for _ in range(ROUNDS):
        orphans = set(_orphans(since, spare)) if since else set()
        found = {*tagged(tag), *orphans}
        if pid is not None:
            found.update(descendants(pid))
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        alive = [p for p in found if p != pid and _alive(p)]
        _kill(alive)
        _reap({*alive, *orphans})   # orphans already dead are zombies of this process: collected too
        if not alive:
            return
        time.sleep(0.02)


def helpers() -> set[int]:
    """The pids of multiprocessing's fork server and resource tracker in this process, where running."""
    from multiprocessing import forkserver, resource_tracker

    pids = {getattr(forkserver._forkserver, "_forkserver_pid", None),
            getattr(resource_tracker._resource_tracker, "_pid", None)}
    return {p for p in pids if p}


def stop_helpers(wait_s: float = 5.0) -> None:
    """Stop the fork server and the resource tracker this process started: they hold the caller's
    stdout, so `autotune tune ... | tee log` would not end while they live. Only for a process about to
    exit (the CLI's entry point): a library caller's next tune would start them again. Each is asked to
    stop (its pipe closed) and killed if it has not within `wait_s` (the tracker waits for every holder
    of its pipe, and one left by a trial would keep it forever)."""
    import threading
    from multiprocessing import forkserver, resource_tracker

    for helper, pid_name in ((forkserver._forkserver, "_forkserver_pid"), (resource_tracker._resource_tracker, "_pid")):
        pid = getattr(helper, pid_name, None)
        if not pid:
            continue

        def stop(helper: object = helper) -> None:
            try:
                helper._stop()  # type: ignore[attr-defined]
            except (OSError, AttributeError, ChildProcessError):
                pass

        stopping = threading.Thread(target=stop, name="autotune-stop-helper", daemon=True)
        stopping.start()
        stopping.join(wait_s)
        if stopping.is_alive():
            _kill([pid])
            stopping.join(wait_s)
