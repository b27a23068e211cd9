"""How a Flight call reaches the Flight SQL side of the service, and how its failures reach
the client.

:func:`flight_sql_first` wraps a handler of the service: a call whose descriptor, ticket or
action is Flight SQL's goes to the method of the same name of ``self.sql``
(:class:`~carbonlite.serve.flight_sql.commands.FlightSqlCommands`); every other call to
the handler as before. Failures of Flight SQL calls, also those raised while their stream or
results are consumed, reach the client as:

- ``UNIMPLEMENTED`` for what the service does not support (:class:`SqlUnsupportedError`),
- ``INVALID_ARGUMENT`` for a refused or failing query, a bad ticket or message (the client's
  mistakes: ``BadRequestError``), which ADBC raises as ``ProgrammingError``,
- otherwise as the rest of the service answers (``answers.py``: ``FlightServerError``).

pyarrow sends a non-Flight exception's message followed by its traceback; the ones raised
here carry a note pyarrow cannot encode, so only ``Detail: Python exception: <type>``
follows the message (see ``answers.py``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from carbonlite.serve.answers import flight_error, one_line, schema_error
from carbonlite.serve.flight_sql.protocol import is_flight_sql
from carbonlite.serve.wire import BadRequestError

__all__ = ["FLIGHT_SQL_ACTIONS", "SqlUnsupportedError", "flight_sql_first", "is_sql_request"]

F = TypeVar("F", bound=Callable[..., Any])

FLIGHT_SQL_ACTIONS = frozenset(
    {
        "CreatePreparedStatement",
        "ClosePreparedStatement",
        "CreatePreparedSubstraitPlan",
        "BeginTransaction",
        "BeginSavepoint",
        "EndTransaction",
        "EndSavepoint",
        "CancelQuery",
        "CancelFlightInfo",
        "RenewFlightEndpoint",
        "SetSessionOptions",
        "GetSessionOptions",
        "CloseSession",
    }
)
"""Every action of Flight SQL (and Flight's newer own): the service answers the first two
and ``UNIMPLEMENTED`` to the others."""
_UNFORMATTABLE = "\udc00"


class SqlUnsupportedError(NotImplementedError):
    """A Flight SQL command or action the service does not implement."""


class _InvalidSql(pa.ArrowInvalid):
    """What the client sees for a refused or failing query (``INVALID_ARGUMENT``)."""


def is_sql_request(request: object) -> bool:
    """Whether a call's descriptor, ticket or action is Flight SQL's."""
    if isinstance(request, flight.FlightDescriptor):
        return request.descriptor_type == flight.DescriptorType.CMD and is_flight_sql(
            request.command
        )
    if isinstance(request, flight.Ticket):
        return is_flight_sql(request.ticket)
    if isinstance(request, flight.Action):
        return request.type in FLIGHT_SQL_ACTIONS
    return False


def _answer(exc: BaseException, shown: Callable[[str], str], *, schema: bool) -> Exception:
    if isinstance(exc, SqlUnsupportedError):
        error: Exception = SqlUnsupportedError(one_line(shown(str(exc))))
    elif isinstance(exc, BadRequestError):
        error = _InvalidSql(one_line(shown(str(exc))))
    elif schema:
        return schema_error(exc, shown)
    else:
        return flight_error(exc, shown)
    error.__notes__ = [_UNFORMATTABLE]  # type: ignore[attr-defined]  # (3.11+)
    return error


def _guarded(items: Iterator[Any], shown: Callable[[str], str]) -> Iterator[Any]:
    try:
        yield from items
    except Exception as exc:
        raise _answer(exc, shown, schema=False) from None


def guarded_stream(items: Iterator[Any], shown: Callable[[str], str]) -> Iterator[Any]:
    """``items`` (a DoGet stream's batches), their failures answered as the module says."""
    return _guarded(items, shown)


def flight_sql_first(method: F) -> F:
    """The service's handler ``method``, with Flight SQL calls sent to ``self.sql``."""
    name = method.__name__

    @functools.wraps(method)
    def handler(self: Any, context: Any, request: Any, *rest: Any) -> Any:
        if not is_sql_request(request):
            return method(self, context, request, *rest)
        try:
            result = getattr(self.sql, name)(request, *rest)
        except Exception as exc:
            raise _answer(exc, self.shown, schema=name == "get_schema") from None
        if inspect.isgenerator(result):
            return _guarded(result, self.shown)
        if name == "get_schema":
            return flight.SchemaResult(result)
        return result

    return handler  # type: ignore[return-value]
