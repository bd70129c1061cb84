"""`host=` resolved the way `ssh` resolves it: through the user's SSH config (`~/.ssh/config`, or
`ssh_config=PATH`) into the hops to connect through, jump hosts first, the target last.

paramiko's `SSHConfig` does the matching (Host patterns, Match, `%h` tokens, first value wins). Here is
what it leaves to its caller: the explicit parts of `host=` (user@, :port) and `ssh_key=` win over the
file, as on ssh's command line; each ProxyJump hop is itself looked up in the file, the last hop
reached through the ones before it, as OpenSSH does (`ProxyJump a,b` reaches b through a, and a by its
own entry); `Include` is read in place (paramiko's parser does not follow it), a FIFO or a device
refused rather than read. No local command runs from the config: `Match exec` is refused before any
lookup (paramiko would run it to match), and ProxyCommand, LocalCommand and KnownHostsCommand of the
host are refused (a jump host covers what ProxyCommand is mostly used for).
A refusal is never skipped for a plain `user@ip` either: `ssh user@ip` would obey a `Host *` block too,
and going round it would reach the box some other way than ssh does; `ssh_config=/dev/null` is the
one-word way to read no config at all.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from paramiko.config import SSHConfig
from paramiko.ssh_exception import ConfigParseError

from ..config.inputs import read_text
from ..util.errors import JobError
from .known_hosts import KNOWN_HOSTS

DEFAULT_CONFIG = "~/.ssh/config"
MAX_HOPS = 8          # a chain longer than this is a ProxyJump loop (a -> b -> a), which ssh never ends
MAX_INCLUDE_DEPTH = 16
_SPEC = re.compile(r"^(?:ssh://)?(?:([^@\s/:]+)@)?([A-Za-z0-9._-]+)(?::(\d{1,5}))?/?$")
# Refused for every host, a user@ip one too (a `Host *` block matches it): the way round, as `ssh -F /dev/null`.
_WAY_OUT = "; or skip the SSH config with ssh_config=/dev/null (or another file)"
_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.+)$", re.IGNORECASE)
_MATCH = re.compile(r"^\s*match(?:\s*=\s*|\s+)(.+)$", re.IGNORECASE)
# Options whose value is a command ssh runs on this machine: never run, so refused where they apply.
COMMANDS = ("proxycommand", "localcommand", "knownhostscommand")
_SPELLED = {"proxycommand": "ProxyCommand", "localcommand": "LocalCommand", "knownhostscommand": "KnownHostsCommand"}


@dataclass(frozen=True)
class Hop:
    """One SSH connection of the chain: where, as whom, with which keys, checked against which files."""

    name: str                      # as written: the host= alias or the ProxyJump entry
    hostname: str
    port: int
    user: str
    keys: tuple[str, ...] = ()     # empty: the agent, then ~/.ssh/id_* (paramiko's look_for_keys)
    identities_only: bool = False  # IdentitiesOnly yes: only `keys`, no agent
    known_hosts: tuple[str, ...] = (KNOWN_HOSTS,)

    def __post_init__(self) -> None:
        if not self.hostname or not 0 < self.port < 65536 or not self.user or not self.known_hosts:
            raise JobError(f"host {self.name}: resolves to {self.user}@{self.hostname}:{self.port}, not a usable "
                           "user, host name and port")

    @property
    def address(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


def split(spec: str) -> tuple[str, str, int | None]:
    """`[ssh://][user@]name[:port]` as (user or "", name, port or None)."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise JobError(f"host {spec!r}: expected [user@]host[:port] or a Host alias of the SSH config")
    user, name, port = match.groups()
    return user or "", name, int(port) if port else None


def route(host: str, config_path: str = "", key: str = "") -> tuple[Hop, ...]:
    """The hops to `host`, jump hosts first. `config_path` "" is ~/.ssh/config, read if it exists; `key`
    (ssh_key=) replaces the target's IdentityFile lines. Anything unusable is one `JobError` line naming
    `host` and the hop."""
    _check_local_user(host)
    path = Path(config_path or DEFAULT_CONFIG).expanduser()
    # /dev/null: no config at all, as `ssh -F /dev/null` (a device is otherwise refused, not read).
    config = load(path) if (config_path or path.is_file()) and str(path) != os.devnull else SSHConfig()
    return _route(config, path, host, host, key, None, 0)


def load(path: Path) -> SSHConfig:
    try:
        return SSHConfig.from_text("".join(_lines(path, 0)))
    except OSError as error:
        raise JobError(f"ssh_config {path}: cannot read it ({error.strerror or error})") from None
    except ConfigParseError as error:
        raise JobError(f"ssh_config {path}: {error}") from None


