"""Torn and damaged files: the reader returns exactly the intact blocklets or raises
CorruptDataError; never wrong rows, never another exception."""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pytest

from carbonlite.errors import CorruptDataError, InvalidOptionError, UnsupportedFormatError
from carbonlite.format import BlockletFileReader, BlockletFileWriter, BlockletMeta
from carbonlite.format.layout import FORMAT_VERSION, crc32c
from tests.format.strategies import rows

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)


def make_batch(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": list(range(start, start + n)),
            "name": [f"name-{i}" if i % 7 else None for i in range(start, start + n)],
            "score": [i * 0.5 if i % 11 else float("nan") for i in range(start, start + n)],
            "tags": [[f"t{i % 3}"] * (i % 4) for i in range(start, start + n)],
            "ts": [1_700_000_000_000_000 + i for i in range(start, start + n)],
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def sample() -> tuple[bytes, list[pa.RecordBatch], list[int]]:
    """A file of four blocklets (the last one small), its batches and blocklet ends."""
    buf = io.BytesIO()
    writer = BlockletFileWriter(buf, SCHEMA)
    batches = [make_batch(0, 300), make_batch(300, 200), make_batch(500, 250), make_batch(750, 20)]
    ends = [writer.write_batch(b).end for b in batches]
    writer.flush()
    return buf.getvalue(), batches, ends


def read_rows(data: bytes, end: int | None = None) -> list[dict]:
    return rows(BlockletFileReader(io.BytesIO(data), end=end).read_all())


def expected_rows(batches: list[pa.RecordBatch], count: int) -> list[dict]:
    return rows(pa.Table.from_batches(batches[:count], schema=SCHEMA))


def test_every_cut_inside_the_last_blocklet(sample) -> None:
    data, batches, ends = sample
    intact = expected_rows(batches, 3)
    for cut in range(ends[2], ends[3]):
        torn = data[:cut]
        reader = BlockletFileReader(io.BytesIO(torn))
        assert reader.valid_length == ends[2], cut
        assert [m.end for m in reader.blocklets()] == ends[:3], cut
        got = reader.read_all()
        # With the committed length the tail is not even looked at.
        committed = BlockletFileReader(io.BytesIO(torn), end=ends[2]).read_all()
        assert got.num_rows == committed.num_rows == 750
        if cut % 16 == 0 or cut in (
            ends[2],
            ends[2] + 1,
            ends[3] - 1,
        ):  # rows are costly to compare
            assert rows(got) == intact, cut
            assert rows(committed) == intact, cut


def test_cut_inside_the_file_header_is_corrupt(sample) -> None:
    data, _, _ = sample
    header_end = BlockletFileReader(io.BytesIO(data)).header_length
    for cut in range(0, header_end):
        with pytest.raises(CorruptDataError) as info:
            BlockletFileReader(io.BytesIO(data[:cut]))
        assert info.value.offset == 0


def test_committed_length_past_the_file_end_is_corrupt(sample) -> None:
    data, _, ends = sample
    with pytest.raises(CorruptDataError, match="committed length"):
        BlockletFileReader(io.BytesIO(data[: ends[3] - 5]), end=ends[3])


def test_committed_length_not_on_a_blocklet_boundary_is_corrupt(sample) -> None:
    data, _, ends = sample
    with pytest.raises(CorruptDataError) as info:
        BlockletFileReader(io.BytesIO(data), end=ends[1] + 10).read_all()
    assert info.value.offset == ends[1]


def test_flipped_bytes_never_give_wrong_rows(sample) -> None:
    data, batches, ends = sample
    header_end = BlockletFileReader(io.BytesIO(data)).header_length
    starts = [header_end, *ends[:-1]]
    full = expected_rows(batches, 4)
    rng = random.Random(20261122)
    positions = rng.sample(range(len(data)), 600) + list(range(0, 40)) + [ends[0], ends[0] + 17]
    for pos in positions:
        damaged = bytearray(data)
        damaged[pos] ^= 1 << rng.randrange(8)
        damaged_blocklet = next(
            (i for i, (s, e) in enumerate(zip(starts, ends, strict=False)) if s <= pos < e), None
        )
        for end in (None, len(data)):
            try:
                got = read_rows(bytes(damaged), end=end)
            except CorruptDataError as exc:
                assert exc.path is not None and exc.offset is not None
                continue
            if got == full:
                continue  # the flip hit padding, which carries no data
            assert end is None, f"flip at {pos}: committed read returned wrong rows"
            assert damaged_blocklet is not None
            assert got == expected_rows(batches, damaged_blocklet), f"flip at {pos}"


def test_damaged_page_inside_committed_range_names_file_and_offset(sample, tmp_path) -> None:
    data, _, ends = sample
    reader = BlockletFileReader(io.BytesIO(data))
    page = reader.blocklets()[1].pages[1]
    damaged = bytearray(data)
    damaged[page.offset + 3] ^= 0xFF
    path = tmp_path / "damaged.cblt"
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptDataError) as info:
        BlockletFileReader(str(path), end=ends[-1]).read_all()
    assert info.value.path == str(path)
    assert info.value.offset == page.offset
    assert "name" in str(info.value) and str(page.offset) in str(info.value)
    # Other columns of the same blocklet remain readable.
    assert BlockletFileReader(str(path), end=ends[-1]).read_all(columns=["id"]).num_rows == 770


