"""Checks of what a user gives the Kafka ingester, before any table is opened or broker asked.

Each raises :class:`InvalidOptionError` saying what was expected, what was given, and how to
fix it; the command prints it as its one line of error.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence

from carbonlite.errors import InvalidOptionError

__all__ = [
    "check_batch_rows",
    "check_bootstrap_servers",
    "check_partitions",
    "check_positive_seconds",
    "check_topic",
]

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""Kafka's legal topic names (``Topic.validate`` in Kafka's own code)."""
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+")
"""A host name, an IPv4 address, or an IPv6 address in brackets."""
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9_+.-]*://")


def check_topic(topic: object) -> str:
    """A Kafka topic name: 1 to 249 letters, digits, ``.``, ``_`` and ``-``, not ``.``/``..``."""
    if not isinstance(topic, str):
        raise InvalidOptionError(f"topic must be a string, not {type(topic).__name__} {topic!r}")
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidOptionError(
            f"topic {topic!r} is not a Kafka topic name: 1 to 249 characters of letters, "
            "digits, '.', '_' and '-' (and not '.' or '..')"
        )
    return topic


def _server_problem(server: str) -> str | None:
    """Why ``server`` (one entry of a bootstrap list) is not ``[SCHEME://]HOST:PORT``."""
    if not server:
        return "an empty entry"
    scheme = _SCHEME.match(server)
    address = server[scheme.end() :] if scheme else server
    host, colon, port = address.rpartition(":")
    if not colon:
        return f"{server!r} has no port"
    if not _HOST.fullmatch(host):
        return f"{server!r} has no valid host before ':{port}'"
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"{server!r} has port {port!r}, not a number from 1 to 65535"
    return None


def check_bootstrap_servers(servers: object) -> str:
    """``HOST:PORT[,HOST:PORT...]`` (each may start with ``SCHEME://``, an IPv6 host goes in
    brackets), as given."""
    if not isinstance(servers, str):
        raise InvalidOptionError(
            f"bootstrap_servers must be a string such as '127.0.0.1:9092', not "
            f"{type(servers).__name__} {servers!r}"
        )
    for server in servers.split(","):
        problem = _server_problem(server.strip())
        if problem is not None:
            raise InvalidOptionError(
                f"bootstrap_servers {servers!r} is not HOST:PORT[,HOST:PORT...]: {problem}; "
                "give the address of a Kafka broker such as 127.0.0.1:9092"
            )
    return servers


def check_partitions(partitions: Sequence[int] | None) -> list[int] | None:
    """Distinct partition numbers, 0 or more, at least one (None: all of the topic's)."""
    if partitions is None:
        return None
    if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence):
        raise InvalidOptionError(
            f"partitions must be a list of partition numbers such as [0, 1], not {partitions!r}"
        )
    chosen = list(partitions)
    wrong = [p for p in chosen if isinstance(p, bool) or not isinstance(p, int) or p < 0]
    if wrong:
        raise InvalidOptionError(
            f"partitions {chosen!r}: {wrong[0]!r} is not a partition number (an integer, 0 or more)"
        )
    if not chosen:
        raise InvalidOptionError(
            "partitions is empty: name at least one partition, or leave it out for all of the "
            "topic's"
        )
    if len(set(chosen)) != len(chosen):
        raise InvalidOptionError(f"partitions {chosen!r} names a partition twice")
    return chosen


def check_batch_rows(rows: object) -> int:
    if isinstance(rows, bool) or not isinstance(rows, numbers.Integral) or rows < 1:
        raise InvalidOptionError(f"max_batch_rows must be an integer of at least 1, not {rows!r}")
    return int(rows)


def check_positive_seconds(seconds: object, *, what: str) -> float:
    """A finite number of seconds above 0."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, numbers.Real)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise InvalidOptionError(
            f"{what} must be a finite number of seconds above 0, such as 1 or 0.25, not {seconds!r}"
        )
    return float(seconds)
