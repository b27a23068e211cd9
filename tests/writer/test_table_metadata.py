"""Properties set and unset, effective properties, and Table as a context manager."""

from __future__ import annotations

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.metadata import commit
from carbonlite.properties import PROPERTIES
from carbonlite.writer.table_metadata import with_properties


@pytest.fixture
def table(tmp_path):
    return cl.create_table(
        str(tmp_path / "t"), pa.schema([("id", pa.int64())]), properties={"user.owner": "ana"}
    )


def test_set_and_unset_properties(table):
    result = table.set_properties({"checkpoint_interval": "5", "user.team": "data"})
    assert result.version == 1
    assert table.properties == {
        "columnar_format": "parquet",  # every new table's, unless told
        "user.owner": "ana",
        "checkpoint_interval": "5",
        "user.team": "data",
    }
    other = cl.open_table(table.path)  # committed, not only cached
    assert other.properties == table.properties
    for n in range(5):  # the new interval is in force: a checkpoint at version 5
        table.append(pa.table({"id": [n]}))
    assert 5 in table.log.listing().checkpoints
    assert table.set_properties({"checkpoint_interval": "5"}).version is None  # no change
    result = table.unset_properties(["checkpoint_interval", "user.owner"])
    assert result.version == table.version
    assert table.properties == {"columnar_format": "parquet", "user.team": "data"}
    assert (
        table.effective_properties["checkpoint_interval"]
        == PROPERTIES["checkpoint_interval"].default
    )
    record = table.history(1)[0]
    assert (record.operation, record.data_change) == ("UNSET PROPERTIES", False)
    assert record.parameters == {"keys": "checkpoint_interval,user.owner"}
    assert table.count_rows() == 5


def test_bad_properties_are_refused_and_nothing_committed(table):
    with pytest.raises(cl.InvalidOptionError, match=r"checkpoint_intervall.*did you mean"):
        table.set_properties({"checkpoint_intervall": "5"})
    with pytest.raises(cl.InvalidOptionError, match="checkpoint_interval='0'"):
        table.set_properties({"checkpoint_interval": "0"})
    with pytest.raises(cl.InvalidOptionError, match="values must be strings"):
        table.set_properties({"checkpoint_interval": 5})
    with pytest.raises(cl.InvalidOptionError, match="non-empty mapping"):
        table.set_properties({})
    with pytest.raises(cl.InvalidOptionError, match="not set"):
        table.unset_properties(["auto_compaction"])
    with pytest.raises(cl.InvalidOptionError, match="not table properties"):
        table.unset_properties(["nonsense"])
    assert table.unset_properties(["auto_compaction"], missing_ok=True).version is None
    assert table.refresh().version == 0


def test_effective_properties_list_every_default(table):
    table.set_properties({"compression_level": "3"})
    effective = table.effective_properties
    assert list(effective)[: len(PROPERTIES)] == list(PROPERTIES)
    assert effective["compression_level"] == "3"
    assert effective["blocklet_max_rows"] == PROPERTIES["blocklet_max_rows"].default
    assert effective["user.owner"] == "ana"


def test_concurrent_property_changes_never_drop_one(table):
    other = cl.open_table(table.path)
    table.set_properties({"user.a": "1"})
    other.set_properties({"user.b": "2"})  # starts from the newest state
    assert cl.open_table(table.path).properties == {
        "columnar_format": "parquet",
        "user.owner": "ana",
        "user.a": "1",
        "user.b": "2",
    }
    # a change planned on a state another change replaced conflicts instead of undoing it
    stale = table.snapshot()
    other.set_properties({"user.c": "3"})
    with pytest.raises(cl.CommitConflictError, match="schema or properties"):
        commit(table.log, stale, with_properties(stale, {"user.d": "4"}))
    assert "user.c" in cl.open_table(table.path).properties


def test_table_is_a_context_manager(tmp_path):
    path = str(tmp_path / "t")
    with cl.create_table(path, pa.schema([("id", pa.int64())])) as t:
        t.append(pa.table({"id": [1, 2]}))
    assert "closed" in repr(t)
    for use in (t.to_arrow, t.refresh, lambda: t.append(pa.table({"id": [3]})), t.history):
        with pytest.raises(cl.InvalidOptionError, match="was closed"):
            use()
    t.close()  # twice is fine
    with cl.open_table(path) as again:
        assert again.count_rows() == 2
