"""The Iceberg view (docs/ICEBERG.md), read by readers no one here wrote: pyiceberg's
``StaticTable`` and Polars' ``scan_iceberg`` each read the latest Iceberg metadata of a table
and must give CarbonLite's own read of that version, column by column, after every kind of
change; a process SIGKILLed between a commit and its Iceberg metadata is caught up by the next
commit and by ``sync_iceberg``; types Iceberg cannot hold are refused.

Each case hands every streaming row off before comparing: the streaming tail is not Parquet
and not in the view (docs/ICEBERG.md says how far the view lags)."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import StaticTable

import carbonlite as cl
from carbonlite.format.field_ids import field_id
from carbonlite.iceberg import IcebergTypeError, export, read_state
from carbonlite.metadata.columns import column_ids

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("n", pa.int32()),
        ("score", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("tags", pa.list_(pa.string())),
        ("point", pa.struct([("x", pa.int32()), ("y", pa.float64())])),
    ]
)
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def rows(first: int, n: int, schema: pa.Schema = SCHEMA) -> pa.Table:
    values = {
        "id": lambda i: i,
        "name": lambda i: f"name-{i}" if i % 7 else None,
        "n": lambda i: i % 1000,
        "label": lambda i: f"name-{i}" if i % 7 else None,
        "score": lambda i: i / 8,
        "ts": lambda i: T0 + dt.timedelta(seconds=i),
        "tags": lambda i: [f"t{i % 3}", "x"][: i % 3],
        "point": lambda i: {"x": i, "y": i / 2},
        "extra": lambda i: None,
    }
    return pa.Table.from_pylist(
        [{f.name: values[f.name](i) for f in schema} for i in range(first, first + n)],
        schema=schema,
    )


def new_table(path: Path, version: str = "v2", **kwargs: Any) -> cl.Table:
    props = {"iceberg": version, "handoff_blocklet_rows": "500", **kwargs.pop("properties", {})}
    return cl.create_table(path, SCHEMA, properties=props, **kwargs)


def handed_off(t: cl.Table) -> cl.Table:
    t.finish_streaming()
    t.handoff()
    return t


def latest_metadata(t: cl.Table) -> str:
    metadata = t.iceberg_metadata()
    assert metadata is not None, "no Iceberg metadata"
    return metadata


def canonical(table: pa.Table) -> list[dict[str, Any]]:
    out = []
    for row in table.to_pylist():
        out.append(
            {
                k: (v.astimezone(dt.timezone.utc) if isinstance(v, dt.datetime) else v)
                for k, v in row.items()
            }
        )
    return sorted(out, key=lambda r: r["id"])


def assert_readers_agree(t: cl.Table) -> None:
    """pyiceberg and Polars read the latest Iceberg metadata as CarbonLite reads the table
    (every row handed off), column by column."""
    t = t.refresh()
    found = read_state(t.storage, t.root)
    assert found is not None and found[0].carbonlite_version <= t.version
    ours = t.to_arrow()
    metadata = latest_metadata(t)
    iceberg = StaticTable.from_metadata(metadata)
    got = iceberg.scan().to_arrow()
    assert got.schema.names == ours.schema.names
    assert canonical(got) == canonical(ours)
    # the ids pyiceberg gives the columns are CarbonLite's column ids
    ids = dict(zip(t.schema.names, column_ids(t.snapshot().metadata), strict=True))
    assert {f.name: f.field_id for f in iceberg.schema().fields} == ids
    frame = pl.scan_iceberg(metadata).collect()
    assert frame.columns == ours.schema.names
    polars_rows = canonical(frame.to_arrow())
    for name in ours.schema.names:  # column by column
        assert [r[name] for r in polars_rows] == [r[name] for r in canonical(ours)], name


def test_appends_and_handoff(tmp_path: Path) -> None:
    t = new_table(tmp_path / "t")
    t.append(rows(0, 1200))
    t.append(rows(1200, 300))
    empty = StaticTable.from_metadata(latest_metadata(t)).scan().to_arrow()
    assert empty.num_rows == 0  # streaming rows only: no Parquet yet, an empty view
    handed_off(t)
    assert_readers_agree(t)
    # the Parquet files carry the same ids
    state, doc = read_state(t.storage, t.root)  # type: ignore[misc]
    assert doc["snapshots"][-1]["summary"]["carbonlite.version"] == str(t.version)
    for seg in t.snapshot().segments.values():
        for f in seg.files.values():
            if f.path.endswith(".parquet"):
                schema = pq.read_schema(os.path.join(t.root, f.path))
                assert [field_id(x) for x in schema] == list(column_ids(t.snapshot().metadata))
    t.append(rows(1500, 10))  # a streaming append leaves the view as it is
    assert read_state(t.storage, t.root)[0].metadata_version == state.metadata_version  # type: ignore[index]


def test_deletes_updates_and_merges(tmp_path: Path) -> None:
    t = _filled(tmp_path)
    t.delete(pc.field("id").isin(list(range(0, 2000, 5))))
    assert_readers_agree(t)
    t.update(pc.field("id") < 30, {"score": pc.scalar(-1.0)})
    handed_off(t)
    assert_readers_agree(t)
    source = rows(1990, 20).set_column(3, "score", pa.array([99.0] * 20))
    t.merge(source, on=["id"], when_matched="update", when_not_matched="insert")
    handed_off(t)
    assert_readers_agree(t)


def _filled(tmp_path: Path, version: str = "v2") -> cl.Table:
    t = new_table(tmp_path / "t", version)
    t.append(rows(0, 2000))
    return handed_off(t)


SCHEMA_CHANGES: dict[str, Callable[[cl.Table], Any]] = {
    "rename": lambda t: t.rename_column("name", "label"),
    "drop": lambda t: t.drop_columns(["n"]),
    "widen": lambda t: t.widen_column("n", pa.int64()),
    "add": lambda t: t.add_columns([pa.field("extra", pa.string())]),
}


@pytest.mark.parametrize("change", sorted(SCHEMA_CHANGES))
def test_schema_changes_keep_values_in_their_columns(tmp_path: Path, change: str) -> None:
    t = _filled(tmp_path)
    t.delete(pc.field("id").isin([1, 2, 3]))
    SCHEMA_CHANGES[change](t)
    assert_readers_agree(t)  # old files under the new schema
    t.append(rows(2000, 600, t.schema))
    handed_off(t)
    assert_readers_agree(t)  # old and new files
    t.compact("major")
    assert_readers_agree(t)


def test_partitions_compaction_restore_and_clean(tmp_path: Path) -> None:
    t = new_table(tmp_path / "t", partition_by=["day(ts)"])
    t.append(rows(0, 1000))
    t.append(rows(100_000, 1000))  # another day
    handed_off(t)
    assert_readers_agree(t)
    version = t.version
    t.delete(pc.field("id") < 100)
    t.compact("major")
    assert_readers_agree(t)
    t.restore(version)
    assert_readers_agree(t)
    t.clean(retention=0, force=True)
    assert_readers_agree(t)


def test_time_travel_by_iceberg_snapshot(tmp_path: Path) -> None:
    """Every Iceberg snapshot kept reads as CarbonLite reads the version it names."""
    t = _filled(tmp_path)
    t.delete(pc.field("id") < 50)
    t.append(rows(2000, 500))
    handed_off(t)
    _, doc = read_state(t.storage, t.root)  # type: ignore[misc]
    table = StaticTable.from_metadata(latest_metadata(t))
    assert len(doc["snapshots"]) >= 3
    compared = 0
    for snap in doc["snapshots"]:
        version = int(snap["summary"]["carbonlite.version"])
        live = [s for s in t.snapshot(version).segments.values() if s.status != "COMPACTED"]
        if any(s.format == "STREAMING" and s.num_rows for s in live):
            continue  # streaming rows at that version: not in the view
        got = table.scan(snapshot_id=snap["snapshot-id"]).to_arrow()
        ours = t.to_arrow(version=version)
        assert canonical(got) == canonical(ours), version
        compared += 1
    assert compared >= 3


def test_types_iceberg_cannot_hold_are_refused(tmp_path: Path) -> None:
    unsigned = pa.schema([("id", pa.int64()), ("u", pa.uint32())])
    with pytest.raises(IcebergTypeError, match=r"'u'.*unsigned"):
        cl.create_table(tmp_path / "a", unsigned, properties={"iceberg": "v2"})
    t = cl.create_table(tmp_path / "b", unsigned)
    with pytest.raises(IcebergTypeError, match="'u'"):
        t.set_properties({"iceberg": "v2"})
    blocklets = cl.create_table(
        tmp_path / "c", SCHEMA, properties={"columnar_format": "carbonlite"}
    )
    with pytest.raises(IcebergTypeError, match="columnar_format=parquet"):
        blocklets.set_properties({"iceberg": "v2"})
    with pytest.raises(cl.InvalidOptionError, match="off, v2 or v3"):
        cl.create_table(tmp_path / "d", SCHEMA, properties={"iceberg": "v4"})
    nanos = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("ns"))])
    with pytest.raises(IcebergTypeError, match="nanoseconds with iceberg=v3"):
        cl.create_table(tmp_path / "f", nanos, properties={"iceberg": "v2"})
    plain = cl.create_table(tmp_path / "e", SCHEMA)
    with pytest.raises(cl.InvalidOptionError, match="iceberg=v2"):
        plain.sync_iceberg()
    assert not os.path.exists(tmp_path / "a")


_KILLED_COMMIT = """
import os, signal, sys
import carbonlite as cl
from carbonlite.metadata import post_commit
from carbonlite.seams import listening
post_commit.default_mode = "inline"
t = cl.open_table(sys.argv[1])
def listener(name):
    if name == "commit.before_iceberg":
        os.kill(os.getpid(), signal.SIGKILL)
