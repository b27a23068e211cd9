"""Write the golden table of this log format version, ``tests/data/golden_v<N>/``, and its
expectations, ``golden_v<N>_expected.json``.

Run once per format version, from the repository root, and check the output in::

    python tests/data/make_golden.py            # refuses to replace an existing golden table
    python tests/data/make_golden.py --force

Every later CarbonLite version must read every golden table exactly as its expectations say
(``tests/test_golden.py``). The table is tiny, deterministic in content, and covers: appends
of a table and of an iterable of batches, a transaction marker, ``add_columns``, an overwrite,
an append leaving out nullable columns, a transaction-only commit, row-level deletes, an
update and a merge (format 4: deletion vectors, some of them in a checkpoint), partitions
by ``bucket(2, id)`` with publishes, content hashes and a stored state (format 5), a
rename, a drop, two widenings, a column with a default and a handoff after them (format 6),
bloom filters built for existing blocklets, written with new ones and extended to a second
column, and secondary indexes (format 7), and checkpoints (every 4 versions), with timestamp-with-zone, decimal, list<string>, struct, binary and float columns.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import math
import shutil
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from carbonlite.metadata import LOG_FORMAT_VERSION

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / f"golden_v{LOG_FORMAT_VERSION}"
EXPECTED = HERE / f"golden_v{LOG_FORMAT_VERSION}_expected.json"

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("ratio", pa.float64()),
        pa.field("happened", pa.timestamp("us", tz="Europe/Paris")),
        pa.field("day", pa.date32()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("point", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        pa.field("raw", pa.binary()),
        pa.field("flag", pa.bool_()),
    ]
)
ADDED = [pa.field("note", pa.string()), pa.field("score", pa.float32())]
PROPERTIES = {
    "checkpoint_interval": "4",
    "blocklet_max_rows": "3",
    "user.golden": f"v{LOG_FORMAT_VERSION}",
}
APP = "golden-app"
PARTITION_BY = ["bucket(2, id)"]
"""Format 5 on: the golden table is partitioned (and published into, with a state)."""
STATE = pa.table({"node": ["a", "b"], "depends_on": ["b", None], "fingerprint": [1, 2]})
_EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def rows_for(ids: range, *, extra: bool = False) -> pa.Table:
    """Deterministic rows for ``ids``: nulls, NaN, infinities and empty values included."""
    ratios = [math.nan, math.inf, -math.inf, -0.0, 0.1]
    columns: dict[str, Any] = {
        "id": list(ids),
        "name": [None if i % 4 == 3 else f"név-{i}" for i in ids],
        "amount": [None if i % 5 == 4 else Decimal(i * 137 - 500).scaleb(-2) for i in ids],
        "ratio": [ratios[i % 5] if i % 3 == 0 else i / 8 for i in ids],
        "happened": pa.array([_EPOCH_US + i * 3_600_000_123 for i in ids], pa.int64()),
        "day": pa.array([20_454 + i for i in ids], pa.int32()),
        "tags": [None if i % 6 == 5 else [f"t{j}" for j in range(i % 3)] for i in ids],
        "point": [
            None if i % 7 == 6 else {"x": i - 3, "y": None if i % 2 else f"y{i}"} for i in ids
        ],
        "raw": [bytes([i % 256, 0, 255]) if i % 3 else b"" for i in ids],
        "flag": [None if i % 5 == 0 else i % 2 == 0 for i in ids],
    }
    columns["happened"] = columns["happened"].view(SCHEMA.field("happened").type)
    columns["day"] = columns["day"].view(pa.date32())
    table = pa.table(columns, schema=SCHEMA)
    if extra:
        table = table.append_column(ADDED[0], pa.array([f"note {i}" for i in ids], pa.string()))
        table = table.append_column(
            ADDED[1], pa.array([None if i % 2 else i * 0.5 for i in ids], pa.float32())
        )
    return table


def build(path: Path) -> None:
    """The golden table's history, one commit per step (versions 0..13)."""
    import carbonlite as cl

    t = cl.create_table(
        path,
        SCHEMA,
        sort_columns=["id"],
        properties=PROPERTIES,
        writer_id="golden",
        **({"partition_by": PARTITION_BY} if LOG_FORMAT_VERSION >= 5 else {}),
    )
    t.append(rows_for(range(0, 5)))  # 1
    t.append(iter(rows_for(range(5, 10)).to_batches(max_chunksize=2)))  # 2
    t.append(rows_for(range(10, 12)), txn=(APP, 0))  # 3
    t.add_columns(ADDED)  # 4: checkpoint
    t.append(rows_for(range(12, 15), extra=True))  # 5
    t.overwrite(rows_for(range(100, 104), extra=True), txn=(APP, 1))  # 6
    t.append(rows_for(range(104, 106)), schema_mode="merge")  # 7: note and score left out
    t.append(rows_for(range(0, 0), extra=True), txn=(APP, 2))  # 8: batch id only; checkpoint
    t.append(rows_for(range(106, 109), extra=True))  # 9
    import pyarrow.compute as pc

    t.delete(pc.field("id").isin([101, 105]))  # 10: deletion vectors in two segments
    t.update(pc.field("id") == 102, {"name": "updated", "score": pc.field("score") + 1})  # 11
    source = rows_for(range(103, 104), extra=True).set_column(1, "name", pa.array(["merged"]))
    t.merge(source.append_column("x", pa.array([0])).drop_columns(["x"]), on=["id"])  # 12
    t.delete(pc.field("id") == 107)  # 13: after the checkpoint of 12
    if LOG_FORMAT_VERSION < 5:
        return
    published = rows_for(range(200, 206), extra=True)
    t.publish(published)  # 14: both buckets replaced by fresh segments with content hashes
    t.publish(published.take([5, 3, 1, 4, 2, 0]), state={"deps": STATE})  # 15: state only
    bucket = t.partitions()[0].value  # 16: a snapshot publish of one bucket drops the other
    t.publish({bucket[0]: published.filter(_in_bucket(t, bucket))}, mode="snapshot")
    if LOG_FORMAT_VERSION < 6:
        return
    t.rename_column("name", "label")  # 17: column ids; no data rewritten
    t.drop_columns(["raw"])  # 18
    t.widen_column("score", pa.float64())  # 19: same physical name, statistics kept
    t.widen_column("day", pa.timestamp("us"))  # 20: a new physical name
    t.add_columns([pa.field("rank", pa.int64())], defaults={"rank": 1})  # 21
    later = rows_after_changes(range(300, 303))
    t.append(later)  # 22: rank filled with its default
    t.finish_streaming()  # 23
    t.handoff()  # 24: older files written again under the new schema
    if LOG_FORMAT_VERSION < 7:
        return
    t.build_index(["id"])  # 25: bloom filters of every live blocklet; bloom_filter_columns set
    t.append(rows_after_changes(range(400, 406)))  # 26: blocklets written with their filters
    t.finish_streaming()  # 27
    t.handoff()  # 28: the handed-off blocklets get filters too
    t.build_index(["label"])  # 29: a second column: every record written again with both
    t.build_index(["id"], kind="secondary")  # 30: secondary indexes of the columnar files


