"""Option values of the commands, from their text: each parser raises
:class:`InvalidOptionError` naming the option, so the command prints it as its one line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from carbonlite.errors import InvalidOptionError

__all__ = ["key_values", "seconds_of", "storage_options_of"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def storage_options_of(text: str | None) -> dict[str, Any] | None:
    """``--storage-options``: a JSON object (None when not given)."""
    if not text:
        return None
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise InvalidOptionError(f"--storage-options is not valid JSON: {exc}") from None
    if not isinstance(options, dict):
        raise InvalidOptionError(f"--storage-options must be a JSON object, not {text!r}")
    return options


def seconds_of(text: str, option: str) -> float:
    """A duration such as ``1s``, ``250ms``, ``2m``, ``6h``, ``7d`` or ``0.5`` (seconds), as
    seconds; its range is the caller's to check."""
    for unit in ("ms", "s", "m", "h", "d"):
        if text.endswith(unit):
            number = text[: -len(unit)]
            scale = _UNITS[unit]
            break
    else:
        number, scale = text, 1.0
    try:
        return float(number.strip()) * scale
    except ValueError:
        raise InvalidOptionError(
            f"{option} {text!r} is not a duration such as 1s, 250ms, 2m, 6h, 7d or 0.5"
        ) from None


def key_values(pairs: Sequence[str], option: str) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` options as a mapping (a key given twice is an error)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        key = key.strip()
        if not equals or not key:
            raise InvalidOptionError(f"{option} {pair!r} is not KEY=VALUE")
        if key in out:
            raise InvalidOptionError(f"{option} gives {key!r} twice")
        out[key] = value.strip()
    return out
