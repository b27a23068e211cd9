"""Integrity seals for log files: a CRC-32C of the file, kept in its last JSON object.

A log version (NDJSON) and a checkpoint document (one JSON object) are sealed by adding one
member, ``"crc32c": N``, as the last member of the file's final object: N is the CRC-32C of
every byte of the file as it was before the member was added. Checking needs no re-encoding:
cut the member out of the bytes, put the closing braces back, and compare. Readers that do not
know the seal see an ordinary extra member and ignore it.

``depth`` is how many objects close after the member: 2 for a version file, whose last line is
``{"commitInfo":{...,"crc32c":N}}``; 1 for a checkpoint document.
"""

from __future__ import annotations

import re

from carbonlite.format.layout import crc32c

__all__ = ["SealMismatchError", "seal", "unseal"]

_MEMBER = b',"crc32c":'


class SealMismatchError(ValueError):
    """The bytes do not match their seal: the file was damaged after it was written."""


def seal(body: bytes, depth: int) -> bytes:
    """``body`` (ending with ``depth`` closing braces) with its CRC-32C member added."""
    closing = b"}" * depth
    if not body.endswith(closing):
        raise ValueError(f"cannot seal a body that does not end with {closing!r}")
    return body[:-depth] + _MEMBER + str(crc32c(body)).encode("ascii") + closing


def unseal(data: bytes, depth: int) -> bytes | None:
    """The body ``data`` was sealed from, checked; None when ``data`` carries no seal.

    Raises :class:`SealMismatchError` when the seal is there but the bytes do not match it.
    """
    closing = b"}" * depth
    at = data.rfind(_MEMBER)
    if at < 0:
        return None
    tail = data[at + len(_MEMBER) :]
    m = re.fullmatch(rb"(\d{1,10})" + re.escape(closing), tail)
    if m is None:  # the last such member is not at the very end: not a seal
        return None
    body = data[:at] + closing
    expected = int(m.group(1))
    actual = crc32c(body)
    if actual != expected:
        raise SealMismatchError(f"CRC-32C is {actual}, the seal says {expected}")
    return body
