"""Pages decode the same with Arrow's zstd and with zstandard, and refuse the same damage."""

from __future__ import annotations

import pyarrow as pa
import pytest
import zstandard

from carbonlite.format import pages
from carbonlite.format.layout import CODEC_NONE, CODEC_ZSTD

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
