"""Bounds on what autotune reads, checked before it is parsed, and paths checked before they are written.

A number on the command line has at most MAX_DIGITS digits (Python refuses to convert past 4,300 and a
float of 400 digits is infinite); JSON nests at most MAX_JSON_DEPTH deep (the decoder recurses); a YAML
file's aliases expand to at most MAX_YAML_NODES nodes (nested aliases grow exponentially: a few lines
make a billion-node tree). Each refusal is one `JobError` line naming the key or the file.
"""

from __future__ import annotations

import json
import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..util.errors import JobError

MAX_DIGITS = 18          # 10**18 rows, tokens or seconds is beyond any job; 2**63 has 19 digits
MAX_WORD_CHARS = 4096    # one key=value word: a path is at most 4096 bytes on Linux
NAME_MAX = 255           # bytes of one file or folder name (Linux, macOS)
PATH_KEYS = ("model", "dataset", "kb", "ssh_key", "ssh_config", "script", "script_configs", "config", "from")
MAX_JSON_DEPTH = 64      # records nest a handful deep; a hostile file may nest 200,000 deep
MAX_JSON_BYTES = 512 * 2**20
MAX_CONFIG_BYTES = 16 * 2**20  # a config file (YAML, JSON, config.json) is kilobytes
MAX_YAML_NODES = 100_000       # a large real config has a few thousand
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")
_DIGIT_RUN = re.compile(r"\d+")


def shown(text: str, limit: int = 60) -> str:
    """`text` quoted for a message, shortened: a 5,000-digit value must not make a 5,000-character line."""
    return repr(text) if len(text) <= limit else f"{text[:limit // 2]!r}...({len(text)} characters)"


def check_digits(key: str, text: str) -> None:
    """A number's text has at most MAX_DIGITS digits in a row, so converting it can neither fail nor overflow."""
    longest = max((len(run) for run in _DIGIT_RUN.findall(text)), default=0)
    if longest > MAX_DIGITS:
        raise JobError(f"{key}={shown(text)}: a number of {longest} digits; numbers here have at most {MAX_DIGITS}")


def check_word(word: str) -> None:
    """One command-line word is at most MAX_WORD_CHARS long (checked before it is split or converted) and
    holds no control character: an escape code in gpu= or a name would reach the progress line, the
    report and the records (a tab passes: it is text)."""
    key, sep, _ = word.partition("=")
    if len(word) > MAX_WORD_CHARS:
        what = f"{key}= has a value of" if sep and key.isidentifier() and len(key) <= 40 else f"{shown(word)} has"
        raise JobError(f"{what} {len(word)} characters; a word here has at most {MAX_WORD_CHARS}")
    bad = next((c for c in word if (ord(c) < 32 and c != "\t") or 127 <= ord(c) < 160), None)
    if bad is not None:
        raise JobError(f"{shown(word)}: holds the control character {bad!r}; type the value without it")


def check_home(key: str, value: str) -> None:
    """A path starting `~user` names a user this machine knows: pathlib's expanduser raises otherwise."""
    if value.startswith("~") and os.path.expanduser(value.split("/", 1)[0]).startswith("~"):
        raise JobError(f"{key}={shown(value)}: no user {value.split('/', 1)[0][1:]!r} on this machine, so "
                       f"{value.split('/', 1)[0]} names no home folder; write the path out")


def check_path(key: str, value: str) -> None:
    """Each name in a path (each of a comma-separated list) is at most NAME_MAX bytes: a longer one makes
    the first `exists()` raise ENAMETOOLONG instead of answering no."""
    for part in value.split(","):
        check_home(key, part.strip())
        for name in part.split("/"):
            if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:
                raise JobError(f"{key}={shown(value)}: a file or folder name of {len(name)} characters; "
                               f"at most {NAME_MAX} bytes a name")


def special(mode: int) -> str:
    """What a file that is neither a regular file nor a folder is ("" for those two)."""
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return ""


