"""Streaming blocklets are written with the table's ``stream_codec`` (LZ4 by default), and
handoff rewrites them with zstd: the rows read back the same at every step, on local disk and
on S3."""

from __future__ import annotations

import pytest

import carbonlite as cl
from carbonlite.driver import commit_parts, plan_write
from carbonlite.errors import InvalidOptionError
from carbonlite.format import BlockletFileReader
from carbonlite.format.layout import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD
from carbonlite.writer.distributed import write_part
from tests.support.places import Place
from tests.support.tables import events


def _codecs(table: cl.Table) -> set[int]:
    """The codecs of every page of the live segments."""
    snap = table.refresh().snapshot()
    found: set[int] = set()
    for seg in snap.live_segments():
        for path, f in seg.files.items():
            uri = table.storage.uri(table.storage.join(table.root, path))
            with BlockletFileReader(
                uri, end=f.committed_length, storage_options=table.storage_options
            ) as reader:
                for blocklet in reader.blocklets():
                    assert blocklet.pages is not None
                    found.update(p.codec for p in blocklet.pages)
    return found


def _sorted_ids(table: cl.Table) -> list[int]:
    return sorted(table.refresh().to_arrow().column("id").to_pylist())


def test_streaming_pages_are_lz4_and_handoff_rewrites_them_with_zstd(place: Place) -> None:
    # handoff writing blocklet files (a Parquet table's are Parquet: tests/format)
    t = place.create("t", properties={"blocklet_max_rows": "500", "columnar_format": "carbonlite"})
    t.append(events(0, 2000))
    t.append(events(2000, 1000))
    assert _codecs(t) == {CODEC_LZ4}
    assert _sorted_ids(t) == list(range(3000))
    t.finish_streaming()
    t.handoff()
    assert _codecs(t) == {CODEC_ZSTD}
    assert _sorted_ids(t) == list(range(3000))


@pytest.mark.parametrize(("codec", "number"), [("zstd", CODEC_ZSTD), ("none", CODEC_NONE)])
def test_stream_codec_property(tmp_path: object, codec: str, number: int) -> None:
    place = Place("local", str(tmp_path), None)
    t = place.create("t", properties={"stream_codec": codec.upper()})
    t.append(events(0, 1000))
    assert _codecs(t) == {number}
    t.set_properties({"stream_codec": "lz4"})  # later appends follow the property
    t.append(events(1000, 1000))
    assert _codecs(t) == {number, CODEC_LZ4}
    assert _sorted_ids(t) == list(range(2000))


def test_a_distributed_write_follows_the_property(place: Place) -> None:
    t = place.create("t", properties={"stream_codec": "zstd"})
    plan = plan_write(t, overwrite=False)
    assert plan.codec == "zstd"
    parts = [write_part(plan, events(0, 800).to_batches(), tag="x", partition=0, attempt=0)]
    commit_parts(plan, parts, txn=None, operation="WRITE", parameters={}, writer_id="d")
    assert _codecs(t) == {CODEC_ZSTD}
    assert _sorted_ids(t) == list(range(800))


def test_an_unknown_codec_is_refused(tmp_path: object) -> None:
    place = Place("local", str(tmp_path), None)
    with pytest.raises(InvalidOptionError, match="zstd, lz4, none"):
        place.create("t", properties={"stream_codec": "snappy"})
    t = place.create("u")
    with pytest.raises(InvalidOptionError, match="stream_codec"):
        t.set_properties({"stream_codec": "gzip"})
    assert t.effective_properties["stream_codec"] == "lz4"


def test_a_file_may_mix_codecs(tmp_path: object) -> None:
    """Blocklets of one file written under different codecs read back as one file."""
    from carbonlite.format import BlockletFileWriter

    path = str(tmp_path / "f.cblt")
    rows = events(0, 900)
    for i, codec in enumerate(("lz4", "zstd", "none")):
        w = BlockletFileWriter(path, rows.schema, codec=codec)  # type: ignore[arg-type]
        w.write(rows.slice(300 * i, 300))
        w.close()
    with BlockletFileReader(path) as reader:
        got = reader.read_all()
        assert {p.codec for b in reader.blocklets() for p in b.pages or ()} == {
            CODEC_LZ4,
            CODEC_ZSTD,
            CODEC_NONE,
        }
    assert got.to_pandas().equals(rows.to_pandas())  # NaN scores compare equal here
