"""The Kafka value decoder (``carbonlite/ingest/decode.py``) on any bytes: a value is a row only
when it is one JSON object that fits the table, everything else is a bad record with its
reason, nothing crashes the process, and no verdict depends on the rest of the batch.

Issue 25: a JSON ``null`` next to an empty message killed the ingester with SIGSEGV (pyarrow's
JSON reader, on a block whose first row is ``null``) on every restart, and a ``null`` among
objects was committed as an all-null row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pytest

from carbonlite.errors import InvalidOptionError
from carbonlite.ingest import decode
from carbonlite.ingest.decode import check_json_columns, decode_values, screen_value
from tests.support import REPO

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("price", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.string())),
    ]
)
GOOD = b'{"id": 1, "name": "ada", "score": 2.5, "price": 9.99, "tags": ["a"]}'


@pytest.mark.slow
def test_the_decoder_survives_fuzzing_in_a_process_of_its_own(tmp_path: Path) -> None:
    """Hypothesis over arbitrary bytes and JSON-ish text (tests/support/decode_fuzz.py), 150
    batches plus the named cases of issue 25, in a child process: a SIGSEGV fails this test
    and shows the batch that caused it."""
    last = tmp_path / "last-batch.txt"
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.decode_fuzz", "--examples", "150", "--last", last],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    crashed = f"the decoder crashed (signal {-done.returncode}) on {last.read_text()[:2000]}"
    assert done.returncode >= 0, crashed
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "150 examples passed" in done.stdout


def test_null_next_to_an_empty_message_is_two_bad_records() -> None:
    """The reported batch, in a child process (it killed the one it ran in)."""
    code = (
        "import pyarrow as pa\n"
        "from carbonlite.ingest.decode import decode_values\n"
        "d = decode_values([b'{\"id\": 1}', b'null', b''], pa.schema([('id', pa.int64())]), 't')\n"
        "print(d.good, [i for i, _ in d.bad], d.rows.column('id').to_pylist())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split("\n")[0] == "[0] [1, 2] [1]"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"null", "the value is null"),
        (b" null\n", "the value is null"),
        (b"", "has no value"),
        (None, "has no value"),
        (b"   ", "not a JSON object"),
        (b"42", "the value is a number"),
        (b"-1.5e3", "the value is a number"),
        (b"1" * 5000, "not a JSON object"),
        (b'"text"', "the value is a string"),
        (b"[1, 2]", "the value is an array"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"true", "the value is true or false"),
        (b"false", "the value is true or false"),
        (b'{"id": 1', "not a JSON object"),
        (b'{"id": 1, "name": "ad}', "JSON parse error"),
        (b"{broken}", "JSON parse error"),
        (b'{"id": 1} {"id": 2}', "holds 2 JSON values"),
        (b'{"id": 1} null {"id": 2}', "holds 3 JSON values"),
        (b'{"id": 1, "name": "\xff"}', "not UTF-8"),
        (b'{"id": 1, "other": "\xc3"}', "not UTF-8"),
        (b"\xef\xbb\xbf" + GOOD, "byte-order mark"),
        ('{"id": 1}'.encode("utf-16-le"), "not a JSON object"),
        (b'{"id": 1, "score": NaN}', "NaN is not a JSON number"),
        (b'{"id": 1, "other": -Infinity}', "Inf"),
        (b'{"id": 1, "score": Inf}', "Inf"),
        (b'{"id": 1, "score": 1e999}', "Number too big"),
        (b'{"id": 1, "other": 1e999}', "Number too big"),
        (b'{"id": 1, "score": ' + b"9" * 309 + b"}", "out of the range of its column"),
        (b'{"id": 99999999999999999999}', "int64"),
        (b'{"id": 1.5}', "int64"),
        (b'{"id": "1"}', "changed from number to string"),
        (b'{"id": 1, "id": 2}', "specified twice"),
        (b'{"id": 1, "price": 1.005}', "scale"),
        (b'{"id": 1, "price": 123456789012.5}', "precision"),
        (b'{"id": 1, "tags": "a"}', "JSON parse error"),
        (b'{"id": 1, "name": "\\ud800"}', "surrogate"),
        (b'{"id": 1, "name": "a\x01b"}', "JSON parse error"),
        (b'{"id": 1, "name": "a\nb"}', "raw line break inside a string"),
        (b'{"id": 1, "name": "a\\"\r"}', "raw line break inside a string"),
        (b'{"\rid": 1}', "raw line break inside a string"),
    ],
)
def test_every_kind_of_bad_value_is_a_bad_record(value: bytes | None, reason: str) -> None:
    decoded = decode_values([GOOD, value, GOOD], SCHEMA, "t")
    assert decoded.good == [0, 2]
    assert [i for i, _ in decoded.bad] == [1]
    assert reason in decoded.bad[0][1], decoded.bad
    assert decoded.rows.column("id").to_pylist() == [1, 1]


@pytest.mark.parametrize(
    ("value", "row"),
    [
        (GOOD, {"id": 1, "name": "ada", "score": 2.5, "tags": ["a"]}),
        (b"  \t" + GOOD + b"\r\n", {"id": 1, "name": "ada"}),
        (b'{"id": 7, "other": "NaN", "name": "x"}', {"id": 7}),
        (b'{"name": "NaN and Infinity in text"}', {"name": "NaN and Infinity in text"}),
        (b'{"id": 2, "x": 1, "x": 2}', {"id": 2}),  # a repeated key the table ignores
        (b'{"id": 3, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", {"id": 3}),
        (b'{"id": 4, "name": "line\\nbreak \\u00e9"}', {"name": "line\nbreak \u00e9"}),
        (b'{"id": 5,\n "name":\r\n "multi-line"}', {"name": "multi-line"}),
        (b'{"id": -9223372036854775808}', {"id": -(2**63)}),
        (b"{}", {"id": None, "name": None}),
    ],
)
def test_json_objects_are_rows(value: bytes, row: dict[str, object]) -> None:
    decoded = decode_values([value], SCHEMA, "t")
    assert decoded.good == [0] and decoded.bad == []
    got = decoded.rows.to_pylist()[0]
    assert {k: got[k] for k in row} == row


def test_screening_sorts_what_pyarrow_would_take() -> None:
    """What pyarrow's reader takes but JSON is not: the screen catches it first."""
    assert screen_value(b'{"a": NaN}') is not None
    assert screen_value(b'{"a": "NaN"}') is None
    assert screen_value(b'{"a": "\\"NaN"}') is None
    assert screen_value(b'{"a": "x\\\\", "b": Infinity}') is not None
    assert screen_value(b'{"a": "\xff"}') is not None
    assert screen_value(b"null") is not None
    assert screen_value(b'{"a": 1}') is None


