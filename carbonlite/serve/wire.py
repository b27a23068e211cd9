"""The JSON clients send the service (``DoPut`` and ``GetFlightInfo`` commands, tickets),
checked against a schema before anything acts on it.

Before parsing, the bytes are bounded (:data:`MAX_COMMAND_BYTES`, :data:`MAX_TICKET_BYTES`)
and so is their nesting (:data:`MAX_DEPTH`), so a hostile document cannot exhaust memory or
make the parser recurse. Parsing is strict: UTF-8 only, no ``NaN``/``Infinity``, no key
twice, an object at the top. Then every field is checked for its type and range and unknown
fields are refused. Anything else is :class:`BadRequestError`, with a one-line message
that quotes at most :data:`QUOTE_CHARS` characters of what was sent.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from carbonlite.errors import CarbonLiteError

__all__ = [
    "INT64_MAX",
    "MAX_COMMAND_BYTES",
    "MAX_DEPTH",
    "MAX_PRODUCER_ID_BYTES",
    "MAX_TICKET_BYTES",
    "BadRequestError",
    "Rule",
    "check_fields",
    "dnf_rule",
    "int64_rule",
    "load_object",
    "producer_id_rule",
    "quote",
    "text_problem",
]

MAX_COMMAND_BYTES = 64 * 1024
"""Longest ``DoPut``/``GetFlightInfo`` command: a table name, a producer id, a filter."""
MAX_TICKET_BYTES = 1024 * 1024
"""Longest ticket: a memory endpoint's ticket names every producer with puts in memory."""
MAX_DEPTH = 8
"""Deepest nesting of lists and objects: a DNF filter inside a ticket needs 5."""
MAX_PRODUCER_ID_BYTES = 200
"""Longest producer id (UTF-8): it becomes the transaction marker ``flight:<producer_id>``."""
MAX_TERMS = 1000
"""Most terms in one filter, and most values in one ``in`` term: 100 times that."""
QUOTE_CHARS = 200
"""Most characters of a client's document quoted back in a message."""
INT64_MAX = 2**63 - 1

_OPERATORS = frozenset(("=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"))
_REFUSED_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
"""Control, format (bidi overrides, zero-width), surrogate, private, unassigned, separators."""
_STRING = re.compile(rb'"(?:[^"\\]+|\\.)*"?', re.S)
"""A JSON string, or an unterminated one to the end (so the pattern never backtracks)."""
_BRACKET = re.compile(rb"[\[\]{}]")


class BadRequestError(CarbonLiteError, ValueError):
    """A descriptor or ticket that is not the JSON the service expects."""


def quote(value: object) -> str:
    """``value`` for a message: one line, at most :data:`QUOTE_CHARS` characters."""
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be an identifier (a phrase), or None: it must hold no control,
    format (bidi overrides, zero-width), surrogate, private-use, unassigned or line/paragraph
    separator characters."""
    for char in text:
        category = unicodedata.category(char)
        if category in _REFUSED_CATEGORIES:
            return f"contains the character U+{ord(char):04X} (Unicode category {category})"
    return None


# --- bytes to an object -----------------------------------------------------------------------


def _depth(data: bytes) -> int:
    """The deepest nesting of lists and objects in ``data`` (strings skipped); no recursion."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub(b'""', data)):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body = dict(pairs)
    if len(body) != len(pairs):
        twice = sorted({k for k, _ in pairs if sum(1 for j, _ in pairs if j == k) > 1})
        raise ValueError(f"the key(s) {twice} appear more than once")
    return body