with listening(listener):
    t.handoff()
"""


def test_a_process_killed_before_its_iceberg_metadata_is_caught_up(tmp_path: Path) -> None:
    t = _filled(tmp_path)
    before = read_state(t.storage, t.root)[0]  # type: ignore[index]
    t.append(rows(2000, 700))
    t.finish_streaming()
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_COMMIT, str(t.root)],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    t = t.refresh()
    after = read_state(t.storage, t.root)[0]  # type: ignore[index]
    assert after.carbonlite_version == before.carbonlite_version < t.version  # committed, not shown
    state = t.sync_iceberg()
    assert state is not None and state.carbonlite_version == t.version
    assert_readers_agree(t)
    assert t.sync_iceberg() is None  # up to date
    # and a second kill, caught up by the next commit instead
    t.append(rows(3000, 700))
    t.finish_streaming()
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_COMMIT, str(t.root)],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL
    t = t.refresh()
    t.delete(pc.field("id") == 3001)
    assert read_state(t.storage, t.root)[0].carbonlite_version == t.version  # type: ignore[index]
    assert_readers_agree(t)
    assert (
        json.loads((Path(t.root) / "metadata" / "version-hint.text").read_text() or "0")
        == read_state(t.storage, t.root)[0].metadata_version
    )  # type: ignore[index]


def test_schema_changes_iceberg_cannot_follow_are_refused(tmp_path: Path) -> None:
    """With ``iceberg`` on, a change the view could not show is refused and nothing is
    committed: a column added with a default (files before it read null in Iceberg v2), a
    date widened to a timestamp (no Iceberg promotion), a new unsigned column."""
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32())])
    t = cl.create_table(tmp_path / "t", schema, properties={"iceberg": "v2"})
    version = t.version
    with pytest.raises(IcebergTypeError, match="'extra' has the default 5"):
        t.add_columns([pa.field("extra", pa.int64())], defaults={"extra": 5})
    with pytest.raises(IcebergTypeError, match="'day' was widened from date"):
        t.widen_column("day", pa.timestamp("us"))
    with pytest.raises(IcebergTypeError, match=r"'u'.*unsigned"):
        t.add_columns([pa.field("u", pa.uint8())])
    assert t.refresh().version == version
    t.add_columns([pa.field("extra", pa.int64())])  # without a default: null before, as in Iceberg
    assert t.refresh().version == version + 1


def test_inspect_shows_the_iceberg_state_and_its_lag(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from carbonlite.cli import app

    t = _filled(tmp_path)

    def state() -> dict[str, Any]:
        run = CliRunner().invoke(app, ["inspect", str(t.root), "--json"])
        assert run.exit_code == 0, run.output
        return json.loads(run.stdout)["iceberg"]

    assert state()["exported_version"] == t.version and state()["versions_behind"] == 0
    t.append(rows(5000, 10))  # streaming rows: not in the view, and no new metadata
    assert (state()["exported_version"], state()["versions_behind"]) == (t.version - 1, 1)
    run = CliRunner().invoke(app, ["inspect", str(t.root)])
    assert "Iceberg: v2;" in run.stdout and "(1 version(s) since)" in run.stdout
    plain = cl.create_table(tmp_path / "plain", SCHEMA)
    assert "iceberg" not in json.loads(
        CliRunner().invoke(app, ["inspect", str(plain.root), "--json"]).stdout
    )


def test_clean_keeps_every_file_a_kept_iceberg_snapshot_reads(tmp_path: Path) -> None:
    """A forced clean at retention 0 deletes no data file an Iceberg snapshot still kept
    reads (time travel by snapshot keeps working); once those snapshots expire with the
    table's retention, the files go."""
    t = new_table(tmp_path / "t")
    for first in (0, 1000):
        t.append(rows(first, 1000))
        handed_off(t)
    _, doc = read_state(t.storage, t.root)  # type: ignore[misc]
    before = doc["snapshots"][-1]
    old_files = [
        f.path
        for s in t.snapshot().segments.values()
        if s.status == "SUCCESS"
        for f in s.files.values()
    ]
    t.compact("major")
    t.clean(retention=0, force=True)
    assert all((Path(t.root) / f).exists() for f in old_files)
    table = StaticTable.from_metadata(latest_metadata(t))
    got = table.scan(snapshot_id=before["snapshot-id"]).to_arrow()
    assert canonical(got) == canonical(
        t.to_arrow(version=int(before["summary"]["carbonlite.version"]))
    )
    # the snapshots expire with the retention: the next export keeps only itself
    t.set_properties({"deleted_data_retention": "0s"})
    t.delete(pc.field("id") == 5)
    assert len(read_state(t.storage, t.root)[1]["snapshots"]) == 1  # type: ignore[index]
    t.clean(retention=0, force=True)
    assert not any((Path(t.root) / f).exists() for f in old_files)
    assert_readers_agree(t)


