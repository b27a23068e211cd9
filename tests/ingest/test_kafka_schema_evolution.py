"""The Kafka ingester across schema changes (a real broker): a message whose JSON still names
a renamed or dropped column is a bad record naming the change and its version (without a
bad-records table the ingester stops with SchemaMismatchError, committing nothing of the
batch), never a row with the value silently dropped; a change that lands between decoding
and committing refuses the batch and commits nothing; after a widening older values are cast
up; after an added column with a default, messages without its field get the default."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.ingest import KafkaIngester, app_id
from carbonlite.ingest.decode import decode_values
from carbonlite.seams import listening
from tests.support.kafka_broker import KafkaBroker

SCHEMA = pa.schema([("id", pa.int64()), ("b", pa.int32()), ("gone", pa.string())])


def _topic(broker: KafkaBroker, messages: list[dict[str, Any]]) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, 1)
    broker.produce(name, [json.dumps(m).encode() for m in messages], partition=0)
    return name


def _ingester(broker: KafkaBroker, path: Path, name: str, **kw: Any) -> KafkaIngester:
    return KafkaIngester(
        str(path),
        bootstrap_servers=broker.bootstrap,
        topic=name,
        stop_at_end=True,
        max_latency=0.2,
        **kw,
    )


def _by_id(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def test_old_names_are_bad_records_naming_the_change(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA)
    renamed = t.rename_column("b", "c").version
    dropped = t.drop_columns("gone").version
    name = _topic(
        kafka_broker,
        [
            {"id": 0, "c": 0},
            {"id": 1, "b": 1},  # the old name: its value must not vanish
            {"id": 2, "c": 2, "gone": "x"},  # a dropped column
            {"id": 3, "c": 3, "note": 'the text "b": 5 is no field'},
        ],
    )
    bad = tmp_path / "bad"
    result = _ingester(kafka_broker, path, name, bad_records=str(bad)).run()
    assert result.rows == 2
    assert _by_id(t.refresh().to_arrow()) == [{"id": 0, "c": 0}, {"id": 3, "c": 3}]
    errors = {r["offset"]: r["error"] for r in cl.open_table(bad).to_arrow().to_pylist()}
    assert set(errors) == {1, 2}
    assert f"column 'b' was renamed to 'c' at version {renamed}" in errors[1]
    assert f"column 'gone' was dropped at version {dropped}" in errors[2]


def test_without_a_bad_records_table_an_old_name_stops_with_schema_mismatch(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA)
    t.rename_column("b", "c")
    name = _topic(kafka_broker, [{"id": 0, "c": 0}, {"id": 1, "b": 1}])
    with pytest.raises(cl.SchemaMismatchError, match="column 'b' was renamed to 'c' at version 1"):
        _ingester(kafka_broker, path, name).run()
    assert t.refresh().count_rows() == 0 and t.transaction_version(app_id(name, 0)) is None


def test_a_rename_between_decoding_and_committing_commits_nothing(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    path = tmp_path / "t"
    cl.create_table(path, SCHEMA)
    name = _topic(kafka_broker, [{"id": 0, "b": 0}, {"id": 1, "b": 1}])
    other = cl.open_table(path)

    def rename_once(seam: str) -> None:
        if seam == "ingest.before_commit" and "c" not in other.refresh().schema.names:
            other.rename_column("b", "c")

    refused = pytest.raises(cl.SchemaMismatchError, match="'b' was renamed to 'c' at version 1")
    with listening(rename_once), refused:
        _ingester(kafka_broker, path, name).run()
    t = cl.open_table(path)
    assert t.count_rows() == 0 and t.transaction_version(app_id(name, 0)) is None
    # run again, its messages name 'b': bad records now, each naming the rename
    bad = tmp_path / "bad"
    assert _ingester(kafka_broker, path, name, bad_records=str(bad)).run().rows == 0
    assert cl.open_table(bad).count_rows() == 2


def test_a_widened_column_and_a_default(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = cl.create_table(path, SCHEMA)
    t.widen_column("b", pa.int64())
    t.add_columns(pa.field("n", pa.int64()), defaults={"n": 7})
    name = _topic(
        kafka_broker,
        [
            {"id": 0, "b": 2**40},  # fits only the widened type
            {"id": 1, "b": 1, "n": 5},
            {"id": 2, "b": 2, "n": None},  # given as null: null, not the default
            {"id": 3, "b": 3, "gone": 'the text "n": 1 is no field'},
        ],
    )
    assert _ingester(kafka_broker, path, name).run().rows == 4
    assert _by_id(t.refresh().to_arrow()) == [
        {"id": 0, "b": 2**40, "gone": None, "n": 7},
        {"id": 1, "b": 1, "gone": None, "n": 5},
        {"id": 2, "b": 2, "gone": None, "n": None},
        {"id": 3, "b": 3, "gone": 'the text "n": 1 is no field', "n": 7},
    ]


def test_decoding_names_the_change_for_each_value_alone() -> None:
    schema = pa.schema([("id", pa.int64()), ("c", pa.int32())])
    retired = {"b": "column 'b' was renamed to 'c' at version 3"}
    values = [b'{"id": 0, "b": 1}', b'{"id": 1, "c": 1}', b'{"id": 2, "x": {"b": 1}}', None]
    decoded = decode_values(values, schema, "t", retired=retired, defaults={"c": 9})
    assert decoded.good == [1, 2]
    assert decoded.rows.to_pylist() == [{"id": 1, "c": 1}, {"id": 2, "c": 9}]
    assert [i for i, _ in decoded.bad] == [0, 3] and decoded.schema_changes == {0}
    assert "field 'b': column 'b' was renamed to 'c' at version 3" in decoded.bad[0][1]
