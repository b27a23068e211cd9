"""Pages decode the same with Arrow's zstd and with zstandard, and refuse the same damage; LZ4
pages (what streaming blocklets use) round-trip and refuse it too."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
import zstandard

from carbonlite.format import pages
from carbonlite.format.layout import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD

SCHEMA1 = pa.schema([("v", pa.int64())])
ARRAY = pa.array(list(range(5000)) + [None] * 7, pa.int64())


@pytest.fixture(params=["arrow", "zstandard"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "zstandard":
        monkeypatch.setattr(pages, "_ARROW_ZSTD", None)
    elif pages._ARROW_ZSTD is None:
        pytest.skip("pyarrow built without zstd")
    return str(request.param)


def test_a_page_round_trips(decoder: str) -> None:
    stored, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1)
    assert codec == CODEC_ZSTD
    assert pages.decode_page(stored, raw_length, codec, SCHEMA1).equals(ARRAY)
    raw, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1, level=0)
    assert codec == CODEC_NONE
    assert pages.decode_page(raw, raw_length, codec, SCHEMA1).equals(ARRAY)


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_wrong_length_is_refused(decoder: str, delta: int) -> None:
    stored, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1)
    with pytest.raises(ValueError):
        pages.decode_page(stored, raw_length + delta, codec, SCHEMA1)


def test_a_truncated_frame_is_refused(decoder: str) -> None:
    stored, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1)
    with pytest.raises((ValueError, zstandard.ZstdError)):
        pages.decode_page(memoryview(bytes(stored))[:-5], raw_length, codec, SCHEMA1)


def test_an_lz4_page_round_trips() -> None:
    stored, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1, codec="lz4")
    assert codec == CODEC_LZ4
    assert memoryview(stored).nbytes == len(memoryview(stored)) == len(stored) < raw_length
    assert pages.decode_page(stored, raw_length, codec, SCHEMA1).equals(ARRAY)
    raw, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1, codec="none")
    assert codec == CODEC_NONE
    assert pages.decode_page(raw, raw_length, codec, SCHEMA1).equals(ARRAY)


def test_a_page_lz4_cannot_shrink_is_stored_raw() -> None:
    rng = random.Random(7)
    noise = pa.array([rng.getrandbits(63) for _ in range(3000)], pa.int64())
    stored, raw_length, codec = pages.encode_page(noise, SCHEMA1, codec="lz4")
    assert codec == CODEC_NONE and len(stored) == raw_length


@pytest.mark.parametrize("delta", [-1, 1, 64])
def test_an_lz4_page_with_a_wrong_length_is_refused(delta: int) -> None:
    """An LZ4 frame carries no content size: the IPC message must fill the raw length."""
    stored, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1, codec="lz4")
    with pytest.raises(ValueError):
        pages.decode_page(stored, raw_length + delta, codec, SCHEMA1)


def test_a_damaged_lz4_frame_is_refused() -> None:
    stored, raw_length, codec = pages.encode_page(ARRAY, SCHEMA1, codec="lz4")
    body = bytes(stored)
    for damaged in (body[:-5], body[:7] + bytes(len(body) - 7)):
        with pytest.raises((ValueError, OSError, pa.ArrowException)):
            pages.decode_page(damaged, raw_length, codec, SCHEMA1)