def _lines(path: Path, depth: int) -> list[str]:
    """The file's lines with each `Include` replaced by the files it names (relative to ~/.ssh, globbed,
    in order), so that paramiko sees one text, as ssh reads them."""
    if depth > MAX_INCLUDE_DEPTH:
        raise JobError(f"ssh_config {path}: Include nests deeper than {MAX_INCLUDE_DEPTH} (does it include itself?)")
    out: list[str] = []
    text = read_text(path, f"ssh_config {path}", error=JobError) if path.exists() else path.read_text()
    for line in text.splitlines(keepends=True):
        criteria = _MATCH.match(line)
        if criteria and "exec" in criteria.group(1).lower().replace("=", " ").split():
            raise JobError(f"ssh_config {path}: `{line.strip()[:80]}` runs a local command to match hosts, which "
                           f"autotune never runs; write a Host block for the host instead{_WAY_OUT}")
        match = _INCLUDE.match(line)
        if not match:
            out.append(line if line.endswith("\n") else line + "\n")
            continue
        try:
            patterns = shlex.split(match.group(1))
        except ValueError as error:  # an unbalanced quote
            raise JobError(f"ssh_config {path}: cannot read its line {line.strip()!r} ({error})") from None
        for pattern in patterns:
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
            for name in sorted(glob.glob(pattern)):
                out.extend(_lines(Path(name), depth + 1))
    return out


def _route(config: SSHConfig, path: Path, host: str, spec: str, key: str, jumps: tuple[str, ...] | None,
           depth: int) -> tuple[Hop, ...]:
    if depth > MAX_HOPS:
        raise JobError(f"host {host}: ProxyJump goes through more than {MAX_HOPS} hosts in {path}; "
                       "does a jump host jump through itself?")
    user, name, port = split(spec)
    what = f"host {host}" if spec == host else f"host {host}, jump host {spec}"
    try:
        options = config.lookup(name)
    except ImportError:  # `Match exec` needs the invoke package
        raise JobError(f"{what}: its Match exec in {path} needs `pip install invoke`{_WAY_OUT}") from None
    if options.get("proxycommand"):
        raise JobError(f"{what}: ProxyCommand in {path} is not supported; use ProxyJump (or drop it for this host)"
                       f"{_WAY_OUT}")
    for option in COMMANDS[1:]:
        if options.get(option):
            raise JobError(f"{what}: {_SPELLED[option]} in {path} runs a local command, which autotune never runs; "
                           f"drop it for this host{_WAY_OUT}")
    try:
        port = port or int(options.get("port", 22))
    except ValueError:
        raise JobError(f"{what}: Port {options['port']!r} in {path} is not a number") from None
    keys = (key,) if key else tuple(os.path.expanduser(p) for p in options.get("identityfile", []))
    for file in keys:
        if not Path(file).is_file():
            raise JobError(f"{what}: its key file {file} (IdentityFile in {path}) does not exist")
    listed = options.get("userknownhostsfile", KNOWN_HOSTS)
    try:
        known = tuple(os.path.expanduser(p) for p in shlex.split(listed))
    except ValueError as error:  # an unbalanced quote
        raise JobError(f"{what}: UserKnownHostsFile {listed!r} in {path} cannot be read ({error})") from None
    hop = Hop(name=spec, hostname=options["hostname"], port=port, user=user or options.get("user") or getpass.getuser(),
              keys=keys, identities_only=options.get("identitiesonly", "no").lower() == "yes", known_hosts=known)
    if jumps is None:
        written = options.get("proxyjump", "none")
        jumps = () if written.lower() == "none" else tuple(j.strip() for j in written.split(",") if j.strip())
    if not jumps:
        return (hop,)
    # `ProxyJump a,b`: b is reached through a (its own ProxyJump overridden), a by its own entry.
    *before, last = jumps
    return (*_route(config, path, host, last, "", tuple(before) if before else None, depth + 1), hop)


def _check_local_user(host: str) -> None:
    """paramiko's lookup asks getpass for this machine's user (the %u token) whether a token needs it
    or not; getpass reads LOGNAME/USER/LNAME/USERNAME, then the passwd entry, which a container run
    under an arbitrary uid may lack. ssh itself refuses to run then; here it is one line saying what to set."""
    try:
        getpass.getuser()
    except (KeyError, OSError):
        raise JobError(f"host {host}: this machine's user has no name (USER is not set and uid {os.getuid()} has "
                       "no passwd entry), which reading the SSH config needs; set USER=NAME and run again") from None