def test_a_verdict_never_depends_on_the_batch() -> None:
    """A restart may read the same messages in batches of another shape: every value gets the
    same verdict and the same row in each."""
    values: list[bytes | None] = []
    for i in range(600):
        kind = i % 7
        if kind == 3:
            values.append(b"null")
        elif kind == 5:
            values.append(json.dumps({"id": i, "name": i}).encode())  # a number for a string
        elif i % 50 == 0:
            values.append(None)
        else:
            values.append(json.dumps({"id": i, "name": f"n{i}", "score": i / 3}).encode())
    whole = decode_values(values, SCHEMA, "t")
    rows = dict(zip(whole.good, whole.rows.to_pylist(), strict=True))
    assert len(whole.bad) == sum(1 for i in range(600) if i % 7 in (3, 5) or i % 50 == 0)
    for size in (1, 7, 64, 599):
        for start in range(0, len(values), size):
            part = decode_values(values[start : start + size], SCHEMA, "t")
            assert [start + i for i in part.good] == [i for i in rows if start <= i < start + size]
            assert part.rows.to_pylist() == [rows[start + i] for i in part.good]


def test_a_clean_batch_is_one_read_and_a_few_bad_values_a_few_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The price of safety: a batch without bad values is still one call to the JSON reader,
    and 3 values that fail in the reader among 4,096 cost some 2 * 3 * log2(4096) calls, not
    4,096."""
    calls = []
    real = pj.read_json

    def counting(*args: object, **kwargs: object) -> pa.Table:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode.pj, "read_json", counting)
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(4096)]
    assert len(decode_values(values, SCHEMA, "t").good) == 4096
    assert len(calls) == 1
    calls.clear()
    for i in (5, 2000, 4000):
        values[i] = b'{"id": "not a number"}'
    values[100] = b"null"  # screened out: never read
    decoded = decode_values(values, SCHEMA, "t")
    assert [i for i, _ in decoded.bad] == [5, 100, 2000, 4000]
    assert len(calls) <= 2 * 3 * 12 + 1


def test_values_given_joined_get_the_same_verdicts() -> None:
    """A file's lines come joined (``joined=``, issue 38): a batch whose every line is braced
    is screened by whole-batch scans, any other as values; verdicts and rows are those of the
    values alone, whatever is around and inside them."""
    lines = [
        GOOD,
        b'{"id": 2, "name": "}\\n{"}',  # the join's marks inside a string
        b'{"id": 3, "name": "x"}',
        b'{"id": "three"}',
        b'{"id": 4, "score": NaN}',
        b'{"id": 5, "name": "\xff"}',
        b'{"id": 6} {"id": 7}',
        b'{"a": "}',  # unterminated: with the next line it would make one object
        b'{"id": 8}',
        b"null",
        b"  {}  ",
        b"[1]",
    ]
    batches = [lines, [GOOD] * 50, lines[:3], [b"{}"], lines[7:9]]
    for values in batches:
        joined = b"\n".join(values)
        assert decode.braced_lines(joined, len(values)) == all(
            v[:1] == b"{" and v[-1:] == b"}" for v in values
        )
        alone = decode_values(list(values), SCHEMA, "t")
        given = decode_values(list(values), SCHEMA, "t", joined=joined)
        assert (given.good, given.bad) == (alone.good, alone.bad), values
        assert given.rows.equals(alone.rows)
    assert not decode.braced_lines(b"{}\n\n{}", 3)
    assert not decode.braced_lines(b"{}\n{}", 3)


@pytest.mark.parametrize(
    "kind",
    [
        pa.map_(pa.string(), pa.int64()),
        pa.duration("us"),
        pa.binary(4),
        pa.float16(),
        pa.large_list(pa.int64()),
        pa.list_(pa.map_(pa.string(), pa.int8())),
    ],
    ids=str,
)
def test_columns_json_cannot_fill_are_named(kind: pa.DataType) -> None:
    schema = pa.schema([("id", pa.int64()), ("bad", kind)])
    with pytest.raises(InvalidOptionError, match=r"'bad' .*cannot fill|cannot fill: 'bad'"):
        check_json_columns(schema, "'t'")
    check_json_columns(pa.schema([pa.field("id", pa.int64(), False), ("s", pa.string())]), "t")
