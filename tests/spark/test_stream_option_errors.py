"""Bad streaming options fail at ``load()``/``start()``, as one CarbonLiteError naming the
option, before any query starts (carbonlite/spark/patches.py checks the options recorded with
``option``/``options``); without the check they failed the query seconds later, at
``awaitTermination()``."""

from __future__ import annotations

import os
from typing import Any

import pytest

from carbonlite import create_table
from carbonlite.errors import CarbonLiteError, InvalidOptionError, VersionNotFoundError
from tests.support.spark_data import SOURCE_SCHEMA, source_rows

pytestmark = pytest.mark.spark


@pytest.fixture
def table(tmp_path: Any) -> str:
    path = str(tmp_path / "t")
    create_table(path, SOURCE_SCHEMA).append(source_rows(0, 5))  # versions 0 and 1
    return path


@pytest.mark.parametrize(
    ("options", "error", "names"),
    [
        ({"maxRowsPerTrigger": -1}, InvalidOptionError, "maxRowsPerTrigger"),
        ({"maxRowsPerTrigger": "abc"}, InvalidOptionError, "maxRowsPerTrigger"),
        ({"maxBytesPerTrigger": "lots"}, InvalidOptionError, "maxBytesPerTrigger"),
        ({"skipChangeCommits": "maybe"}, InvalidOptionError, "skipChangeCommits"),
        ({"startingVersion": 7}, VersionNotFoundError, "startingVersion=7"),
        ({"startingTimestamp": "2999-01-01"}, CarbonLiteError, "startingTimestamp"),
        ({"maxRowPerTrigger": 5}, InvalidOptionError, "'maxRowsPerTrigger'?"),
    ],
    ids=["negative", "not-a-number", "size", "bool", "future-version", "future-time", "unknown"],
)
def test_bad_read_stream_option_fails_at_load(
    spark: Any, table: str, options: dict[str, Any], error: type, names: str
) -> None:
    (key, value), active = next(iter(options.items())), len(spark.streams.active)
    loads = {
        "option": lambda: spark.readStream.format("carbonlite").option(key, value).load(table),
        "load kwargs": lambda: spark.readStream.load(table, format="carbonlite", **options),
    }
    for how, load in loads.items():
        with pytest.raises(error) as info:
            load()
        message = str(info.value)
        assert names in message and "\n" not in message, f"{how}: {message}"
    assert len(spark.streams.active) == active


def test_bad_write_stream_option_fails_at_start(spark: Any, tmp_path: Any) -> None:
    out = str(tmp_path / "out")
    rate = spark.readStream.format("rate").load().selectExpr("value AS id")
    active = len(spark.streams.active)
    cases = {
        "sortColumn": ({"sortColumn": "id"}, "(did you mean 'sortColumns'?)"),
        "property": ({"property.blocklet_max_rows": "-5"}, "blocklet_max_rows='-5'"),
        "storageOptions": ({"storageOptions": "{oops"}, "storageOptions is not JSON"),
    }
    for name, (options, says) in cases.items():
        writer = rate.writeStream.format("carbonlite").option("checkpointLocation", out + "-ck")
        with pytest.raises(InvalidOptionError) as info:
            writer.options(**options).start(out)
        assert says in str(info.value), f"{name}: {info.value}"
    assert len(spark.streams.active) == active
    assert not os.path.exists(out), "a refused start created the table"
    query = rate.writeStream.format("memory").queryName("unchecked").option("anything", 1).start()
    query.stop()  # other formats' options pass unchecked
