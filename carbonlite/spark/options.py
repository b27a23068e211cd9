"""Reading the options users give ``spark.read/readStream/write/writeStream``."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from carbonlite.errors import InvalidOptionError
from carbonlite.properties import parse_bool, parse_size

__all__ = ["OPTIONS", "TAIL_OPTION", "Route", "SparkOptions", "check_options"]

TAIL_OPTION = "carbonlite.tailOnly"
"""Internal batch read option: read only the files outside the columnar Parquet files, which
Spark's own Parquet reader reads (``spark/native_read.py``)."""

Route = Literal["read", "readStream", "write", "writeStream"]

_COMMON = ("path", "storageOptions")
OPTIONS: dict[Route, tuple[str, ...]] = {
    "read": (
        *_COMMON,
        "versionAsOf",
        "timestampAsOf",
        "filter",
        "columns",
        "filterPushdown",
        "nativeRead",
        "carbonlite.tailOnly",
        "readChangeFeed",
        "startingVersion",
        "startingTimestamp",
        "endingVersion",
        "endingTimestamp",
    ),
    "readStream": (
        *_COMMON,
        "maxFilesPerTrigger",
        "maxRowsPerTrigger",
        "maxBytesPerTrigger",
        "startingVersion",
        "startingTimestamp",
        "skipChangeCommits",
        "readChangeFeed",
    ),
    "write": (
        *_COMMON,
        "sortColumns",
        "partitionBy",
        "partitionOverwriteMode",
        "replaceWhere",
        "publish",
        "publishToken",
        "publishState",
        "txnAppId",
        "txnVersion",
        "mergeSchema",
        "carbonlite.saveMode",
        "carbonlite.sessionPartitionOverwriteMode",
    ),
    "writeStream": (
        *_COMMON,
        "sortColumns",
        "partitionBy",
        "txnAppId",
        "checkpointLocation",
        "mergeSchema",
    ),
}
"""The options each route takes (docs/SPARK.md, "Options"); anything else is refused."""
_PREFIXES: dict[Route, tuple[str, ...]] = {
    "read": ("storage.",),
    "readStream": ("storage.",),
    "write": ("storage.", "property."),
    "writeStream": ("storage.", "property."),
}
_CALLS: dict[Route, str] = {
    "read": "spark.read",
    "readStream": "spark.readStream",
    "write": "df.write",
    "writeStream": "df.writeStream",
}

_STORAGE_PREFIX = "storage."
_PROPERTY_PREFIX = "property."


class SparkOptions:
    """Case-insensitive options with typed getters and clear errors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._raw = {str(k).lower(): str(v) for k, v in dict(options).items()}

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._raw.get(name.lower(), default)

    @property
    def path(self) -> str:
        path = self.get("path")
        if not path:
            raise InvalidOptionError(
                "no table path: use .load(path) / .save(path) / .start(path) or "
                ".option('path', ...). "
                "A catalog table made by CREATE TABLE (cols) USING carbonlite, saveAsTable or "
                "toTable gets no path from Spark 4.3: DROP TABLE it and use "
                "carbonlite.spark.register_table(spark, name, path) (docs/SPARK.md)"
            )
        return path

    @property
    def storage_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        text = self.get("storageOptions")
        if text:
            try:
                out.update(json.loads(text))
            except json.JSONDecodeError as exc:
                raise InvalidOptionError(f"storageOptions is not JSON: {exc}") from None
        for key, value in self._raw.items():
            if key.startswith(_STORAGE_PREFIX):
                out[key[len(_STORAGE_PREFIX) :]] = value
        return out

    @property
    def table_properties(self) -> dict[str, str]:
        return {
            k[len(_PROPERTY_PREFIX) :]: v
            for k, v in self._raw.items()
            if k.startswith(_PROPERTY_PREFIX)
        }

    def get_int(self, name: str, *, minimum: int = 0) -> int | None:
        value = self.get(name)
        if value is None:
            return None
        try:
            number = int(value)
        except ValueError:
            raise InvalidOptionError(f"option {name}={value!r} must be an integer") from None
        if number < minimum:
            raise InvalidOptionError(f"option {name}={value!r} must be at least {minimum}")
        return number

    def get_size(self, name: str) -> int | None:
        value = self.get(name)
        if value is None:
            return None
        try:
            size = parse_size(value)
        except ValueError as exc:
            raise InvalidOptionError(f"option {name}: {exc}") from None
        if size < 1:
            raise InvalidOptionError(f"option {name}={value!r} must be more than 0 bytes")
        return size

    def get_bool(self, name: str, default: bool = False) -> bool:
        value = self.get(name)
        if value is None:
            return default
        try:
            return parse_bool(value)
        except ValueError:
            raise InvalidOptionError(f"option {name}={value!r} must be true or false") from None

    def get_list(self, name: str) -> list[str]:
        value = self.get(name)
        return [p.strip() for p in value.split(",") if p.strip()] if value else []


def check_options(options: Mapping[str, str], route: Route, *, extra: Iterable[str] = ()) -> None:
    """Refuse any option ``route`` does not take, naming it, the nearest valid name and all
    valid ones (Spark hands keys over lower-cased; matching ignores case)."""
    valid = [*OPTIONS[route], *extra]
    by_lower = {name.lower(): name for name in valid}
    prefixes = _PREFIXES[route]
    unknown = [
        key
        for key in options
        if key.lower() not in by_lower and not key.lower().startswith(prefixes)
    ]
    if not unknown:
        return
    problems = []
    for key in sorted(unknown):
        near = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f" (did you mean {by_lower[near[0]]!r}?)" if near else ""
        problems.append(f"{key!r}{hint}")
    raise InvalidOptionError(
        f"{_CALLS[route]}.format('carbonlite') does not take the option"
        f"{'s' if len(problems) > 1 else ''} {', '.join(problems)}; it takes "
        f"{', '.join(OPTIONS[route])}, and names starting with {' or '.join(prefixes)}"
    )
