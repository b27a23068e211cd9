"""S3 (and S3-protocol servers) through obstore.

Paths are ``bucket/key``; the backend keeps one :class:`obstore.store.S3Store` per bucket.
Objects cannot be appended to, so ``supports_append`` is False and writers start a new object
for every append (:class:`~carbonlite.storage.base.BufferedObjectAppender`). Truncating is one
PUT of the shorter prefix, so a reader sees the old object or the new one.

Put-if-absent is a conditional PUT (``If-None-Match: *``, obstore's ``mode="create"``).
Because some S3-compatible servers ignore that header, the first put-if-absent into a bucket
proves that the server honours it (two conditional PUTs of one probe object: the second must
fail), and refuses the bucket with :class:`~carbonlite.errors.UnsupportedStorageError`
otherwise.

``swap`` (an atomic read-modify-write) reads the object with its ETag and writes it back with
``If-Match`` (obstore's ``mode={"e_tag": ...}``), or ``If-None-Match: *`` when there was none,
reading again when the write is refused; the first swap into a bucket proves the same way that
the server honours ``If-Match`` (a write conditional on a stale ETag must be refused).

obstore retries failed requests itself (connection errors and 5xx answers; a few times, see
``_DEFAULT_RETRY`` in :mod:`~carbonlite.storage.s3_options`). A conditional PUT that reached
the server but whose answer was lost can therefore be retried and come back as "already
exists", so put-if-absent reports False for an object this very call created. That is
deliberate at this layer: the log recognises its own commit by the commit id inside the
version file, which it reads back when it loses a race.

Errors: a missing object (or bucket, when reading) is ``FileNotFoundError``, as everywhere
in storage; every other failure, including an unreachable endpoint, is a
:class:`~carbonlite.errors.StorageError` naming the URI and the endpoint. No obstore
exception escapes. Options are translated by :func:`~carbonlite.storage.s3_options.s3_settings`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from carbonlite.errors import (
    InvalidOptionError,
    StorageError,
    UnsupportedStorageError,
    WriteRefusedError,
)
from carbonlite.storage.base import (
    Appender,
    BufferedObjectAppender,
    Change,
    FileStatus,
    RangeReader,
    Storage,
    swap_optimistically,
)
from carbonlite.storage.s3_options import S3Settings, s3_settings

try:
    import obstore
    from obstore.exceptions import (
        AlreadyExistsError,
        PermissionDeniedError,
        PreconditionError,
        UnauthenticatedError,
        UnknownConfigurationKeyError,
    )
    from obstore.store import S3Store
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise UnsupportedStorageError(
        f"s3:// tables need obstore ({_exc}); install it with: pip install 'carbonlite[s3]'"
    ) from _exc

if TYPE_CHECKING:
    from obstore import ObjectMeta, PutMode
    from obstore.store import ClientConfig, RetryConfig, S3Config

__all__ = ["S3Settings", "S3Storage", "s3_settings"]

T = TypeVar("T")

_RANGE_NOT_SATISFIABLE = re.compile(r"status code: 416\b|<Code>InvalidRange</Code>")
_NO_SUCH_BUCKET = "<Code>NoSuchBucket</Code>"
_LOST_WRITES = 3
"""Conditional writes of one swap that may fail without an answer (after obstore's own
retries) before the swap gives up and raises the error: each may have landed, so the swap
reads again rather than fail at once, but an endpoint that keeps failing is not waited out."""


def _describe(exc: BaseException) -> str:
    """obstore's message without its debug dump: the first line, the S3 error code, the cause."""
    text = str(exc)
    head = text.split("\n\nDebug source:", 1)[0].strip()
    code = re.search(r"<Code>([^<]*)</Code>", head)
    message = re.search(r"<Message>([^<]*)</Message>", head)
    head = re.sub(r":?\s*<\?xml.*", "", head, flags=re.S)
    if code:
        head += f" ({code.group(1)}{': ' + message.group(1) if message else ''})"
    causes = re.findall(r'message: "([^"]*)"', text)
    if causes and causes[-1] not in head:
        head += f" ({causes[-1]})"
    return head


class _S3RangeReader(RangeReader):
    def __init__(self, storage: S3Storage, path: str) -> None:
        self.path = path
        self._storage = storage
        self._size = storage.size(path)

    def size(self) -> int:
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0 or offset >= self._size:
            return b""
        return self._storage.read(self.path, offset, min(self._size, offset + length))


