"""The job keys every kind of job takes (host, budget, knowledge base, LLM, tracking) and the user's
starting knobs: the parts of a Job that do not depend on what it trains (workloads/*/job.py use them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypedDict

from ..util.errors import JobError
from .inputs import check_digits, check_not_special, check_writable_folder
from .job import SMOKE_TIME_BUDGET_S, LlmProposer, SshSettings, Tracking, parse_flag
from .job_keys import JOB_KEYS, range_text
from .job_values import SSH_KEYS, is_ssh, mlflow_keys, parse_duration, parse_share, parse_size, whole
from .knobs import CATALOG, NAIVE_START, Knobs, parse_knob_value

# An SSH host: user@name[:port], or a name alone (an alias of the SSH config, or a host name), as `ssh` takes.
_HOST = re.compile(r"^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(:\d{1,5})?$")
_RAY_HOST = re.compile(r"^ray://[A-Za-z0-9._-]+:\d{1,5}$")


def start_knobs(pairs: dict[str, str], effective_batch: int) -> Knobs:
    """The user's starting config: the naive start with the knobs they gave."""
    start = dict(NAIVE_START)
    for key, text in pairs.items():
        if key in CATALOG:
            start[key] = parse_knob_value(key, text)
    if "gradient_accumulation_steps" in pairs:
        accumulation = whole_knob("gradient_accumulation_steps", pairs["gradient_accumulation_steps"])
        if effective_batch % accumulation:
            raise JobError(f"gradient_accumulation_steps={accumulation} does not divide effective_batch={effective_batch}")
        micro = effective_batch // accumulation
        if "per_device_train_batch_size" in pairs and start["per_device_train_batch_size"] != micro:
            raise JobError("per_device_train_batch_size x gradient_accumulation_steps must equal effective_batch; give one of them")
        start["per_device_train_batch_size"] = micro
    return Knobs(**start)


class CommonFields(TypedDict):
    """The Job fields every kind of job takes (`Job(**fields, model=...)`)."""

    run: str
    host: str
    gpu: str
    ssh: SshSettings
    max_trials: int | None
    time_budget_s: int | None
    kb: str
    seed: int
    mem_limit: int | None
    mem_margin: float
    min_gain: float
    smoke: bool
    only: tuple[str, ...]
    llm: LlmProposer | None
    allow_numerics_change: bool
    strict_parity: bool
    tracking: Tracking


def common_fields(run: str, pairs: dict[str, str], smoke: bool) -> CommonFields:
    """The keys every job takes, whatever it trains."""
    host = pairs.get("host", "local")
    port = host.rpartition(":")[2] if ":" in host else "22"
    if host == "ray" or host.startswith("ray://"):
        port = host.rpartition(":")[2] if host.count(":") == 2 else ""
        if host != "ray" and not (_RAY_HOST.match(host) and 0 < int(port) < 65536):
            raise JobError(f"host={host!r}: expected {JOB_KEYS['host']}")
    elif host != "local" and (not _HOST.match(host) or not 0 < int(port) < 65536):
        raise JobError(f"host={host!r}: expected {JOB_KEYS['host']}")
    trust = pairs.get("ssh_trust_new", "false").lower()
    if trust not in ("true", "false"):
        raise JobError(f"ssh_trust_new={pairs['ssh_trust_new']!r}: expected true or false")
    for key in ("ssh_key", "ssh_config"):
        if key in pairs and pairs[key] != "/dev/null":
            check_not_special(Path(pairs[key]).expanduser(), f"{key}={pairs[key]}")
    if "ssh_key" in pairs and not Path(pairs["ssh_key"]).expanduser().is_file():
        raise JobError(f"ssh_key={pairs['ssh_key']!r}: no such file; expected {JOB_KEYS['ssh_key']}")
    if not is_ssh(host) and any(k in pairs for k in SSH_KEYS):
        raise JobError(f"{', '.join(SSH_KEYS)} go with an SSH host: host=user@host[:port] or host=ALIAS")
    # /dev/null too: no config at all, as `ssh -F /dev/null`.
    if "ssh_config" in pairs and not Path(pairs["ssh_config"]).expanduser().is_file() and pairs["ssh_config"] != "/dev/null":
        raise JobError(f"ssh_config={pairs['ssh_config']!r}: no such file; expected {JOB_KEYS['ssh_config']}")
    if "kb" in pairs:  # the tune writes there: a file or an unwritable folder is refused before the run folder
        check_writable_folder(Path(pairs["kb"]), f"kb={pairs['kb']}")
    return CommonFields(
        run=run, host=host, gpu=pairs.get("gpu", ""),
        ssh=SshSettings(key=str(Path(pairs["ssh_key"]).expanduser()) if "ssh_key" in pairs else "",
                        trust_new=trust == "true", python=pairs.get("ssh_python", "python3"),
                        config=str(Path(pairs["ssh_config"]).expanduser()) if "ssh_config" in pairs else ""),
        max_trials=whole("max_trials", pairs["max_trials"], 1) if "max_trials" in pairs else None,
        time_budget_s=parse_duration(pairs["time"]) if "time" in pairs else (SMOKE_TIME_BUDGET_S if smoke else None),
        kb=pairs.get("kb", ""), seed=whole("seed", pairs.get("seed", "0"), 0),
        mem_limit=parse_size(pairs["mem_limit"]) if "mem_limit" in pairs else None,
        mem_margin=parse_share(pairs.get("mem_margin", "0.1")), min_gain=parse_share(pairs.get("min_gain", "0.03"), "min_gain"),
        smoke=smoke, only=only_knobs(pairs), llm=llm_proposer(pairs),
        # Any loop can be offered an 8-bit optimizer: the opt-in is every job's (the tuner's frame applies it).
        allow_numerics_change=parse_flag("allow_numerics_change", pairs.get("allow_numerics_change", "false")),
        strict_parity=parse_flag("strict_parity", pairs.get("strict_parity", "false")),
        tracking=Tracking(**mlflow_keys(pairs)))


def only_knobs(pairs: dict[str, str]) -> tuple[str, ...]:
    if "only" not in pairs:
        return ()
    names = tuple(n.strip() for n in pairs["only"].split(",") if n.strip())
    unknown = [n for n in names if n not in CATALOG]
    if not names or unknown:
        raise JobError(f"only={pairs['only']!r}: {', '.join(unknown) or 'no knob'} is not a knob; "
                       f"expected some of {', '.join(CATALOG)}")
    return names


def llm_proposer(pairs: dict[str, str]) -> LlmProposer | None:
    model = pairs.get("llm", "").strip()
    if "llm_timeout" in pairs and not model:
        raise JobError("llm_timeout goes with llm=MODEL")
    if model and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/@-]*", model):
        raise JobError(f"llm={model!r}: expected {JOB_KEYS['llm']}")
    try:
        timeout = parse_duration(pairs["llm_timeout"], "llm_timeout") if "llm_timeout" in pairs else 60
    except JobError:
        raise JobError(f"llm_timeout={pairs['llm_timeout']!r}: expected {JOB_KEYS['llm_timeout']}, "
                       f"{range_text('llm_timeout')}") from None
    return LlmProposer(model, timeout) if model else None


def whole_knob(key: str, text: str) -> int:
    check_digits(key, text)
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise JobError(f"{key}={text!r}: expected a whole number >= 1")
    return int(text)
