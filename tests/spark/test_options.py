"""Options: every route refuses what it does not take, naming the option, the nearest valid
one and the valid ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import InvalidOptionError
from carbonlite.spark.options import OPTIONS, check_options

pytestmark = pytest.mark.spark


def test_check_options_names_the_option_and_the_nearest_valid_one() -> None:
    check_options(
        {"path": "/t", "txnappid": "a", "txnversion": "1", "storage.region": "x"}, "write"
    )
    with pytest.raises(InvalidOptionError, match=r"'txnversoin' \(did you mean 'txnVersion'\?\)"):
        check_options({"path": "/t", "txnversoin": "1"}, "write")
    with pytest.raises(
        InvalidOptionError, match=r"'timestampasof'.*; it takes path, .*startingTimestamp"
    ):
        check_options({"timestampasof": "2026-01-01"}, "readStream")
    with pytest.raises(InvalidOptionError, match=r"'property\.x'"):
        check_options({"property.x": "1"}, "read")  # table properties are for writes
    for route, names in OPTIONS.items():
        check_options({n.lower(): "1" for n in names}, route)


@pytest.fixture
def table(tmp_path: Path) -> str:
    t = cl.create_table(tmp_path / "t", pa.schema([("i", pa.int64())]))
    t.append(pa.table({"i": [1, 2, 3]}))
    return t.path


def test_every_route_refuses_an_unknown_option(
    spark: Any, table: str, tmp_path: Path, stop_queries: None
) -> None:
    with pytest.raises(Exception, match="did you mean 'versionAsOf'"):
        spark.read.format("carbonlite").option("versionAsof", 1).option("verison", 1).load(
            table
        ).collect()
    with pytest.raises(Exception, match=r"(?i)does not take the option 'maxrowspertrigerr'"):
        (
            spark.readStream.format("carbonlite")
            .option("maxRowsPerTrigerr", 1)
            .load(table)
            .writeStream.format("noop")
            .start()
            .awaitTermination(60)
        )
    df = spark.createDataFrame([(4,)], "i long")
    with pytest.raises(Exception, match="did you mean 'txnVersion'"):
        df.write.format("carbonlite").mode("append").option("txnVersoin", 1).save(table)
    stream = spark.readStream.format("carbonlite").load(table)
    with pytest.raises(Exception, match="did you mean 'sortColumns'"):
        (
            stream.writeStream.format("carbonlite")
            .option("sortColumn", "i")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start(str(tmp_path / "out"))
            .awaitTermination(60)
        )
    assert cl.open_table(table).count_rows() == 3  # nothing written by any of them
