"""``verify``: OK on healthy tables; damage is reported (file, byte offset, what), never raised,
and one damaged file does not hide the state of the others."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

import carbonlite as cl
from carbonlite.metadata.seal import seal, unseal
from tests.compaction.lifecycle import SCHEMA, make_rows

PROPS = {"blocklet_max_rows": "25", "handoff_blocklet_rows": "64"}


def healthy(path: Path, columnar_format: str = "parquet") -> cl.Table:
    """Handed-off, compacted and streaming segments, several files and blocklets each."""
    props = {**PROPS, "columnar_format": columnar_format}
    t = cl.create_table(path, SCHEMA, sort_columns=["ts"], properties=props)
    for s in range(5):
        for part in range(2):
            first = s * 100 + part * 50
            t.append(make_rows(range(first, first + 50)))
        t.finish_streaming()
    t.handoff()
    t.compact("minor")
    t.append(make_rows(range(500, 560)))
    return t


def live_files(t: cl.Table) -> dict[str, cl.metadata.FileState]:
    return {f.path: f for _, f in t.refresh().snapshot().iter_files()}


def test_verify_is_ok_on_healthy_tables(tmp_path: Path, mem_uri: str) -> None:
    for t in (healthy(tmp_path / "t"), healthy(mem_uri)):  # type: ignore[arg-type]
        result = t.verify()
        assert result.ok and result.problems == ()
        snap = t.snapshot()
        assert result.version == snap.version
        assert result.files_checked == len(list(snap.iter_files())) == 3
        assert result.blocklets_checked == sum(f.num_blocklets for _, f in snap.iter_files())
        assert result.rows_checked == snap.num_rows == 560
        for v in range(snap.version + 1):  # every version verifies
            assert t.verify(version=v).ok


def _first_page_offset(path: Path, blocklet_offset: int) -> int:
    with open(path, "rb") as f:
        f.seek(blocklet_offset)
        prefix = f.read(16)
    assert prefix[:4] == b"CLBK"
    (header_len,) = struct.unpack_from("<I", prefix, 4)
    return blocklet_offset + 20 + header_len


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


@pytest.mark.parametrize("columnar_format", ["parquet", "carbonlite"])
def test_verify_reports_a_flipped_byte_in_a_page(tmp_path: Path, columnar_format: str) -> None:
    """A flipped byte in a page of a columnar file: a blocklet file's page checksum, or the
    CRC CarbonLite writes for every Parquet page, catches it."""
    path = tmp_path / "t"
    t = healthy(path, columnar_format)
    files = live_files(t)
    rel = next(r for r in files if "/0.1/" in r)
    entry = files[rel].blocklets[1]
    if columnar_format == "carbonlite":
        at = _first_page_offset(path / rel, entry.offset) + 3
    else:  # past the first page's header, inside its values
        at = entry.offset + 40
    flip(path / rel, at)
    result = t.verify()
    assert not result.ok
    assert len(result.problems) == 1, result.problems
    p = result.problems[0]
    assert p.file == rel
    assert p.offset is not None and entry.offset <= p.offset < entry.offset + entry.length, p
    assert "checksum" in p.message.lower() or "crc" in p.message.lower(), p.message
    assert result.files_checked == 3  # the other files were checked too


def test_verify_reports_a_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = healthy(path)
    rel, f = next((r, f) for r, f in live_files(t).items() if "/5/" in r)  # the stream file
    os.truncate(path / rel, f.committed_length - 10)
    result = t.verify()
    assert [(p.file, p.offset) for p in result.problems] == [(rel, f.committed_length - 10)]
    assert "fewer than its committed length" in result.problems[0].message
    assert str(f.committed_length) in result.problems[0].message


def test_verify_reports_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = healthy(path)
    rel = next(r for r in live_files(t) if "/4.0/" in r)
    os.remove(path / rel)
    result = t.verify()
    assert [(p.file, p.offset, p.message) for p in result.problems] == [
        (rel, None, "the file is missing")
    ]


def _edit_log_stats(path: Path, rel: str, column: str) -> tuple[int, int]:
    """Raise the logged max of ``column`` in the first blocklet ``rel`` got, and seal the
    version again: the log of a writer with a statistics bug, not a damaged file (the seal
    catches those; tests/metadata). Returns (version, offset)."""
    log = path / "_carbonlite" / "log"
    for name in sorted(os.listdir(log)):
        if not name.endswith(".json") or "checkpoint" in name:
            continue
        body = unseal((log / name).read_bytes().rstrip(b"\n"), 2)
        assert body is not None
        lines = body.decode().split("\n")
        for i, line in enumerate(lines):
            action = json.loads(line)
            appended = action.get("appendBlocklets")
            if appended and appended["file"] == rel:
                blocklet = appended["blocklets"][0]
                blocklet["stats"][column]["max"] += 1_000_000
                lines[i] = json.dumps(action, separators=(",", ":"))
                (log / name).write_bytes(seal("\n".join(lines).encode(), 2) + b"\n")
                return int(name.split(".")[0]), blocklet["offset"]
    raise AssertionError(f"no append of {rel} in the log")


def test_verify_reports_log_statistics_that_do_not_match_the_data(tmp_path: Path) -> None:
    path = tmp_path / "t"
    healthy(path)
    t = cl.open_table(path)
    rel = next(r for r in live_files(t) if "/5/" in r)
    _, offset = _edit_log_stats(path, rel, "id")
    t = cl.open_table(path)  # read the edited log
    result = t.verify()
    assert [(p.file, p.offset) for p in result.problems] == [(rel, offset)]
    message = result.problems[0].message
    assert "statistics of column 'id'" in message and "differ from the data" in message


def test_verify_reports_every_problem_at_once(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = healthy(path)
    files = live_files(t)
    by_segment = {r.split("/")[1]: r for r in files}
    assert set(by_segment) == {"0.1", "4.0", "5"}
    compacted, handed_off, stream = by_segment["0.1"], by_segment["4.0"], by_segment["5"]
    flip(path / compacted, files[compacted].blocklets[0].offset + 40)  # in a Parquet page
    os.remove(path / handed_off)
    os.truncate(path / stream, files[stream].committed_length // 2)
    result = cl.open_table(path).verify()  # reports, does not raise
    assert {p.file for p in result.problems} == {compacted, handed_off, stream}
    assert not result.ok
    assert result.files_checked == 3


@pytest.mark.parametrize("where", ["file header", "blocklet header", "parquet footer"])
def test_verify_reports_damage_outside_pages(tmp_path: Path, where: str) -> None:
    path = tmp_path / "t"
    t = healthy(path, "parquet" if where == "parquet footer" else "carbonlite")
    rel, f = next((r, f) for r, f in live_files(t).items() if "/0.1/" in r)
    if where == "parquet footer":  # the footer's length is the 4 bytes before the magic
        at = f.committed_length - 8
    else:
        at = 5 if where == "file header" else f.blocklets[0].offset + 20
    flip(path / rel, at)
    result = t.verify()
    assert [p.file for p in result.problems] == [rel], result.problems
