"""Table properties: every key CarbonLite knows, its default, and how its value is checked.

Properties are ``dict[str, str]`` as in Delta and Iceberg. Keys starting with ``user.`` are
the user's own and are kept as they are; any other unknown key is refused, so a typo never
silently does nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from carbonlite.errors import InvalidOptionError
from carbonlite.format.pages import PAGE_CODECS, PageCodec

__all__ = [
    "COLUMNAR_FORMATS",
    "NEW_TABLE_COLUMNAR_FORMAT",
    "PROPERTIES",
    "TableProperties",
    "effective_properties",
    "parse_duration",
    "parse_size",
    "validate_properties",
]

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1024,
    "k": 1024,
    "mb": 1024**2,
    "m": 1024**2,
    "gb": 1024**3,
    "g": 1024**3,
    "tb": 1024**4,
    "t": 1024**4,
}
_DURATION_UNITS = {
    "": 1,
    "ms": 0.001,
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}


MAX_COUNT = 2**63 - 1
"""The largest count or size of bytes a property may hold (a signed 64-bit integer, as in the
log's readers)."""
MAX_SECONDS = MAX_COUNT // 1000
"""The longest duration: its milliseconds are a signed 64-bit integer (about 292 million
years)."""


def parse_size(text: str) -> int:
    """``"1g"``, ``"64 MB"``, ``"1048576"`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size such as 1048576, 64MB or 1GB")
    unit = _SIZE_UNITS[m.group(2).lower()]
    if unit == 1 and m.group(1).partition(".")[2].strip("0"):  # 1.5KB is 1536 bytes; 1.5 is not
        raise ValueError(f"{text!r} is not a whole number of bytes (1.5KB is, 1.5 is not)")
    size = int(Decimal(m.group(1)) * unit)
    if size > MAX_COUNT:
        raise ValueError(f"{text!r} is more than the largest size, {MAX_COUNT} bytes")
    return size


def parse_duration(text: str) -> float:
    """``"7d"``, ``"168 hours"``, ``"30 s"``, ``"0"`` (seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _DURATION_UNITS:
        raise ValueError(f"{text!r} is not a duration such as 30s, 12h, 7d or 3600 (seconds)")
    seconds = Decimal(m.group(1)) * Decimal(str(_DURATION_UNITS[m.group(2).lower()]))
    if seconds > MAX_SECONDS:
        raise ValueError(
            f"{text!r} is longer than the longest duration, {MAX_SECONDS} seconds (about 292 "
            "million years)"
        )
    return float(seconds)


def _whole_number(text: str) -> int:
    """``text`` as a whole number in plain digits (a sign allowed, so that a negative one is
    told apart from text that is no number) of at most :data:`MAX_COUNT`; ``ValueError``
    saying so otherwise."""
    if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", str(text)):
        raise ValueError("must be a whole number such as 100")
    value = int(text)
    if value > MAX_COUNT:
        raise ValueError(f"must be at most {MAX_COUNT}")
    return value


def _positive_int(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


MAX_BLOCKLET_ROWS = 2**32 - 1
"""The most rows a blocklet may hold: a deletion vector counts them in 32 bits (FORMAT.md)."""


def _blocklet_rows(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_BLOCKLET_ROWS:
        raise ValueError(
            f"must be at most {MAX_BLOCKLET_ROWS} (a deletion vector counts a blocklet's rows "
            "in 32 bits)"
        )
    return value


def _non_negative_int(text: str) -> int:
    value = _whole_number(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _positive_size(text: str) -> int:
    value = parse_size(text)
    if value < 1:
        raise ValueError("must be more than 0 bytes")
    return value


def parse_bool(text: object) -> bool:
    """``true``/``1``/``yes`` or ``false``/``0``/``no`` (any case); ``ValueError`` otherwise.
    The one reading of a yes/no option: table properties, Spark options, storage options."""
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError("must be true or false")


def _levels(text: str) -> tuple[int, ...]:
    try:
        parts = tuple(_whole_number(p) for p in str(text).split(","))
    except ValueError:
        parts = ()
    if not parts or any(p < 2 for p in parts):
        raise ValueError("must be comma-separated counts of at least 2, such as 4,3")
    return parts


def _compression_level(text: str) -> int:
    value = _whole_number(text)
    if not 0 <= value <= 22:
        raise ValueError("must be 0 (no compression) to 22")
    return value


def _column_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    if len(set(names)) != len(names):
        raise ValueError("names a column twice")
    return names


def _fpp(text: str) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError("must be a rate such as 0.01 (1%)") from None
    if not 0.0 < value < 0.5:
        raise ValueError("must be more than 0 and less than 0.5, such as 0.01 (1%)")
    return value


def _stream_codec(text: str) -> str:
    value = str(text).strip().lower()
    if value not in PAGE_CODECS:
        raise ValueError(f"must be one of {', '.join(PAGE_CODECS)}")
    return value


COLUMNAR_FORMATS = ("parquet", "carbonlite")
NEW_TABLE_COLUMNAR_FORMAT = "parquet"
"""What ``columnar_format`` a new table gets unless told (absent, a table is older: carbonlite)."""


def _columnar_format(text: str) -> str:
    value = str(text).strip().lower()
    if value not in COLUMNAR_FORMATS:
        raise ValueError(f"must be one of {', '.join(COLUMNAR_FORMATS)}")
    return value


def _iceberg(text: str) -> str:
    value = str(text).strip().lower()
    if value not in ("off", "v2", "v3"):
        raise ValueError("must be off, v2 or v3")
    return value


@dataclass(frozen=True, slots=True)
class PropertySpec:
    default: str
    parse: Callable[[str], object]
    doc: str


PROPERTIES: dict[str, PropertySpec] = {
    "blocklet_max_rows": PropertySpec("65536", _blocklet_rows, "rows per blocklet at most"),
    "blocklet_max_bytes": PropertySpec(
        "64MB", _positive_size, "in-memory Arrow bytes per blocklet at most"
    ),
    "compression_level": PropertySpec("1", _compression_level, "zstd level of pages (0 = none)"),
    "stream_codec": PropertySpec(
        "lz4",
        _stream_codec,
        "codec of streaming blocklets (lz4, zstd at compression_level, none); handoff and "
        "compaction rewrite them with zstd",
    ),
    "streaming_segment_max_bytes": PropertySpec(
        "1GB", _positive_size, "a STREAMING segment rolls over to STREAMING_FINISH past this size"
    ),
    "checkpoint_interval": PropertySpec(
        "100", _positive_int, "write a checkpoint every N versions"
    ),
    "checkpoint_max_entries": PropertySpec(
        "32",
        _positive_int,
        "write a checkpoint once the versions since the last one hold this many log entries",
    ),
    "compaction_level_threshold": PropertySpec(
        "4,3", _levels, "minor compaction: merge every N segments of a level into the next level"
    ),
    "major_compaction_size": PropertySpec(
        "1GB", _positive_size, "major compaction merges consecutive segments up to this total size"
    ),
    "compaction_preserve_segments": PropertySpec(
        "0", _non_negative_int, "the newest N segments are left out of compaction"
    ),
    "auto_compaction": PropertySpec(
        "false",
        parse_bool,
        "after data commits: close and hand off STREAMING segments of too many files, then "
        "compact minor",
    ),
    "auto_compaction_min_files": PropertySpec(
        "16",
        _positive_int,
        "auto compaction closes and hands off a STREAMING segment holding more files than this",
    ),
    "auto_handoff": PropertySpec(
        "false", parse_bool, "hand off finished streaming segments after a roll-over"
    ),
    "columnar_format": PropertySpec(
        "carbonlite",
        _columnar_format,
        "the files handoff and compaction write: parquet (new tables) or carbonlite (blocklet "
        "files; tables created before parquet existed); compaction converts files of the other",
    ),
    "iceberg": PropertySpec(
        "off",
        _iceberg,
        "publish Iceberg metadata (v2, or v3 with deletion vectors) for every version that "
        "changes the columnar Parquet files, under <table>/metadata/ (docs/ICEBERG.md); off by "
        "default",
    ),
    "handoff_blocklet_rows": PropertySpec(
        "131072",
        _blocklet_rows,
        "rows per blocklet in segments written by handoff and compaction",
    ),
    "bloom_filter_columns": PropertySpec(
        "",
        _column_list,
        "comma-separated columns whose blocklets get bloom filters, for == and is_in lookups",
    ),
    "bloom_filter_fpp": PropertySpec(
        "0.01", _fpp, "the target false-positive rate of bloom filters (0.01: 1%)"
    ),
    "secondary_index_columns": PropertySpec(
        "",
        _column_list,
        "comma-separated columns whose handed-off and compacted files get a secondary index "
        "(value -> blocklets), for == and is_in lookups of many values",
    ),
    "deleted_data_retention": PropertySpec(
        "7d", parse_duration, "clean keeps data no version younger than this needs"
    ),
    "log_retention": PropertySpec(
        "30d", parse_duration, "clean keeps log versions younger than this"
    ),
}


def effective_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Every known property with the value in force (the table's, else the default), in
    :data:`PROPERTIES` order, then the table's ``user.`` keys."""
    known = {key: properties.get(key, spec.default) for key, spec in PROPERTIES.items()}
    return known | {k: v for k, v in sorted(properties.items()) if k not in PROPERTIES}


def validate_properties(properties: Mapping[str, str] | None) -> dict[str, str]:
    """Checked properties as strings; raises :class:`InvalidOptionError` naming every problem."""
    if properties is not None and not isinstance(properties, Mapping):
        raise InvalidOptionError(
            "properties must be a mapping of property names to string values, such as "
            f"{{'checkpoint_interval': '50'}}, not {type(properties).__name__} {properties!r}"
        )
    out: dict[str, str] = {}
    problems: list[str] = []
    for key, value in (properties or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            problems.append(f"{key!r}: keys and values must be strings, got {type(value).__name__}")
            continue
        if key == "user.":
            problems.append("'user.' needs a name after the dot, such as 'user.team'")
            continue
        if re.search(r"[\x00-\x1f\x7f]", key):
            problems.append(f"{key!r}: a key must not contain control characters")
            continue
        if key.startswith("user."):
            out[key] = value
            continue
        spec = PROPERTIES.get(key)
        if spec is None:
            close = [k for k in PROPERTIES if k.split("_")[0] == key.split("_")[0]]
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(
                f"{key!r} is not a table property{hint} (custom keys start with 'user.')"
            )
            continue
        try:
            spec.parse(value)
        except ValueError as exc:
            problems.append(f"{key}={value!r}: {exc}")
            continue
        out[key] = value
    if problems:
        raise InvalidOptionError("invalid table properties:\n  " + "\n  ".join(problems))
    return out


class TableProperties:
    """Typed access to a table's properties, defaults filled in."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        self._raw = dict(properties)

    def _get(self, key: str) -> Any:
        spec = PROPERTIES[key]
        return spec.parse(self._raw.get(key, spec.default))

    @property
    def blocklet_max_rows(self) -> int:
        return int(self._get("blocklet_max_rows"))

    @property
    def blocklet_max_bytes(self) -> int:
        return int(self._get("blocklet_max_bytes"))

    @property
    def columnar_format(self) -> str:
        return str(self._get("columnar_format"))

    @property
    def iceberg(self) -> str:
        return str(self._get("iceberg"))

    @property
    def compression_level(self) -> int:
        return int(self._get("compression_level"))

    @property
    def stream_codec(self) -> PageCodec:
        return cast(PageCodec, self._get("stream_codec"))

    @property
    def streaming_segment_max_bytes(self) -> int:
        return int(self._get("streaming_segment_max_bytes"))

    @property
    def checkpoint_interval(self) -> int:
        return int(self._get("checkpoint_interval"))

    @property
    def checkpoint_max_entries(self) -> int:
        return int(self._get("checkpoint_max_entries"))

    @property
    def compaction_level_threshold(self) -> tuple[int, ...]:
        return tuple(self._get("compaction_level_threshold"))

    @property
    def major_compaction_size(self) -> int:
        return int(self._get("major_compaction_size"))

    @property
    def compaction_preserve_segments(self) -> int:
        return int(self._get("compaction_preserve_segments"))

    @property
    def auto_compaction(self) -> bool:
        return bool(self._get("auto_compaction"))

    @property
    def auto_compaction_min_files(self) -> int:
        return int(self._get("auto_compaction_min_files"))

    @property
    def auto_handoff(self) -> bool:
        return bool(self._get("auto_handoff"))

    @property
    def handoff_blocklet_rows(self) -> int:
        return int(self._get("handoff_blocklet_rows"))

    @property
    def bloom_filter_columns(self) -> tuple[str, ...]:
        return tuple(self._get("bloom_filter_columns"))

    @property
    def bloom_filter_fpp(self) -> float:
        return float(self._get("bloom_filter_fpp"))

    @property
    def secondary_index_columns(self) -> tuple[str, ...]:
        return tuple(self._get("secondary_index_columns"))

    @property
    def deleted_data_retention(self) -> float:
        return float(self._get("deleted_data_retention"))

    @property
    def log_retention(self) -> float:
        return float(self._get("log_retention"))