def load_object(data: object, what: str, *, limit: int) -> dict[str, Any]:
    """The JSON object in ``data`` (bytes), checked for size and nesting before it is parsed;
    :class:`BadRequestError` naming ``what`` otherwise."""
    if not isinstance(data, bytes):
        raise BadRequestError(f"the {what} must be bytes, not {type(data).__name__}")
    if len(data) > limit:
        raise BadRequestError(
            f"the {what} is {len(data)} bytes, more than the {limit} the service reads"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequestError(
            f"the {what} is not UTF-8 text ({exc.reason}): {quote(data)}"
        ) from None
    depth = _depth(data)
    if depth > MAX_DEPTH:
        raise BadRequestError(
            f"the {what} nests lists and objects {depth} deep, more than {MAX_DEPTH}: {quote(data)}"
        )
    try:
        body = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        reason = " ".join(str(exc).split())
        raise BadRequestError(f"the {what} is not JSON ({reason}): {quote(data)}") from None
    if not isinstance(body, dict):
        raise BadRequestError(f"the {what} must be a JSON object, not {quote(data)}")
    return body


# --- fields -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """What one field must be: ``accept`` says whether a value is it, ``describe`` says so in
    words. A field that is not ``required`` may be missing or null."""

    describe: str
    accept: Callable[[Any], bool]
    required: bool = True


def check_fields(body: Mapping[str, Any], rules: Mapping[str, Rule], what: str) -> None:
    """Refuse ``body`` (:class:`BadRequestError`) unless it has only the fields of ``rules``,
    each required one present, and every value one its rule accepts."""
    unknown = sorted(set(body) - set(rules))
    if unknown:
        raise BadRequestError(
            f"the {what} has unknown field(s) {quote(unknown)}; its fields are {sorted(rules)}"
        )
    for key, rule in rules.items():
        value = body.get(key)
        if value is None and not rule.required:
            continue
        if key not in body:
            raise BadRequestError(f'the {what} needs "{key}" ({rule.describe})')
        if not rule.accept(value):
            raise BadRequestError(
                f'the {what}\'s "{key}" must be {rule.describe}, not {quote(value)}'
            )


def _is_int64(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= INT64_MAX


def int64_rule(describe: str, *, minimum: int = 0, required: bool = True) -> Rule:
    """An integer from ``minimum`` to 2**63 - 1 (never a bool)."""
    return Rule(
        f"{describe}: an integer from {minimum} to {INT64_MAX}",
        lambda v: _is_int64(v, minimum),
        required,
    )


def _is_producer_id(value: Any) -> bool:
    # composed (NFC), as a table name: "café" sent composed and decomposed would otherwise
    # be two producers that read alike, each with its own sequences and marker
    return (
        isinstance(value, str)
        and 0 < len(value.encode("utf-8", "surrogatepass")) <= MAX_PRODUCER_ID_BYTES
        and text_problem(value) is None
        and unicodedata.is_normalized("NFC", value)
    )


def producer_id_rule(*, required: bool = True) -> Rule:
    return Rule(
        f"a producer id: text of 1 to {MAX_PRODUCER_ID_BYTES} bytes (UTF-8) without control or "
        "format characters, in Unicode's composed form (NFC)",
        _is_producer_id,
        required,
    )


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return value == value and abs(value) != float("inf")
    return value is None or isinstance(value, (bool, int, str))


def _is_term(term: Any) -> bool:
    if not (isinstance(term, list) and len(term) == 3):
        return False
    column, op, value = term
    if not (isinstance(column, str) and column and isinstance(op, str) and op in _OPERATORS):
        return False
    if op in ("in", "not in"):
        return (
            isinstance(value, list)
            and len(value) <= 100 * MAX_TERMS
            and all(_is_scalar(v) for v in value)
        )
    return _is_scalar(value)


def _is_dnf(value: Any) -> bool:
    if not isinstance(value, list) or not value:
        return False
    if all(_is_term(t) for t in value):
        return len(value) <= MAX_TERMS
    groups = [g for g in value if isinstance(g, list) and g and all(_is_term(t) for t in g)]
    return len(groups) == len(value) and sum(map(len, groups)) <= MAX_TERMS


def dnf_rule() -> Rule:
    """A filter: terms ``[column, op, value]`` ANDed, or a list of such lists ORed."""
    return Rule(
        'DNF lists such as [["id", ">", 5]] or [[["a", "=", 1]], [["b", "in", [2, 3]]]] '
        f"(operators {', '.join(sorted(_OPERATORS))}; values null, booleans, numbers or text; "
        f"at most {MAX_TERMS} terms)",
        _is_dnf,
        required=False,
    )