def test_writer_reopens_torn_file_and_truncates_the_tail(sample, tmp_path) -> None:
    data, batches, ends = sample
    path = tmp_path / "torn.cblt"
    path.write_bytes(data[: ends[3] - 9])
    with BlockletFileWriter(str(path)) as writer:  # schema comes from the file
        assert writer.length == ends[2]
        writer.write_batch(make_batch(1000, 5))
    got = read_rows(path.read_bytes())
    assert got == expected_rows(batches, 3) + rows(make_batch(1000, 5))


def test_writer_truncates_to_a_given_committed_length(sample, tmp_path) -> None:
    data, batches, ends = sample
    path = tmp_path / "f.cblt"
    path.write_bytes(data)
    with BlockletFileWriter(str(path), SCHEMA, truncate_to=ends[1]) as writer:
        writer.write_batch(make_batch(2000, 3))
    assert read_rows(path.read_bytes()) == expected_rows(batches, 2) + rows(make_batch(2000, 3))


def test_newer_format_version_is_refused(sample) -> None:
    data, _, _ = sample
    header_end = BlockletFileReader(io.BytesIO(data)).header_length
    newer = bytearray(data)
    newer[4:6] = (FORMAT_VERSION + 1).to_bytes(2, "little")
    schema_len = int.from_bytes(newer[8:12], "little")
    crc_at = 12 + schema_len
    newer[crc_at : crc_at + 4] = crc32c(bytes(newer[:crc_at])).to_bytes(4, "little")
    assert crc_at + 4 <= header_end
    with pytest.raises(UnsupportedFormatError, match="upgrade"):
        BlockletFileReader(io.BytesIO(bytes(newer)))


def test_not_a_blocklet_file(tmp_path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 100)
    with pytest.raises(CorruptDataError, match="not a CarbonLite blocklet file"):
        BlockletFileReader(str(path))
    empty = tmp_path / "empty.cblt"
    empty.write_bytes(b"")
    with pytest.raises(CorruptDataError, match="empty"):
        BlockletFileReader(str(empty))


def test_damage_inside_the_file_is_not_mistaken_for_a_torn_tail(sample, tmp_path) -> None:
    """A crash only tears the end of a file: with intact blocklets after the damage, reading
    without a committed length raises, and reopening refuses to cut them away."""
    data, _, ends = sample
    reader = BlockletFileReader(io.BytesIO(data))
    second = reader.blocklets()[1]
    damaged = bytearray(data)
    damaged[second.offset + 20] ^= 0xFF  # inside blocklet 1's header
    with pytest.raises(CorruptDataError, match="intact blocklet follows") as info:
        BlockletFileReader(io.BytesIO(bytes(damaged))).read_all()
    assert info.value.offset == second.offset
    path = tmp_path / "damaged.cblt"
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptDataError, match="intact blocklet follows"):
        BlockletFileWriter(str(path))
    assert path.read_bytes() == bytes(damaged)  # nothing was cut
    with BlockletFileWriter(str(path), truncate_to=ends[0]) as writer:  # explicit: allowed
        writer.write_batch(make_batch(5000, 2))
    assert read_rows(path.read_bytes()) == expected_rows([make_batch(0, 300)], 1) + rows(
        make_batch(5000, 2)
    )


def test_truncate_to_must_be_a_blocklet_end(sample, tmp_path) -> None:
    data, _, ends = sample
    path = tmp_path / "f.cblt"
    path.write_bytes(data)
    with pytest.raises(InvalidOptionError, match="not the end of a blocklet"):
        BlockletFileWriter(str(path), truncate_to=ends[1] + 8)
    assert path.read_bytes() == data


def test_a_too_short_blocklet_record_is_corrupt_data(sample) -> None:
    data, _, _ = sample
    reader = BlockletFileReader(io.BytesIO(data))
    first = reader.blocklets()[0]
    short = BlockletMeta(first.offset, 8, first.num_rows)
    with pytest.raises(CorruptDataError):
        reader.read_blocklet(short)


@pytest.mark.parametrize(
    ("version", "flags", "error"), [(0, 0, CorruptDataError), (1, 2, UnsupportedFormatError)]
)
def test_version_zero_and_unknown_flags_are_refused(sample, version, flags, error) -> None:
    data, _, _ = sample
    header = bytearray(data)
    header[4:6] = version.to_bytes(2, "little")
    header[6:8] = flags.to_bytes(2, "little")
    schema_len = int.from_bytes(header[8:12], "little")
    crc_at = 12 + schema_len
    header[crc_at : crc_at + 4] = crc32c(bytes(header[:crc_at])).to_bytes(4, "little")
    with pytest.raises(error):
        BlockletFileReader(io.BytesIO(bytes(header)))