def check_not_special(path: Path, label: str, error: type[Exception] = JobError) -> None:
    """`path` (if it exists) is a regular file or a folder: reading a FIFO waits for a writer forever, a
    device never ends, a socket cannot be opened. One line naming it."""
    try:
        what = special(os.stat(path).st_mode)
    except OSError as failure:
        if failure.errno == errno.ELOOP:  # a link that leads round to itself: nothing to read or write there
            raise error(f"{label}: {path} is a symbolic link that loops; give a regular file") from None
        return  # missing or unreadable: the caller says so in its own words
    except ValueError:
        return
    if what:
        raise error(f"{label}: {path} is {what}, not a file; give a regular file")


def read_bytes(path: Path, label: str, max_bytes: int = MAX_CONFIG_BYTES, error: type[Exception] = JobError,
               follow: bool = True) -> bytes:
    """A regular file's bytes, its size checked before it is read; one line naming it when it cannot be
    read. Opened without blocking and checked on the open file: a FIFO or a device is refused, never
    read. `follow=False`: a symbolic link is refused too (the run folder's own files)."""
    check_not_special(path, label, error)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as failure:
        if not follow and failure.errno == 40:  # ELOOP: the last name is a link
            raise error(f"{label}: {path} is a symbolic link; a run folder holds only autotune's own files "
                        "(remove the link)") from None
        raise error(f"{label}: cannot read {path} ({failure.strerror or failure})") from None
    try:
        info = os.fstat(fd)
        if special(info.st_mode):
            raise error(f"{label}: {path} is {special(info.st_mode)}, not a file; give a regular file")
        if info.st_size > max_bytes:
            raise error(f"{label}: {path} is {info.st_size} bytes; expected at most {max_bytes}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(max_bytes + 1)[:max_bytes]
    except OSError as failure:
        raise error(f"{label}: cannot read {path} ({failure.strerror or failure})") from None
    finally:
        os.close(fd)


def read_text(path: Path, label: str, max_bytes: int = MAX_CONFIG_BYTES, error: type[Exception] = JobError,
              follow: bool = True) -> str:
    """A UTF-8 text file, bounded like `read_bytes`; a byte that is not UTF-8 is one line with its place."""
    data = read_bytes(path, label, max_bytes, error, follow)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        line = data[:failure.start].count(b"\n") + 1
        raise error(f"{label}: {path} is not UTF-8 text (byte {data[failure.start]:#04x} on line {line}); "
                    "save it as UTF-8") from None


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether brackets outside strings nest deeper than `limit` (checked before the recursive decoder runs)."""
    depth = 0
    for match in _BRACKETS.finditer(_STRING.sub('""', text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > limit:
            return True
    return False


def parse_json(text: str, label: str, error: type[Exception] = JobError, hint: str = "") -> Any:
    """JSON text, its depth checked first; a refusal is one line: `label`, why, then `hint` (what to do)."""
    then = f"; {hint}" if hint else ""
    if json_too_deep(text):
        raise error(f"{label}: nests deeper than {MAX_JSON_DEPTH} levels, not a file autotune reads{then}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as failure:
        raise error(f"{label}: not JSON ({failure.msg} at line {failure.lineno} column {failure.colno}){then}") from None
    except ValueError as failure:  # a number past Python's 4,300-digit conversion limit
        raise error(f"{label}: not JSON autotune reads ({str(failure).split(';')[0]}){then}") from None
    except (RecursionError, MemoryError):  # bounded above; kept for a decoder with a lower limit
        raise error(f"{label}: too large or too deep to read{then}") from None


def read_json(path: Path, label: str, error: type[Exception] = JobError, max_bytes: int = MAX_JSON_BYTES,
              hint: str = "", follow: bool = True) -> Any:
    """A JSON file, bounded in size and depth; `label` and the path start the one line of a refusal.
    `follow=False`: a symbolic link is refused, not read (the run folder's own files)."""
    return parse_json(read_text(path, label, max_bytes, error, follow), f"{label}: {path}", error, hint)


def _expanded_nodes(root: Any, limit: int) -> int:
    """Nodes of the YAML tree once every alias is expanded, counted on the node graph (an alias is the
    same node object as its anchor): memoized, so the count costs the distinct nodes, not the expansion.
    A node that contains itself expands without end: counted as over the limit."""
    from yaml.nodes import MappingNode, SequenceNode

    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            sizes[id(node)] = 1
            continue
        if children_done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if id(node) in open_nodes:
            return limit + 1  # a cycle: the node is its own descendant
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                return limit + 1
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def parse_yaml(text: str, label: str) -> Any:
    """`yaml.safe_load`, refusing a document whose aliases expand past MAX_YAML_NODES before it is built."""
    import yaml

    loader = None
    try:
        loader = yaml.SafeLoader(text)  # a NUL byte or a control character is refused here
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_nodes(node, MAX_YAML_NODES)
        if size > MAX_YAML_NODES:
            raise JobError(f"{label}: its aliases expand to more than {MAX_YAML_NODES} values (nested or "
                           "self-referencing anchors); write the settings out")
        _check_unique_keys(node, label)
        return loader.construct_document(node)
    except ValueError as failure:  # an integer past Python's 4,300-digit conversion limit
        raise JobError(f"{label}: a value autotune cannot read ({str(failure).split(';')[0]}); "
                       "write the number with fewer digits") from None
    except yaml.YAMLError as failure:
        mark = getattr(failure, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        why = getattr(failure, "problem", None) or str(failure).splitlines()[0]
        raise JobError(f"{label}: not valid YAML ({why}{where}); fix the file") from None
    except RecursionError:
        raise JobError(f"{label}: nests too deeply to be a config file") from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_unique_keys(root: Any, label: str) -> None:
    """No mapping of the document names one key twice: YAML keeps the last silently, so `max_len: 64`
    then `max_len: 128` would tune a job the user did not read. Each node once (aliases share nodes)."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            keys: dict[str, ScalarNode] = {}
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.value != "<<":
                    if key.value in keys:
                        raise JobError(f"{label}: key {shown(key.value)} is given twice (lines "
                                       f"{keys[key.value].start_mark.line + 1} and {key.start_mark.line + 1}); "
                                       "give it once")
                    keys[key.value] = key
                stack.extend((key, value))


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable_folder(path: Path, label: str) -> None:
    """`path` is a folder this user can write into, or can make: one line before anything is written.
    `label` starts the line (`kb=PATH`, `kb export`)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise JobError(f"{label}: {path} is a file, not a folder; give a folder (it is made if missing)")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise JobError(f"{label}: {base} is a file, so {path} cannot be made; give another path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise JobError(f"{label}: {base} is not writable by this user; give a path you can write")


def check_writable_file(path: Path, label: str) -> None:
    """`path` can be written as a file: not a folder, and its folder writable or makeable."""
    path = Path(path).expanduser()
    check_not_special(path, label)
    if path.is_dir():
        raise JobError(f"{label}: {path} is a folder; give a file name, for example {path / 'out.json'}")
    if path.exists() and not os.access(path, os.W_OK):
        raise JobError(f"{label}: {path} is not writable by this user; give another path")
    check_writable_folder(path.parent, label)


def check_run_name(run: str) -> str:
    """`run` if it names exactly one folder inside its parent, else JobError: `.`, `..`, an empty name, or
    one with a separator, NUL or a control character would put a run (or its clean-up) somewhere else."""
    if (not isinstance(run, str) or run in ("", ".", "..") or "/" in run or "\\" in run
            or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in run) or len(run.encode(errors="replace")) > 255):
        raise JobError(f"run name {run!r}: it names one folder, runs/RUN/, so it must be a plain name (letters, "
                       "digits, '.', '_' or '-'; not '.' or '..')")
    return run