class S3Storage(Storage):
    """S3 buckets (or any server speaking the S3 protocol) with one set of options."""

    protocol = "s3"
    supports_append = False

    def __init__(self, storage_options: Mapping[str, Any] | None = None) -> None:
        self._options = dict(storage_options or {})
        self.settings = s3_settings(self._options)
        self._stores: dict[str, S3Store] = {}
        self._stores_lock = threading.Lock()
        self._verified: set[tuple[str, str]] = set()  # (bucket, header) proved honoured
        self._verify_lock = threading.Lock()
        self._make_store("carbonlite-options-check")  # a bad option fails now, not on first use

    def __reduce__(self) -> tuple[type[S3Storage], tuple[dict[str, Any]]]:
        return S3Storage, (self._options,)

    # --- reading -----------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        try:
            self._head(path)
        except FileNotFoundError:
            return False
        return True

    def size(self, path: str) -> int:
        return int(self._head(path)["size"])

    def status(self, path: str) -> FileStatus:
        meta = self._head(path)
        return _status(path.split("/", 1)[0], meta)

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        if end is not None and end <= start:
            return b""
        store, key = self._locate(path)
        if start == 0 and end is None:
            return self._call("read", path, lambda: bytes(obstore.get(store, key).bytes()))
        wanted: Any = {"offset": start} if end is None else (start, end)

        def get_range() -> bytes:
            try:
                return bytes(obstore.get(store, key, options={"range": wanted}).bytes())
            except Exception as exc:  # a range past the end: S3 answers 416, a read gives b""
                if _RANGE_NOT_SATISFIABLE.search(str(exc)):
                    return b""
                raise

        return self._call("read", path, get_range)

    def open_reader(self, path: str) -> RangeReader:
        return _S3RangeReader(self, path)

    def list(self, path: str, *, recursive: bool = False) -> list[FileStatus]:
        store, key = self._locate(path.rstrip("/"))
        bucket = path.split("/", 1)[0]

        def objects() -> Iterator[ObjectMeta]:
            if recursive:
                for chunk in obstore.list(store, key or None):
                    yield from chunk
            else:
                yield from obstore.list_with_delimiter(store, key or None)["objects"]

        try:
            metas = self._call("list", path, lambda: [m for m in objects() if m["path"] != key])
        except FileNotFoundError:  # no such bucket
            return []
        out = [_status(bucket, m) for m in metas]
        out.sort(key=lambda s: s.path)
        return out

    # --- writing -----------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self._verify_conditional_put(path.split("/", 1)[0])
        return self._create(path, data)

    def put(self, path: str, data: bytes) -> None:
        store, key = self._locate(path)
        self._call("write", path, lambda: obstore.put(store, key, bytes(data)), writing=True)

    def swap(self, path: str, change: Change) -> bytes | None:
        """Optimistic, with conditional PUTs: the object is read with its ETag and written
        back with ``If-Match: <etag>`` (``If-None-Match: *`` when there was none), so a write
        lands only on the value ``change`` saw. A write refused because the object changed, or
        one whose answer was lost (it may have landed), makes the swap read again and call
        ``change`` on what is there now; after :data:`_LOST_WRITES` lost answers in one swap
        the last error is raised (a :class:`~carbonlite.errors.StorageError`: whether that
        write landed is unknown)."""
        bucket = path.split("/", 1)[0]
        self._verify_conditional_put(bucket)
        self._verify_conditional_update(bucket)
        lost = 0

        def write_if(data: bytes, etag: str | None) -> bool:
            nonlocal lost
            try:
                return self._put_unless_changed(path, data, etag)
            except WriteRefusedError:
                raise  # refused before anything landed: the outcome is known
            except StorageError:
                lost += 1
                if lost > _LOST_WRITES:
                    raise
                return False  # landed or not: read again and let change see which

        return swap_optimistically(
            self.uri(path), change, lambda: self._read_tagged(path), write_if
        )

    def open_appender(self, path: str) -> Appender:
        return BufferedObjectAppender(self, path)

    def append(self, path: str, data: bytes) -> int:
        raise UnsupportedStorageError(
            f"cannot append to {self.uri(path)!r}: S3 objects cannot be appended to; "
            "write a new object instead (check Storage.supports_append)"
        )

    def truncate(self, path: str, length: int) -> None:
        size = self.size(path)
        self._check_truncate(path, length, size)
        if length < size:
            # One PUT replaces the object atomically: readers see the old or the new length.
            self.put(path, self.read(path, 0, length))

    def delete(self, path: str) -> bool:
        if not self.exists(path):  # S3 deletes of missing keys succeed silently
            return False
        store, key = self._locate(path)
        self._call("delete", path, lambda: obstore.delete(store, key), writing=True)
        return True

    # --- internals ---------------------------------------------------------------------------

    def _create(self, path: str, data: bytes) -> bool:
        """One conditional PUT: True when it created ``path``, False when it existed."""
        store, key = self._locate(path)

        def create() -> bool:
            try:
                # Never multipart: a multipart upload cannot carry If-None-Match.
                obstore.put(store, key, bytes(data), mode="create", use_multipart=False)
            except (AlreadyExistsError, PreconditionError):
                return False
            return True

        return self._call("conditional write", path, create, writing=True)

    def _read_tagged(self, path: str) -> tuple[bytes | None, str | None]:
        """The object's bytes and the ETag of those very bytes (one GET); ``(None, None)``
        when there is no object."""
        store, key = self._locate(path)

        def get() -> tuple[bytes, str | None]:
            result = obstore.get(store, key)
            return bytes(result.bytes()), result.meta["e_tag"]

        try:
            data, etag = self._call("read", path, get)
        except FileNotFoundError:
            return None, None
        if etag is None:
            raise UnsupportedStorageError(
                f"the S3 server ({self.settings.endpoint}) answered a read of "
                f"{self.uri(path)!r} without an ETag, so a swap cannot make its write "
                "conditional (If-Match); CarbonLite refuses to swap there"
            )
        return data, etag

    def _put_unless_changed(self, path: str, data: bytes, etag: str | None) -> bool:
        """One conditional PUT: ``If-Match: etag``, or ``If-None-Match: *`` when ``etag`` is
        None. True when it wrote, False when the object was changed (or created, or deleted)
        since the read that gave ``etag``."""
        store, key = self._locate(path)
        # {"e_tag": etag} only: obstore 0.12 refuses {"version": None}, and S3 needs no version
        mode: PutMode = "create" if etag is None else {"e_tag": etag}

        def put() -> bool:
            try:
                # Never multipart: a multipart upload cannot carry the condition.
                obstore.put(store, key, data, mode=mode, use_multipart=False)
            except (AlreadyExistsError, PreconditionError) as exc:
                if _NO_SUCH_BUCKET in str(exc):  # If-Match's 404s come as precondition failures
                    raise  # a missing bucket, not a changed object: _call says so
                return False  # 412, or a 404 for an object deleted since the read
            return True

        return self._call("conditional write", path, put, writing=True)

    def _head(self, path: str) -> ObjectMeta:
        store, key = self._locate(path)
        return self._call("read", path, lambda: obstore.head(store, key))

    def _locate(self, path: str) -> tuple[S3Store, str]:
        bucket, _, key = path.lstrip("/").partition("/")
        if not bucket:
            raise StorageError(f"{self.uri(path)!r} names no bucket: S3 paths are s3://bucket/key")
        with self._stores_lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self._make_store(bucket)
        return store, key

    def _make_store(self, bucket: str) -> S3Store:
        s = self.settings
        try:
            return S3Store(
                bucket,
                config=cast("S3Config", s.config),  # names checked by s3_settings
                client_options=cast("ClientConfig", s.client_options),
                retry_config=cast("RetryConfig", s.retry_config),
            )
        except UnknownConfigurationKeyError as exc:
            raise InvalidOptionError(
                f"S3 storage option not supported by the installed obstore "
                f"{getattr(obstore, '__version__', '?')}: {_describe(exc)}"
            ) from None
        except Exception as exc:
            raise InvalidOptionError(f"bad S3 storage options: {_describe(exc)}") from None

    def _call(self, op: str, path: str, fn: Callable[[], T], *, writing: bool = False) -> T:
        """Run one obstore call; translate its failures into FileNotFoundError / StorageError."""
        uri = self.uri(path)
        try:
            return fn()
        except Exception as exc:
            no_bucket = _NO_SUCH_BUCKET in str(exc)  # not always a FileNotFoundError
            if not (no_bucket or isinstance(exc, FileNotFoundError)):
                self._raise_storage_error(op, uri, exc)
            if writing:  # a write finds no object missing, only a bucket
                bucket = path.lstrip("/").split("/", 1)[0]
                raise WriteRefusedError(
                    f"S3 {op} of {uri!r} failed: bucket {bucket!r} does not exist at endpoint "
                    f"{self.settings.endpoint} ({_describe(exc)})"
                ) from None
            what = "bucket" if no_bucket else "object"
            raise FileNotFoundError(errno.ENOENT, f"no such S3 {what}", uri) from None

    def _raise_storage_error(self, op: str, uri: str, exc: Exception) -> NoReturn:
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):
            raise WriteRefusedError(
                f"S3 {op} of {uri!r} was refused by endpoint {self.settings.endpoint} (check "
                f"the credentials: key/secret options or AWS_* variables): {_describe(exc)}"
            ) from None
        detail = _describe(exc)
        if "169.254." in detail and not self._has_credentials():
            detail += (
                "; no credentials were given, and none came from the instance metadata "
                "service: pass key/secret (or anon=true for a public bucket) or set "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
            )
        raise StorageError(
            f"S3 {op} of {uri!r} at endpoint {self.settings.endpoint} failed: {detail}"
        ) from None

    def _has_credentials(self) -> bool:
        config = self.settings.config
        given = ("access_key_id", "skip_signature", "web_identity_token_file")
        return any(config.get(k) for k in given) or "AWS_ACCESS_KEY_ID" in os.environ

    def _verify_conditional_put(self, bucket: str) -> None:
        """Prove that the server honours ``If-None-Match: *`` (put-if-absent, a swap that
        creates): create a probe object twice; the second must be refused."""

        def refused(probe: str) -> bool:
            # The first create may report "exists" after a retried PUT; only the second, on an
            # object that surely exists, tells whether the header was honoured.
            self._create(probe, b"1")
            return not self._create(probe, b"2")

        self._verify(bucket, "If-None-Match: *", refused, "concurrent commits")

    def _verify_conditional_update(self, bucket: str) -> None:
        """Prove that the server honours ``If-Match`` (a swap that replaces): write a probe
        object twice; a write conditional on the first version's ETag must be refused."""

        def refused(probe: str) -> bool:
            self.put(probe, b"1")
            _, stale = self._read_tagged(probe)
            if stale is None:
                raise StorageError(f"the probe object {self.uri(probe)!r} vanished after a PUT")
            self.put(probe, b"2")
            return not self._put_unless_changed(probe, b"3", stale)

        self._verify(bucket, "If-Match", refused, "concurrent swaps of one object")

    def _verify(
        self, bucket: str, header: str, refused: Callable[[str], bool], writers: str
    ) -> None:
        """Run the probe ``refused`` once per bucket and header, on a probe object of its own
        (deleted after). A server that ignores the condition would let ``writers`` overwrite
        each other silently, so the bucket is refused instead."""
        if (bucket, header) in self._verified:
            return
        with self._verify_lock:
            if (bucket, header) in self._verified:
                return
            probe = f"{bucket}/_carbonlite_probe/{uuid.uuid4().hex}"
            try:
                honoured = refused(probe)
            except UnsupportedStorageError:
                raise
            except StorageError as exc:
                kind = WriteRefusedError if isinstance(exc, WriteRefusedError) else StorageError
                raise kind(
                    f"could not check conditional writes on bucket {bucket!r}: {exc}"
                ) from exc
            finally:
                with contextlib.suppress(StorageError):
                    self.delete(probe)
            if not honoured:
                raise UnsupportedStorageError(
                    f"the S3 server behind bucket {bucket!r} ({self.settings.endpoint}) ignores "
                    f"conditional writes ({header}), so {writers} could overwrite each other; "
                    "CarbonLite refuses to write there"
                )
            self._verified.add((bucket, header))


def _status(bucket: str, meta: ObjectMeta) -> FileStatus:
    """An object as a listing (or a HEAD request) describes it."""
    return FileStatus(
        f"{bucket}/{meta['path']}",
        int(meta["size"]),
        meta["last_modified"].timestamp(),
        meta.get("e_tag"),
    )
