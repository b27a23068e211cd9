"""SQL-ish predicates as filters: ``"day >= '2026-01-01' AND day < '2026-02-01'"``.

What Spark users write in ``replaceWhere`` and ``where()`` strings, read into the DNF terms
:func:`carbonlite.reader.expression.parse_filter` takes (an OR of ANDs of ``(column, op,
value)``), so the string prunes and filters exactly as those do. The grammar::

    expr       := conjunct (OR conjunct)*
    conjunct   := atom (AND atom)*
    atom       := '(' expr ')' | column op literal | column [NOT] IN '(' literal, ... ')'
                | column BETWEEN literal AND literal
    op         := = | == | != | <> | < | <= | > | >=
    literal    := 'string' | number | TRUE | FALSE | DATE 'yyyy-mm-dd' | TIMESTAMP '...'

Keywords are case-insensitive; a column may be quoted in backquotes. A string literal compared
with a date or timestamp column is read as an ISO date or date-time. Anything else (functions,
arithmetic, ``IS NULL``, ``NOT`` before an expression) is an :class:`InvalidFilterError` that
quotes the predicate and the place it stopped at.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from carbonlite.errors import InvalidFilterError

__all__ = ["sql_dnf"]

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
    r"|(?P<op><=|>=|<>|!=|==|=|<|>)|(?P<punct>[(),])|(?P<quoted>`(?:[^`]|``)+`)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*))"
)
_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_Term = tuple[str, str, Any]
_Dnf = list[list[_Term]]


class _Parser:
    def __init__(self, text: str, types: dict[str, pa.DataType], where: str) -> None:
        self.text, self.types, self.where = text, types, where
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                if not text[pos:].strip():
                    break
                self._fail(pos + len(text[pos:]) - len(text[pos:].lstrip()), "cannot read this")
            assert match is not None
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            pos = match.end()
        self.at = 0

    def _fail(self, pos: int, what: str) -> None:
        raise InvalidFilterError(
            f"predicate {self.text!r} for {self.where}: {what} at character {pos + 1} "
            f"({self.text[pos : pos + 20]!r}); write comparisons of a column with a literal "
            "(=, !=, <, <=, >, >=, IN (...), BETWEEN ... AND ...) joined by AND / OR, e.g. "
            "\"day >= '2026-01-01' AND region IN ('eu', 'us')\""
        )

    def _peek(self) -> tuple[str, str, int]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "", len(self.text))

    def _keyword(self, *words: str) -> bool:
        kind, value, _ = self._peek()
        if kind == "word" and value.upper() in words:
            self.at += 1
            return True
        return False

    def _expect(self, value: str) -> None:
        kind, got, pos = self._peek()
        if got != value or kind not in ("punct", "word"):
            self._fail(pos, f"expected {value!r}")
        self.at += 1

    def parse(self) -> _Dnf:
        dnf = self._or()
        kind, _, pos = self._peek()
        if kind != "end":
            self._fail(pos, "unexpected text")
        return dnf

    def _or(self) -> _Dnf:
        dnf = self._and()
        while self._keyword("OR"):
            dnf = dnf + self._and()
        return dnf

    def _and(self) -> _Dnf:
        dnf = self._atom()
        while self._keyword("AND"):
            right = self._atom()
            dnf = [a + b for a in dnf for b in right]
        return dnf

    def _atom(self) -> _Dnf:
        kind, value, pos = self._peek()
        if kind == "punct" and value == "(":
            self.at += 1
            dnf = self._or()
            self._expect(")")
            return dnf
        column = self._column()
        if self._keyword("BETWEEN"):
            low = self._literal(column)
            if not self._keyword("AND"):
                self._fail(self._peek()[2], "expected AND of BETWEEN")
            return [[(column, ">=", low), (column, "<=", self._literal(column))]]
        negated = self._keyword("NOT")
        if self._keyword("IN"):
            self._expect("(")
            values = [self._literal(column)]
            while self._peek()[1] == ",":
                self.at += 1
                values.append(self._literal(column))
            self._expect(")")
            return [[(column, "not in" if negated else "in", values)]]
        kind, value, pos = self._peek()
        if negated or kind != "op":
            self._fail(pos, "expected a comparison operator or IN")
        self.at += 1
        return [[(column, _OPS[value], self._literal(column))]]

    def _column(self) -> str:
        kind, value, pos = self._peek()
        if kind == "quoted":
            self.at += 1
            return value[1:-1].replace("``", "`")
        if kind != "word" or value.upper() in ("AND", "OR", "NOT", "IN", "BETWEEN"):
            self._fail(pos, "expected a column name")
        self.at += 1
        return value

    def _literal(self, column: str) -> Any:
        kind, value, pos = self._peek()
        if kind == "word" and value.upper() in ("DATE", "TIMESTAMP", "TIMESTAMP_NTZ"):
            self.at += 1  # the column's type decides how the string is read
            kind, value, pos = self._peek()
            if kind != "str":
                self._fail(pos, "expected a quoted date or timestamp")
        self.at += 1
        if kind == "num":
            return float(value) if any(c in value for c in ".eE") else int(value)
        if kind == "word" and value.upper() in ("TRUE", "FALSE"):
            return value.upper() == "TRUE"
        if kind != "str":
            self._fail(pos, "expected a literal (a number, 'string', TRUE or FALSE)")
        return self._typed(column, value[1:-1].replace("''", "'"), pos)

    def _typed(self, column: str, text: str, pos: int) -> Any:
        column_type = self.types.get(column)
        try:
            if column_type is not None and pat.is_date(column_type):
                return datetime.date.fromisoformat(text)
            if column_type is not None and pat.is_timestamp(column_type):
                return datetime.datetime.fromisoformat(text)
        except ValueError:
            self._fail(pos, f"{text!r} is not an ISO date or timestamp for column {column!r}")
        return text


def sql_dnf(text: str, schema: pa.Schema, *, where: str) -> _Dnf:
    """``text`` as DNF terms (a list of AND-ed lists, OR-ed) for ``parse_filter``."""
    if not text.strip():
        raise InvalidFilterError(f"an empty predicate for {where}")
    return _Parser(text, {f.name: f.type for f in schema}, where).parse()
