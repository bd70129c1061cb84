"""One value of a job key, parsed and checked: durations, sizes, shares, whole numbers, the model
and the dataset. Each bad value raises `JobError` with one line naming the key and the accepted form."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..util.errors import JobError
from .inputs import check_digits, read_json
from .job_keys import DATA_SUFFIXES, JOB_KEYS, MLP_MODEL, RANGES, range_text
from .presets import PRESETS

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)?$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# Sizes the frame and the runners materialise: beyond these a job would exhaust the machine's memory in
# the child (10**17 tokens a row) instead of being refused here. Each is far above any real job.
MAXIMA = {key: int(RANGES[key][1]) for key in ("max_len", "effective_batch", "mlp_width", "mlp_depth", "mlp_rows")}
# The keys that only mean something with an SSH host.
SSH_KEYS = ("ssh_key", "ssh_config", "ssh_trust_new", "ssh_python")


def is_ssh(host: str) -> bool:
    """Whether trials run over SSH: any host but local and Ray (`user@ip[:port]`, or a config alias)."""
    return host not in ("local", "ray") and not host.startswith("ray://")


def parse_duration(text: str, key: str = "time") -> int:
    check_digits(key, text)
    match = _DURATION.match(text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise JobError(f"{key}={text!r}: expected {JOB_KEYS[key]}")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise JobError(f"{key}={text!r}: the budget must be longer than 0 seconds")
    if total > RANGES[key][1]:
        raise JobError(f"{key}={text}: {total:,} seconds; expected {range_text(key)}")
    return total


def parse_size(text: str) -> int:
    check_digits("mem_limit", text)
    match = _SIZE.match(text.strip())
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()]) if match else 0
    if size < 2**20:  # below a MiB no model fits; a typo such as 0.5B is caught here
        raise JobError(f"mem_limit={text!r}: expected {JOB_KEYS['mem_limit']}, at least 1MiB")
    if size > RANGES["mem_limit"][1]:
        raise JobError(f"mem_limit={text}: {size:,} bytes; expected {range_text('mem_limit')} (at most 1PiB)")
    return size


def parse_share(text: str, key: str = "mem_margin") -> float:
    check_digits(key, text)
    try:
        share = float(text)
    except ValueError:
        raise JobError(f"{key}={text!r}: expected {JOB_KEYS[key]}") from None
    if key in RANGES and not RANGES[key][0] <= share <= RANGES[key][1]:  # NaN too
        raise JobError(f"{key}={text!r}: expected {JOB_KEYS[key]}")
    return share


def whole(key: str, text: str, minimum: int) -> int:
    check_digits(key, text)
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < minimum:
        raise JobError(f"{key}={text!r}: expected {JOB_KEYS[key]}")
    if int(text) > MAXIMA.get(key, int(text)):
        raise JobError(f"{key}={text}: at most {MAXIMA[key]:,}; the frame builds every row (or layer) of it in memory")
    if key in RANGES and int(text) > RANGES[key][1]:
        raise JobError(f"{key}={text}: expected {range_text(key)}")
    return int(text)


def looks_like_path(value: str) -> bool:
    return value.startswith((".", "/", "~")) or value.count("/") > 1 or os.sep != "/" and os.sep in value


def check_model(value: str) -> None:
    if value in PRESETS or value == MLP_MODEL:
        return
    path = Path(value).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise JobError(f"model={value!r}: the folder has no config.json; expected {JOB_KEYS['model']}")
        if not isinstance(read_json(path / "config.json", f"model={value}"), dict):  # read here, not in the frame
            raise JobError(f"model={value!r}: its config.json holds no object of settings; fix the file")
        return
    if looks_like_path(value):
        raise JobError(f"model={value!r}: no such folder; expected {JOB_KEYS['model']}")
    if not _HUB_ID.match(value):
        raise JobError(f"model={value!r}: not a hub id; expected {JOB_KEYS['model']}")


def check_dataset(value: str) -> None:
    if value == "synthetic":
        return
    path = Path(value).expanduser()
    # Anything at that path is the dataset (datasets loads a local path before the hub): a FIFO named
    # like a hub id is refused here, not read by the frame.
    if path.suffix.lower() in DATA_SUFFIXES or looks_like_path(value) or os.path.lexists(path):
        if not path.exists():
            raise JobError(f"dataset={value!r}: no such file; expected {JOB_KEYS['dataset']}")
        from .dataset_check import check_rows

        check_rows(value)  # here, not in the frame: an empty or malformed file is one line naming it
        return
    hub_id = value.split(":", 1)[0]
    if not _HUB_ID.match(hub_id) or value.count(":") > 1:
        raise JobError(f"dataset={value!r}: not a hub id or file; expected {JOB_KEYS['dataset']}")


# Tracking stores the installed MLflow client can write to; `+driver` (postgresql+psycopg2) allowed.
# `databricks` alone is the usual value (the default profile), `databricks://PROFILE` names one;
# `databricks-uc` is a model registry URI, not a tracking store.
_MLFLOW_SCHEME = re.compile(r"^(https?|sqlite|postgresql|mysql|mssql|file|databricks)(\+[a-z0-9_]+)?(:|$)")
MLFLOW_MISSING = 'the mlflow client is not installed; pip install -e ".[mlflow]"'
HIDDEN = "***"
# A flag or key of a script's arguments whose value is a credential: a word of its name is one of these.
_SECRET_WORDS = {"token", "key", "apikey", "secret", "password", "passwd", "pwd", "credential", "credentials"}


def _userinfo(uri: str) -> tuple[int, int] | None:
    """Where the password of `scheme://user:password@host/...` lies in `uri`, if it has one."""
    start = uri.find("://")
    if start < 0:
        return None
    netloc_end = len(uri)
    for mark in "/?#":
        found = uri.find(mark, start + 3)
        netloc_end = found if 0 <= found < netloc_end else netloc_end
    at = uri.rfind("@", start + 3, netloc_end)
    colon = uri.find(":", start + 3, at) if at >= 0 else -1
    return (colon + 1, at) if colon >= 0 else None


def redact_uri(uri: str) -> str:
    """`uri` with its password as ***: what autotune prints, writes to job.yaml and logs. The password
    belongs in MLFLOW_TRACKING_PASSWORD (docs/guides/tracking.md), which nothing here ever shows."""
    where = _userinfo(uri)
    return uri if where is None else uri[:where[0]] + HIDDEN + uri[where[1]:]


def _secret_name(name: str) -> bool:
    return any(word in _SECRET_WORDS for word in re.split(r"[-_.]+", name.lstrip("-").lower()))


def redact_args(args: str) -> str:
    """A script's arguments as the store may see them: the value of `--hub_token X`, `--api-key=X` or
    `password=X` (a flag whose name has a word like token, key, secret, password) is ***."""
    import shlex

    try:
        words = shlex.split(args)
    except ValueError:
        return HIDDEN  # unparseable: nothing of it is shown
    out: list[str] = []
    for i, word in enumerate(words):
        name, equals, _ = word.partition("=")
        if equals and _secret_name(name):
            out.append(f"{shlex.quote(name)}={HIDDEN}")
        elif i and words[i - 1].startswith("-") and "=" not in words[i - 1] and _secret_name(words[i - 1]) \
                and not word.startswith("-"):
            out.append(HIDDEN)
        else:
            out.append(shlex.quote(word))
    return " ".join(out)


def check_mlflow_uri(value: str, where: str) -> str:
    """`value` if it has the shape of a tracking URI MLflow can write to and the client is installed,
    else JobError naming `where` (the key, or the environment variable it came from). Only what is cheap
    to see here: whether the store answers is the tracker's to find out (tracking.py)."""
    import importlib.util

    shown = redact_uri(value)  # a password typed in the URI is never echoed
    match = _MLFLOW_SCHEME.match(value)
    if not match:
        raise JobError(f"{where}={shown!r}: expected {JOB_KEYS['mlflow']}")
    scheme, rest = match.group(1), value[match.end():]
    if scheme in ("http", "https", "postgresql", "mysql", "mssql") and not re.match(r"^//[^/\s]+", rest):
        raise JobError(f"{where}={shown!r}: no host; expected {scheme}://HOST[:PORT]...")
    password = _userinfo(value)
    if password and value[password[0]:password[1]] == HIDDEN and not os.environ.get("MLFLOW_TRACKING_PASSWORD"):
        # A job.yaml autotune wrote: the password was left out of it on purpose.
        raise JobError(f"{where}={shown!r}: the password is not in job files; set MLFLOW_TRACKING_USERNAME and "
                       "MLFLOW_TRACKING_PASSWORD")
    if scheme == "sqlite":
        path = rest[3:] if rest.startswith("///") else ""
        if not path or path == ":memory:":
            raise JobError(f"{where}={shown!r}: expected sqlite:///PATH/mlflow.db (three slashes, then the file; "
                           "four for an absolute path)")
        if not Path(path).expanduser().parent.is_dir():
            raise JobError(f"{where}={shown!r}: no folder {Path(path).parent}; make it first (SQLite makes the file, "
                           "not its folder)")
    if scheme == "file" and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
        # MLflow 3 keeps the file store in maintenance mode and refuses to open it unless told to.
        raise JobError(f"{where}={shown!r}: MLflow 3 refuses file stores; use sqlite:///PATH/mlflow.db "
                       "(or set MLFLOW_ALLOW_FILE_STORE=true)")
    try:
        installed = importlib.util.find_spec("mlflow") is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        raise JobError(f"{where}={shown}: {MLFLOW_MISSING}")
    return value


def mlflow_keys(pairs: dict[str, str]) -> dict[str, str]:
    """mlflow= and mlflow_experiment= of a job (config.job.Tracking's fields). The URI is the one the user typed; MLFLOW_TRACKING_URI,
    the default, is read by the tracker when the tune starts (a resume follows the environment it runs in)."""
    uri, experiment = pairs.get("mlflow", "").strip(), pairs.get("mlflow_experiment", "").strip()
    if experiment and not uri and not os.environ.get("MLFLOW_TRACKING_URI"):
        raise JobError("mlflow_experiment goes with mlflow=URI (or MLFLOW_TRACKING_URI); add mlflow=")
    if len(experiment) > 500 or not all(c.isprintable() for c in experiment):
        raise JobError(f"mlflow_experiment={experiment[:40]!r}: expected a printable name of at most 500 characters")
    return {"mlflow": check_mlflow_uri(uri, "mlflow") if uri else "", "experiment": experiment}
