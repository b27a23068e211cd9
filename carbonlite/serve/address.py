"""Where the service listens: ``--host`` and ``--port`` checked, and tried, before the
service starts, so a wrong one is one line (gRPC itself answers a failed bind with "Server
did not start properly" and log lines of its own)."""

from __future__ import annotations

import ipaddress
import re
import socket

from carbonlite.errors import CarbonLiteError, InvalidOptionError

__all__ = ["ListenError", "listen_location"]

_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


class ListenError(CarbonLiteError):
    """The service cannot listen where it was told to (the address is in use, or not this
    machine's)."""


def _check_host(host: object) -> str:
    """``host`` as it goes into a URI: an IP address (IPv6 in brackets) or a host name."""
    if not isinstance(host, str) or not host:
        raise InvalidOptionError(f"--host must be an address such as 127.0.0.1, not {host!r}")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        if len(host) > 253 or not _HOSTNAME.fullmatch(host):
            raise InvalidOptionError(
                f"--host {host!r} is neither an IP address nor a host name; give one such as "
                "127.0.0.1, ::1, 0.0.0.0 or localhost"
            ) from None
        return host
    return f"[{address}]" if address.version == 6 else str(address)


def _check_port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidOptionError(f"--port must be from 0 to 65535 (0: any free port), not {port!r}")
    return port


def _try_bind(host: str, port: int) -> None:
    """Bind a socket where the service will listen (and let it go again)."""
    bare = host[1:-1] if host.startswith("[") else host
    try:
        found = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ListenError(f"cannot listen on {host}: the name does not resolve ({exc})") from None
    family, kind, proto, _, address = found[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ListenError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (another service on "
                "that port, or an address that is not this machine's?)"
            ) from None


def listen_location(host: object, port: object, *, tls: bool = False) -> str:
    """The ``grpc://`` (``grpc+tls://`` with ``tls``) location for ``host`` and ``port``,
    after a socket was bound there: :class:`InvalidOptionError` for a malformed one,
    :class:`ListenError` for one the service cannot listen on."""
    checked_host, checked_port = _check_host(host), _check_port(port)
    _try_bind(checked_host, checked_port)
    return f"{'grpc+tls' if tls else 'grpc'}://{checked_host}:{checked_port}"
