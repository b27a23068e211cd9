"""Fuzzes the Kafka value decoder (``carbonlite.ingest.decode``) with hypothesis, in a process
of its own, so that a crash (pyarrow's JSON reader dies with SIGSEGV on some inputs) fails the
test that started it rather than killing pytest.

    python -m tests.support.decode_fuzz --examples 300 --last PATH

Batches of values, arbitrary bytes and JSON-ish text (objects with the table's keys and
others, every kind of JSON value, repeated keys, NaN and Infinity literals, huge numbers,
deep nesting, truncations, stray bytes, invalid UTF-8), each decoded as a batch and each
value alone. Every batch must split into rows and bad records; every row must be a value the
standard library reads as a JSON object, with the same values; every value that is not one
must be a bad record; and each value's verdict and row must not depend on its batch.

Before each decode the batch is written to ``--last`` (replacing the one before), so after a
crash it holds the input that crashed. Exits 0 when every example passed, 1 with hypothesis's
report otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from carbonlite.ingest.decode import Decoded, decode_values

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("meta", pa.struct([("a", pa.int64()), ("b", pa.string())])),
    ]
)
KEYS = ["id", "name", "score", "tags", "meta", "a", "b", "other", ""]

# --- JSON-ish text ------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """``value`` as JSON text, where an object is a list of (key, value) pairs (so keys may
    repeat) and floats may be NaN or infinite (written as Python's json writes them)."""
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return "{" + ",".join(f"{json.dumps(k)}:{_text(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, Raw):
        return value.text
    return json.dumps(value)


class Raw:
    """Text put into the output as it is (a huge number, deep nesting)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:40]!r}{'...' if len(self.text) > 40 else ''})"


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["NaN", "Infinity", "null", "x\u2028y", "é", "\x00"]),
    st.builds(lambda n: Raw("9" * n), st.integers(300, 5000)),
    st.builds(lambda n: Raw("1e" + "9" * n), st.integers(1, 40)),
    st.builds(lambda n: Raw("[" * n + "]" * n), st.integers(100, 3000)),
    st.builds(lambda n: Raw('{"a":' * n + "1" + "}" * n), st.integers(100, 3000)),
    st.sampled_from([Raw("NaN"), Raw("-Infinity"), Raw("Inf"), Raw("-NaN"), Raw("nan")]),
    st.sampled_from([Raw('"\\ud800"'), Raw('"\\udc00x"'), Raw("-0"), Raw("1.5e-400")]),
    st.sampled_from([Raw('"raw\nbreak"'), Raw('"raw\rreturn"'), Raw('"\\\\"'), Raw('"\\""')]),
)


def _objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    pairs = st.lists(st.tuples(st.sampled_from(KEYS), children), min_size=1, max_size=5)
    return pairs | st.just(Raw("{}"))


_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | _objects(children),
    max_leaves=12,
)
_objecty = _objects(_json)


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """JSON-ish text, sometimes damaged: truncated, a byte put in, padded, or re-encoded."""
    text = _text(draw(_objecty if draw(st.booleans()) else _json)).encode("utf-8", "surrogatepass")
    how = draw(st.sampled_from(["as is", "as is", "truncate", "insert", "pad", "utf-16"]))
    if how == "truncate" and text:
        return text[: draw(st.integers(0, len(text) - 1))]
    if how == "insert":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.binary(min_size=1, max_size=3)) + text[at:]
    if how == "pad":
        pad = draw(
            st.sampled_from([b" ", b"\n", b"\r\n", b"\t", b"\x0b", b"\x0c", b"\xef\xbb\xbf"])
        )
        return pad + text + pad
    if how == "utf-16":
        return text.decode("utf-8", "surrogatepass").encode("utf-16-le", "surrogatepass")
    return text


_values = st.one_of(
    st.binary(max_size=40),
    _mutated(),
    _mutated(),
    st.sampled_from([b"null", b"", b" ", b"null ", b"{}", b"[]", b'"x"', b"0", b"true", b"\xff"]),
    st.none(),
)

# --- what must hold -----------------------------------------------------------------------------


class Object(dict[str, Any]):
    """A JSON object as the standard library reads it, with the keys it repeats."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs
        """Every key and value, repeated ones too (the mapping keeps the last)."""
        keys = [k for k, _ in pairs]
        self.repeated = {k for k in keys if keys.count(k) > 1}


class Unreadable:
    """The standard library could not read a value: it nests too deeply, or has an integer of
    more digits than Python converts (4,300)."""


def _strict(value: bytes | None) -> Any:
    """``value`` read the way JSON is defined (UTF-8, no NaN or Infinity), or the reason why
    it cannot be; :class:`Unreadable` when the standard library cannot tell."""

    def refuse(literal: str) -> Any:
        raise ValueError(f"{literal} is not JSON")

    if value is None:
        return ValueError("no value")
    try:
        return json.loads(value.decode("utf-8"), parse_constant=refuse, object_pairs_hook=Object)
    except RecursionError:
        return Unreadable()
    except ValueError as exc:
        return Unreadable() if "integer string conversion" in str(exc) else exc


def _fits(value: Any, kind: pa.DataType) -> bool:
    """Whether a JSON value (as the standard library reads it) fits a column of ``kind``, as
    pyarrow's JSON reader converts (missing and null always fit)."""
    if value is None:
        return True
    if pa.types.is_int64(kind):
        return type(value) is int and -(2**63) <= value < 2**63
    if pa.types.is_float64(kind):
        try:
            return type(value) in (int, float) and math.isfinite(float(value))
        except OverflowError:  # an integer past a double's range
            return False
    if pa.types.is_string(kind):
        return type(value) is str
    if pa.types.is_list(kind):
        return type(value) is list and all(_fits(v, kind.value_type) for v in value)
    assert pa.types.is_struct(kind), kind
    return isinstance(value, Object) and _object_fits(value, kind)


def _object_fits(value: Object, kind: pa.StructType | pa.Schema) -> bool:
    names = [f.name for f in kind]
    if value.repeated & set(names):
        return False
    return all(_fits(value.get(f.name), f.type) for f in kind)


def _beyond_json_reader(value: Any) -> bool:
    """Whether ``value`` (keys too) holds what JSON's grammar allows but the reader may refuse
    wherever it is: a string with an unpaired surrogate (UTF-8 cannot hold it), or a number
    out of a double's range. A loop, not a recursion: values nest as deep as the standard
    library reads."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in item):
            return True
        if isinstance(item, float) and math.isinf(item):
            return True  # the standard library reads 1e999 as infinity
        if isinstance(item, int) and not isinstance(item, bool):
            try:
                float(item)
            except OverflowError:
                return True
        if isinstance(item, list):
            pending += item
        if isinstance(item, Object):
            pending += [part for pair in item.pairs for part in pair]
    return False


def _same(got: Any, want: Any, kind: pa.DataType) -> bool:
    """Whether ``got`` (a decoded cell) holds ``want`` (the standard library's value)."""
    if want is None:
        return got is None
    if pa.types.is_floating(kind):
        return got is not None and math.isclose(got, float(want), rel_tol=1e-15)
    if pa.types.is_list(kind):
        return len(got) == len(want) and all(
            _same(g, w, kind.value_type) for g, w in zip(got, want, strict=True)
        )
    if pa.types.is_struct(kind):
        return all(_same(got[f.name], want.get(f.name), f.type) for f in kind)
    return bool(got == want and type(got) is type(want))


def _check_row(value: bytes, row: dict[str, Any]) -> None:
    parsed = _strict(value)
    if isinstance(parsed, Unreadable):
        return  # past the standard library's reach, in a field the table ignores
    assert isinstance(parsed, Object), f"{value!r} became a row, but is not an object: {parsed!r}"
    assert _object_fits(parsed, SCHEMA), f"{value!r} became a row, but does not fit: {parsed!r}"
    for field in SCHEMA:
        want = parsed.get(field.name)
        assert _same(row[field.name], want, field.type), (value, field.name, row, want)


def _check(values: list[bytes | None], decoded: Decoded) -> None:
    good, bad = decoded.good, [i for i, _ in decoded.bad]
    assert good == sorted(good) and bad == sorted(bad)
    assert sorted(good + bad) == list(range(len(values)))
    assert all(isinstance(e, str) and e for _, e in decoded.bad)
    assert decoded.rows.schema.equals(SCHEMA)
    assert decoded.rows.num_rows == len(good)
    decoded.rows.validate(full=True)
    rows = decoded.rows.to_pylist()
    for i, row in zip(good, rows, strict=True):
        _check_row(values[i], row)  # type: ignore[arg-type]
    for i, error in decoded.bad:
        parsed = _strict(values[i])
        if isinstance(parsed, Object):
            refusable = not _object_fits(parsed, SCHEMA) or _beyond_json_reader(parsed)
            assert refusable, f"{values[i]!r} is a JSON object that fits, yet bad: {error}"


class _Recorder:
    """Writes each batch to a file before it is decoded, for the report after a crash."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, values: list[bytes | None]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, repr(values).encode())
        finally:
            os.close(fd)


def fuzz(examples: int, last: str) -> None:
    record = _Recorder(last)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(_values, max_size=10))
    @example([b'{"id": 1}', b"null", b""])  # issue 25: SIGSEGV on every restart
    @example([b"null"])
    @example([b" null ", b'{"id": 2}'])
    @example([b'{"id": 1}', b"null", b'{"id": 2}'])  # was an all-null row
    @example([b'{"id": 1} null {"id": 2}', b'{"id": 3}'])
    @example([b'{"id": 1, "score": NaN}', b'{"id": 2, "x": -Infinity}', b'{"name": "NaN"}'])
    @example([b'{"name": "\xff"}', b'{"x": "\xfe"}', b"\xef\xbb\xbf{}"])
    @example([b'{"id": 1, "id": 2}', b'{"x": 1, "x": 2, "id": 3}'])
    @example([b"[" * 100_000 + b"]" * 100_000, b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
    @example([b'{"id": ' + b"9" * 5000 + b"}", b"9" * 5000, b'{"score": 1e999}'])
    @example([b'{"score": ' + b"9" * 309 + b"}", b'{"score": 1e308}'])  # was infinity
    @example([b'{"\rid": {}}', b'{"name": "a\nb"}', b'{"id":\r\n1}'])  # was made valid
    def run(values: list[bytes | None]) -> None:
        record(values)
        together = decode_values(values, SCHEMA, "the fuzzed table")
        _check(values, together)
        rows = together.rows.to_pylist()
        verdicts = {i: row for i, row in zip(together.good, rows, strict=True)}
        for i, value in enumerate(values):
            record([value])
            alone = decode_values([value], SCHEMA, "the fuzzed table")
            assert (i in verdicts) == bool(alone.good), (value, together.bad, alone.bad)
            if alone.good:
                assert alone.rows.to_pylist() == [verdicts[i]], value

    run()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--last", required=True)
    args = parser.parse_args()
    try:
        fuzz(args.examples, args.last)
    except AssertionError as exc:
        print(f"decode fuzz failed: {exc!r}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"decode fuzz: {args.examples} examples passed")


if __name__ == "__main__":
    main()