def rows_after_changes(ids: range) -> pa.Table:
    """:func:`rows_for` (``extra``) in the schema of format 6's changes (versions 17-20):
    ``name`` renamed ``label``, ``raw`` dropped, ``score`` and ``day`` widened."""
    rows = rows_for(ids, extra=True).drop_columns(["raw"])
    rows = rows.rename_columns(["label" if n == "name" else n for n in rows.schema.names])
    for name, t in (("score", pa.float64()), ("day", pa.timestamp("us"))):
        i = rows.schema.get_field_index(name)
        rows = rows.set_column(i, name, rows.column(name).cast(t))
    return rows


def _in_bucket(t: Any, value: tuple[Any, ...]) -> Any:
    from carbonlite.writer.partition_rows import partition_spec

    spec = partition_spec(t.snapshot().metadata)
    table = rows_for(range(200, 206), extra=True)
    (bucket,) = spec.transform(table)
    return pa.array([b == value[0] for b in bucket.to_pylist()])


def jsonable(value: Any) -> Any:
    """A JSON form of a value from ``to_pylist`` that keeps every distinction that matters."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value == 0 and math.copysign(1, value) < 0:
            return "-0.0"
        return value
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"date": value.isoformat()}
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def jsonable_rows(table: pa.Table) -> list[dict[str, Any]]:
    return [jsonable(r) for r in table.to_pylist()]


def jsonable_schema(schema: pa.Schema) -> list[list[Any]]:
    return [[f.name, str(f.type), f.nullable] for f in schema]


def describe_history(t: Any) -> list[dict[str, Any]]:
    """The history of table ``t`` as the expected file holds it (no timestamps)."""
    return [
        {
            "version": h.version,
            "operation": h.operation,
            "data_change": h.data_change,
            "rows": h.rows,
            "rows_removed": h.rows_removed,
            "parameters": dict(h.parameters),
        }
        for h in t.history()
    ]


def describe_segments(t: Any) -> list[dict[str, Any]]:
    """The segments of table ``t`` as the expected file holds them (no times, no sizes)."""
    return [
        {
            "id": s.id,
            "status": s.status,
            "format": s.format,
            "rows": s.rows,
            "files": s.files,
            "blocklets": s.blocklets,
            "created_version": s.created_version,
            **({"partition": s.partition} if s.partition is not None else {}),
        }
        for s in t.segments()
    ]


def describe_partitions(t: Any) -> list[dict[str, Any]]:
    return [
        {"name": p.name, "rows": p.rows, "files": p.files, "content_hash": p.content_hash}
        for p in t.partitions()
    ]


def describe(path: Path) -> dict[str, Any]:
    """Everything the golden test checks, read back through the public API."""
    import carbonlite as cl

    t = cl.open_table(path)
    versions = {}
    for version in range(t.version + 1):
        data = t.to_arrow(version=version)
        versions[str(version)] = {
            "schema": jsonable_schema(data.schema),
            "rows": jsonable_rows(data),
            "count": t.count_rows(version=version),
        }
    history = describe_history(t)
    segments = describe_segments(t)
    log = path / "_carbonlite" / "log"
    return {
        "latest_version": t.version,
        "sort_columns": list(t.sort_columns),
        "properties": t.properties,
        "txns": {APP: t.transaction_version(APP)},
        "checkpoints": sorted(int(p.name[:20]) for p in log.glob("*.checkpoint.json")),
        "versions": versions,
        "history": history,
        "segments": segments,
        **(
            {
                "partition_by": list(t.partition_by),
                "partitions": describe_partitions(t),
                "states": {n: jsonable_rows(t.state(n)) for n in sorted(t.snapshot().states)},
            }
            if t.partition_by
            else {}
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="replace an existing golden table")
    args = parser.parse_args(argv)
    if GOLDEN.exists() and not args.force:
        print(f"{GOLDEN} exists; pass --force to replace it", file=sys.stderr)
        return 1
    shutil.rmtree(GOLDEN, ignore_errors=True)
    build(GOLDEN)
    EXPECTED.write_text(json.dumps(describe(GOLDEN), indent=1, ensure_ascii=True) + "\n")
    size = sum(p.stat().st_size for p in GOLDEN.rglob("*") if p.is_file())
    print(f"wrote {GOLDEN} ({size} bytes) and {EXPECTED.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
