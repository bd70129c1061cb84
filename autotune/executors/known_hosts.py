"""The user's `~/.ssh/known_hosts`, read line by line and only ever appended to.

paramiko's own loader stops with a traceback on lines it does not know (`@cert-authority`, bytes that
are not UTF-8) and its `save_host_keys` rewrites the whole file from what it parsed, dropping comments,
markers and hashed entries it could not read, and splitting `host,ip` entries. Here every line that
is not a plain key entry is skipped (an `@revoked` key is remembered and never trusted, whichever of
the host's known_hosts files lists it), and
`ssh_trust_new` appends the one new line after a successful connection: nothing else in the file
changes, byte for byte.
"""

from __future__ import annotations

import binascii
from pathlib import Path
from typing import Any

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

from ..util.io import append_line

KNOWN_HOSTS = "~/.ssh/known_hosts"


def load(client: paramiko.SSHClient, paths: list[Path]) -> set[tuple[str, str]]:
    """Put the usable entries of `paths` into the client's host keys; returns the revoked (type, key)
    pairs. A key marked @revoked in any of the files is left out of all of them, as ssh does with
    `UserKnownHostsFile a b`. A line paramiko cannot read (a marker, a pattern, a broken key) is skipped."""
    keys, revoked, entries = client.get_host_keys(), set(), []
    for path in paths:
        file_entries, file_revoked = _read(path)
        entries += file_entries
        revoked |= file_revoked
    for entry in entries:
        if (entry.key.get_name(), entry.key.get_base64()) in revoked:
            continue
        # As HostKeys.load does: the entry, less the names an earlier line already gave this key.
        entry.hostnames = [name for name in entry.hostnames if not keys.check(name, entry.key)]
        if entry.hostnames:
            keys._entries.append(entry)
    return revoked


def _read(path: Path) -> tuple[list[HostKeyEntry], set[tuple[str, str]]]:
    """The plain key entries of one file and the keys it marks @revoked; a missing file has neither."""
    revoked: set[tuple[str, str]] = set()
    entries: list[HostKeyEntry] = []
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return entries, revoked
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if fields[0] == "@revoked" and len(fields) >= 4:
            revoked.add((fields[2], fields[3]))
        if line.startswith("@"):
            continue  # @cert-authority: paramiko checks no host certificates; @revoked: noted above
        try:
            entry = HostKeyEntry.from_line(" ".join(fields), number)
        except (paramiko.SSHException, InvalidHostKey, binascii.Error, ValueError, TypeError):
            continue
        if entry is not None:
            entries.append(entry)
    return entries, revoked


class Refuse(paramiko.RejectPolicy):
    """Refuse an unknown host's key, saying so when it is revoked: the usual refusal names the
    `ssh-keyscan` line that trusts it, which for a revoked key would be the wrong advice."""

    def __init__(self, revoked: set[tuple[str, str]]) -> None:
        self.revoked = revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        self.check(hostname, key)
        super().missing_host_key(client, hostname, key)

    def check(self, hostname: str, key: Any) -> None:
        if (key.get_name(), key.get_base64()) in self.revoked:
            raise paramiko.SSHException(f"the host key of {hostname} is marked @revoked in known_hosts")


class TrustNew(Refuse):
    """Accept an unknown host's key for this connection and remember it; `record` appends it once the
    connection succeeded (paramiko's AutoAddPolicy would rewrite the whole file at once)."""

    def __init__(self, revoked: set[tuple[str, str]]) -> None:
        super().__init__(revoked)
        self.new: tuple[str, Any] | None = None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        self.check(hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.new = (hostname, key)

    def record(self, path: Path) -> None:
        if self.new is None:
            return
        hostname, key = self.new
        append(path, f"{hostname} {key.get_name()} {key.get_base64()}")
        self.new = None


def append(path: Path, line: str) -> None:
    """Add one line at the end of `path`, after a newline if the file's last line lacks one."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            ends_open = handle.tell() > 0 and (handle.seek(-1, 2), handle.read(1))[1] != b"\n"
    except FileNotFoundError:
        ends_open = False
    append_line(path, (("\n" if ends_open else "") + line + "\n").encode(),
                "free space, or add the host's key by hand, and connect again")
