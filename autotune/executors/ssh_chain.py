"""A route of hops (ssh_route.py) connected: the first hop directly, each next one through a
`direct-tcpip` channel of the hop before, as `ssh -J` does. Every hop's host key is checked against its
known_hosts files with the same policy (refused unless `ssh_trust_new`), so a jump host is never trusted
by default either. Each failure is one `AutotuneError` line naming `host=` and the hop.
"""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

import paramiko

from ..util.errors import AutotuneError
from . import known_hosts
from .ssh_route import Hop, split

CONNECT_TIMEOUT_S = 15
KEEPALIVE_S = 15


def connect(host: str, route: tuple[Hop, ...], trust_new: bool) -> list[paramiko.SSHClient]:
    """One connected client per hop, the target last; on a failure the ones already open are closed."""
    chain: list[paramiko.SSHClient] = []
    try:
        for index, hop in enumerate(route):
            sock = _channel(chain[-1], host, route, index) if index else None
            chain.append(_connect_hop(host, route, hop, sock, trust_new))
    except BaseException:
        for client in reversed(chain):
            client.close()
        raise
    return chain


def label(host: str, route: tuple[Hop, ...], hop: Hop) -> str:
    """`host H` for a plain user@ip; otherwise which hop of `host=`, resolved to what."""
    if len(route) == 1 and hop.hostname == split(host)[1]:
        return f"host {host}"
    if hop is route[-1]:
        return f"host {host} ({hop.address})"
    return f"host {host}, jump host {hop.name} ({hop.address})"


def _channel(via: paramiko.SSHClient, host: str, route: tuple[Hop, ...], index: int) -> paramiko.Channel:
    """A channel from hop `index - 1` to hop `index`; the jump host resolves the name, as with `ssh -J`."""
    hop = route[index]
    try:
        return via.get_transport().open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                                                timeout=CONNECT_TIMEOUT_S)
    except (paramiko.SSHException, OSError, EOFError) as error:
        why = getattr(error, "text", "") or str(error) or type(error).__name__
        raise AutotuneError(f"{label(host, route, route[index - 1])}: refuses to forward to {hop.hostname}:"
                            f"{hop.port} ({why}); check its AllowTcpForwarding / PermitOpen, or the HostName and "
                            "Port") from None


def _connect_hop(host: str, route: tuple[Hop, ...], hop: Hop, sock: paramiko.Channel | None,
                 trust_new: bool) -> paramiko.SSHClient:
    files = [Path(name) for name in hop.known_hosts]
    client = paramiko.SSHClient()
    # Read by our loader, never saved by paramiko: the file is only appended to (known_hosts.py). All
    # files at once: a key revoked in one of them is not trusted because another lists it.
    revoked = known_hosts.load(client, files)
    trust = known_hosts.TrustNew(revoked) if trust_new else None
    client.set_missing_host_key_policy(trust or known_hosts.Refuse(revoked))
    where = label(host, route, hop)
    try:
        # IdentityFile lines (or ssh_key=) replace the default ~/.ssh/id_* keys, as in ssh; the agent's
        # keys stay offered unless IdentitiesOnly.
        client.connect(hop.hostname, hop.port, hop.user, key_filename=list(hop.keys) or None,
                       allow_agent=not hop.identities_only, look_for_keys=not hop.keys, sock=sock,
                       timeout=CONNECT_TIMEOUT_S, banner_timeout=CONNECT_TIMEOUT_S, auth_timeout=CONNECT_TIMEOUT_S)
    except paramiko.AuthenticationException as error:
        client.close()
        keys = ", ".join(hop.keys) or "the agent's and ~/.ssh/id_*"
        raise AutotuneError(f"{where}: user {hop.user} was refused ({error}); keys offered: {keys}") from None
    except paramiko.SSHException as error:
        client.close()
        if "not found in known_hosts" in str(error):
            raise AutotuneError(f"{where}: its host key is not in {files[0]}; check it and trust it with "
                                f"`{_keyscan(route, hop)} >> {files[0]}`, or add ssh_trust_new=true to record it on "
                                "first use") from None
        raise AutotuneError(f"{where}: {error}") from None
    except socket.gaierror as error:
        client.close()
        alias = " (nor is it a Host alias in the SSH config)" if hop.hostname == split(hop.name)[1] else ""
        raise AutotuneError(f"{where}: cannot resolve {hop.hostname}{alias}: {error.strerror}") from None
    except OSError as error:
        client.close()
        raise AutotuneError(f"{where}: cannot connect ({error})") from None
    if trust is not None:
        trust.record(files[0])  # the one new line, appended; nothing else in the file changes
    client.get_transport().set_keepalive(KEEPALIVE_S)
    return client


def _keyscan(route: tuple[Hop, ...], hop: Hop) -> str:
    """The command that prints `hop`'s key: behind a jump host, run on the hop before, which reaches it."""
    scan = "ssh-keyscan " + (hop.hostname if hop.port == 22 else f"-p {hop.port} {hop.hostname}")
    index = route.index(hop)
    return f"ssh {shlex.quote(route[index - 1].name)} {scan}" if index else scan
