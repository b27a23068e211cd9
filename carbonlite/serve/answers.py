"""How the service answers a failed call: a Flight error with a one-line message.

``pyarrow.flight`` turns an exception raised by a handler into the client's error. A
``FlightError`` (``FlightServerError``, ...) becomes its message; any other exception
(``ArrowInvalid`` included) becomes its message plus ``Detail: Python exception:`` and the
server's whole traceback. So every handler answers through :func:`answering`: whatever it
raises, while it runs or while the stream or results it returned are consumed, reaches the
client as ``FlightServerError`` with one line saying what and where, and with
``extra_info`` the JSON ``{"kind": ..., "error": <exception class>}``. The kinds:
``invalid`` (the request is wrong: malformed JSON, a bad name, filter, sequence, schema),
``not_found`` (no such table or version), ``failed`` (the service could not do it: storage,
a commit) and ``internal`` (a bug: its traceback goes to the service's log, not the client).

``GetSchema`` is the exception: pyarrow's server callback for it converts no Flight error
(and its client raises plain Arrow errors for that call), so :func:`answering_schema` raises
a plain exception instead (``ValueError``-based for the client's mistakes, which the client
sees as ``ArrowInvalid``) carrying a note pyarrow cannot encode as UTF-8 while it formats the
traceback: it then sends only the exception's type name, ``Detail: Python exception:
InvalidRequest``, one line (Python 3.11+: exception notes).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from carbonlite.errors import (
    CarbonLiteError,
    InvalidFilterError,
    InvalidOptionError,
    SchemaMismatchError,
    TableNotFoundError,
    VersionNotFoundError,
)
from carbonlite.serve.buffer import SequenceError, StaleReadError
from carbonlite.serve.catalog import TableNameError
from carbonlite.serve.wire import BadRequestError

__all__ = [
    "MAX_MESSAGE_CHARS",
    "InvalidRequest",
    "ServiceFailure",
    "answering",
    "answering_schema",
    "flight_error",
    "guarded",
    "one_line",
]

MAX_MESSAGE_CHARS = 2000
"""Longest message a client gets (longer ones are cut, marked with ``...``)."""

log = logging.getLogger("carbonlite.serve")

_INVALID = (
    BadRequestError,
    TableNameError,
    InvalidFilterError,
    InvalidOptionError,
    SequenceError,
    StaleReadError,
)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) as one space, and cut to
    :data:`MAX_MESSAGE_CHARS`."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 3] + "..."


def _kind_and_message(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, (TableNotFoundError, VersionNotFoundError)):
        return "not_found", f"not found: {exc}"
    if isinstance(exc, SchemaMismatchError):
        return "invalid", f"schema mismatch: {exc}"
    if isinstance(exc, _INVALID):
        return "invalid", str(exc)
    if isinstance(exc, CarbonLiteError):
        return "failed", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)):
        return "invalid", f"invalid data ({type(exc).__name__}): {exc}"
    if isinstance(exc, (pa.ArrowException, OSError)):
        return "failed", f"{type(exc).__name__}: {exc}"
    return "internal", (
        f"internal error ({type(exc).__name__}: {exc}); the service logged the details"
    )


def flight_error(exc: BaseException, shown: Callable[[str], str] = str) -> flight.FlightError:
    """The Flight error a client gets for ``exc``: one line (``shown`` rewrites it first, to
    name paths as the client knows them)."""
    if isinstance(exc, flight.FlightError):
        return type(exc)(one_line(shown(str(exc))), exc.extra_info)
    kind, message = _kind_and_message(exc)
    if kind == "internal":
        log.error("a call failed unexpectedly", exc_info=exc)
    info = json.dumps({"kind": kind, "error": type(exc).__name__}).encode()
    return flight.FlightServerError(one_line(shown(message)), info)


class InvalidRequest(ValueError):
    """A GetSchema request the service refuses (the client sees ``ArrowInvalid``)."""


class ServiceFailure(Exception):
    """A GetSchema request the service could not answer (the client sees ``ArrowException``)."""


_UNFORMATTABLE = "\udc00"
"""A lone surrogate: pyarrow cannot encode a traceback holding it, and sends the type's name."""


def schema_error(exc: BaseException, shown: Callable[[str], str] = str) -> Exception:
    """What a GetSchema handler raises for ``exc`` (see the module doc)."""
    error = flight_error(exc, shown)
    kind = json.loads(error.extra_info or b"{}").get("kind", "invalid")
    refusal: Exception = (
        InvalidRequest(str(error))
        if kind in ("invalid", "not_found")
        else ServiceFailure(str(error))
    )
    refusal.__notes__ = [_UNFORMATTABLE]  # type: ignore[attr-defined]  # (3.11+)
    return refusal


def guarded(items: Iterator[T], shown: Callable[[str], str] = str) -> Iterator[T]:
    """``items``, with whatever their production raises answered as :func:`flight_error`."""
    try:
        yield from items
    except Exception as exc:
        raise flight_error(exc, shown) from None


def answering(method: F) -> F:
    """A Flight handler of the service whose failures, also those of the results or stream
    it returns, reach the client as :func:`flight_error` (``self.shown`` names the paths)."""

    @functools.wraps(method)
    def handler(self: Any, *args: Any) -> Any:
        try:
            result = method(self, *args)
        except Exception as exc:
            raise flight_error(exc, self.shown) from None
        if inspect.isgenerator(result):
            return guarded(result, self.shown)
        return result  # a GeneratorStream's batches are guarded by the handler itself

    return handler  # type: ignore[return-value]


def answering_schema(method: F) -> F:
    """:func:`answering` for ``get_schema`` (see the module doc)."""

    @functools.wraps(method)
    def handler(self: Any, *args: Any) -> Any:
        try:
            return method(self, *args)
        except Exception as exc:
            raise schema_error(exc, self.shown) from None

    return handler  # type: ignore[return-value]
