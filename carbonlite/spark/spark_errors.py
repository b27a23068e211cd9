"""A CarbonLite error raised inside Spark (a task, a data source's writer or reader, a
streaming query), given back to the user as itself: the same class and message, first, rather
than behind Spark's "Writing job failed", ``PythonException`` or ``StreamingQueryException``
and a Python traceback. Spark's exception stays as the cause (``__cause__``)."""

from __future__ import annotations

import inspect
import re

from carbonlite import errors

__all__ = ["carbonlite_error"]

_RAISED = re.compile(r"^carbonlite\.errors\.(\w+): ", re.MULTILINE)
_SPARK_TAIL = re.compile(r"\s*SQLSTATE: \w+")
_ENDS = ("SQLSTATE", "===", "\tat ", "JVM stacktrace", "Traceback ")


def carbonlite_error(exc: BaseException) -> errors.CarbonLiteError | None:
    """The CarbonLite error Spark's ``exc`` reports (the last one its text names), rebuilt
    with its message (:func:`_rebuilt`); None when it reports none."""
    text = str(exc)
    found = list(_RAISED.finditer(text))
    cls = getattr(errors, found[-1].group(1), None) if found else None
    if not (isinstance(cls, type) and issubclass(cls, errors.CarbonLiteError)):
        return None
    lines: list[str] = []
    for line in text[found[-1].end() :].splitlines():
        if lines and (not line.strip() or line.lstrip().startswith(_ENDS)):
            break
        lines.append(_SPARK_TAIL.sub("", line).rstrip())
    return _rebuilt(cls, "\n".join(lines).strip())


def _rebuilt(cls: type[errors.CarbonLiteError], message: str) -> errors.CarbonLiteError:
    """An instance of ``cls`` with ``message``; the attributes its constructor takes besides
    the message (``SchemaChangedError.version``, ``CorruptDataError.path``, ...) are None:
    Spark passes on only the text."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        named = parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        if named and name not in ("self", "message"):
            default = parameter.default
            setattr(error, name, None if default is parameter.empty else default)
    return error