def test_a_forced_clean_keeps_what_a_late_export_would_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the view lags (post-commit steps that failed, or a process running late), a
    forced clean keeps the files of a segment retired after the newest exported version: an
    export of a version before its retirement may still come, and names them. Once a later
    version is exported, that export writes nothing, and the files go with the retention."""
    t = new_table(tmp_path / "t")
    t.append(rows(0, 1000))
    handed_off(t)
    monkeypatch.setattr(export, "export_version", lambda *args: None)  # the view lags
    t.append(rows(1000, 1000))
    handed_off(t)
    late = t.version
    lagging = [
        f.path
        for s in t.snapshot().segments.values()
        if s.status == "SUCCESS" and s.created_version == late
        for f in s.files.values()
    ]
    assert lagging
    t.compact("major")
    t.clean(retention=0, force=True)
    assert all((Path(t.root) / f).exists() for f in lagging)
    monkeypatch.undo()
    state = export.export_version(t.storage, t.root, t.snapshot(late))  # the late export
    assert state is not None and state.carbonlite_version == late
    table = StaticTable.from_metadata(latest_metadata(t))
    assert canonical(table.scan().to_arrow()) == canonical(t.to_arrow(version=late))
    t.set_properties({"deleted_data_retention": "0s"})  # exports the newest version
    assert len(read_state(t.storage, t.root)[1]["snapshots"]) == 1  # type: ignore[index]
    t.clean(retention=0, force=True)
    assert not any((Path(t.root) / f).exists() for f in lagging)
    assert export.export_version(t.storage, t.root, t.snapshot(late)) is None
    assert_readers_agree(t)


@pytest.mark.parametrize(
    "partition_by",
    [
        ["n"],
        pytest.param(["name"], marks=pytest.mark.slow),  # 600 partitions, 19 s: slow tier
        ["day(ts)"],
        ["month(ts)"],
        ["year(ts)"],
        ["hour(ts)"],
        ["bucket(4, id)", "n"],
    ],
)
def test_partitions_are_iceberg_partitions(tmp_path: Path, partition_by: list[str]) -> None:
    """Identity and time fields become Iceberg partition fields (bucket, another hash than
    Iceberg's, is left out): the readers agree, and pyiceberg plans only the files of the
    partition a filter names."""
    t = new_table(tmp_path / "t", partition_by=partition_by)
    t.append(rows(0, 300).set_column(2, "n", pa.array([i % 3 for i in range(300)], pa.int32())))
    far = 40_000_000  # seconds: another year, month, day and hour
    t.append(rows(far, 300).set_column(2, "n", pa.array([7] * 300, pa.int32())))
    handed_off(t)
    assert_readers_agree(t)
    table = StaticTable.from_metadata(latest_metadata(t))
    spec = table.spec()
    kept = [p for p in partition_by if not p.startswith("bucket")]
    assert [
        f.transform.__class__.__name__.lower().removesuffix("transform") for f in spec.fields
    ] == ["identity" if "(" not in p else p.split("(")[0] for p in kept]
    files = list(table.scan().plan_files())
    source = {
        "n": "n == 7",
        "name": "name == 'name-40000003'",
    }.get(kept[0], f"ts >= '{(T0 + dt.timedelta(seconds=far)).isoformat()}'")
    planned = list(table.scan(row_filter=source).plan_files())
    assert 0 < len(planned) < len(files), (len(planned), len(files))


def test_the_view_on_s3(s3_server: Any) -> None:
    """On S3 (the moto server) the metadata is written by conditional puts, and pyiceberg
    reads it from S3 as CarbonLite reads the table."""
    options = s3_server.storage_options
    uri = f"s3://{s3_server.new_bucket()}/t"
    t = cl.create_table(
        uri,
        SCHEMA,
        properties={"iceberg": "v2", "handoff_blocklet_rows": "500"},
        storage_options=options,
    )
    t.append(rows(0, 1500))
    handed_off(t)
    t.delete(pc.field("id") < 100)
    metadata = t.iceberg_metadata()
    assert metadata is not None and metadata.startswith("s3://")
    table = StaticTable.from_metadata(
        metadata,
        properties={
            "s3.endpoint": options["endpoint_url"],
            "s3.access-key-id": options["key"],
            "s3.secret-access-key": options["secret"],
            "s3.region": "us-east-1",
        },
    )
    assert canonical(table.scan().to_arrow()) == canonical(t.to_arrow())
    assert t.sync_iceberg() is None  # up to date


def test_a_lost_race_for_a_metadata_document_reads_again(tmp_path: Path, monkeypatch: Any) -> None:
    """Two writers export at once: the one whose ``v<N>.metadata.json`` the other created
    first reads the metadata again and exports on it, never failing for the race."""

    t = _filled(tmp_path)
    stale = read_state(t.storage, t.root)
    t.delete(pc.field("id") == 1)  # the other writer: exports the newer version first
    t.append(rows(5000, 100))
    handed_off(t)
    real, calls = export.read_state, []

    def read_once_stale(storage: Any, root: str) -> Any:
        calls.append(root)
        return stale if len(calls) == 1 else real(storage, root)

    monkeypatch.setattr(export, "read_state", read_once_stale)
    # this writer read the state before the other's export: its document's name is taken
    assert export.export_version(t.storage, t.root, t.snapshot(t.version - 2)) is None
    assert len(calls) == 2
    assert_readers_agree(t)


def test_clean_forgets_the_view_of_a_table_no_longer_publishing(tmp_path: Path) -> None:
    t = new_table(tmp_path / "t")
    for first in (0, 1000):
        t.append(rows(first, 1000))
        handed_off(t)
    old = [
        f.path
        for s in t.snapshot().segments.values()
        if s.status == "SUCCESS"
        for f in s.files.values()
    ]
    t.compact("major")
    t.set_properties({"iceberg": "off"})
    t.clean(retention=0, force=True)
    assert not any((Path(t.root) / f).exists() for f in old)  # the frozen view keeps nothing


def test_a_renamed_partition_column_keeps_its_partition_fields(tmp_path: Path) -> None:
    """Renaming the source column of an identity and a time partition field keeps the
    fields' ids and source ids; their names follow the column (as the CarbonLite spec's do),
    the files handed off before and after the rename are one spec's, the readers agree, and
    pyiceberg prunes by the new name."""
    t = new_table(tmp_path / "t", partition_by=["n", "day(ts)"])
    t.append(rows(0, 50).set_column(2, "n", pa.array([i % 3 for i in range(50)], pa.int32())))
    handed_off(t)
    before = json.loads(Path(latest_metadata(t)).read_text())["partition-specs"]
    t.rename_column("n", "m")
    t.rename_column("ts", "when")
    later = rows(100, 20).rename_columns(["id", "name", "m", "score", "when", "tags", "point"])
    t.append(later.set_column(2, "m", pa.array([5] * 20, pa.int32())))
    handed_off(t)
    assert_readers_agree(t)
    doc = json.loads(Path(latest_metadata(t)).read_text())
    [spec] = doc["partition-specs"]
    assert [(f["field-id"], f["source-id"]) for f in spec["fields"]] == [
        (f["field-id"], f["source-id"]) for f in before[0]["fields"]
    ]
    assert [f["name"] for f in spec["fields"]] == ["m", "when_day"]
    table = StaticTable.from_metadata(latest_metadata(t))
    assert len(list(table.scan(row_filter="m == 5").plan_files())) == 1
    assert len(list(table.scan().plan_files())) > 1
