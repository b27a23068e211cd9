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

obstore retries failed requests itself (connection errors and 5xx answers; a few times, see
``_DEFAULT_RETRY``). A conditional PUT that reached the server but whose answer was lost can
therefore be retried and come back as "already exists", so put-if-absent reports False for an
object this very call created. That is deliberate at this layer: the log recognises its own
commit by the commit id inside the version file, which it reads back when it loses a race.

Errors: a missing object (or bucket, when reading) is ``FileNotFoundError``, as everywhere
in storage; every other failure, including an unreachable endpoint, is a
:class:`~carbonlite.errors.StorageError` naming the URI and the endpoint. No obstore
exception escapes. Options are translated by :func:`s3_settings`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast
from urllib.parse import urlsplit

from carbonlite.errors import (
    InvalidOptionError,
    StorageError,
    UnsupportedStorageError,
    WriteRefusedError,
)
from carbonlite.properties import parse_bool
from carbonlite.storage.base import (
    Appender,
    BufferedObjectAppender,
    FileStatus,
    RangeReader,
    Storage,
)

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
    from obstore import ObjectMeta
    from obstore.store import ClientConfig, RetryConfig, S3Config

__all__ = ["S3Settings", "S3Storage", "s3_settings"]

T = TypeVar("T")


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


_FSSPEC_NAMES = {  # fsspec/s3fs name -> obstore S3Config name
    "endpoint_url": "endpoint",
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "region": "region",
    "anon": "skip_signature",
    "requester_pays": "request_payer",
}
_CLIENT_KWARGS = {  # s3fs client_kwargs (boto3 client arguments) -> top-level name
    "endpoint_url": "endpoint_url",
    "region_name": "region",
    "aws_access_key_id": "key",
    "aws_secret_access_key": "secret",
    "aws_session_token": "token",
}
_IGNORED = _names(  # fsspec cache knobs: obstore keeps no cache, so they mean nothing here
    "use_listings_cache listings_expiry_time skip_instance_cache default_block_size "
    "default_fill_cache default_cache_type cache_regions"
)
_S3_CONFIG = _names(  # obstore's S3Config; "bucket" comes from the path, never an option
    "access_key_id aws_endpoint_url_s3 checksum_algorithm conditional_put "
    "container_authorization_token_file container_credentials_full_uri "
    "container_credentials_relative_uri copy_if_not_exists default_region "
    "disable_bulk_delete disable_tagging endpoint imdsv1_fallback metadata_endpoint "
    "region request_payer role_arn role_session_name s3_express secret_access_key "
    "server_side_encryption session_token skip_signature sse_bucket_key_enabled "
    "sse_customer_key_base64 sse_kms_key_id sts_endpoint unsigned_payload "
    "virtual_hosted_style_request web_identity_token_file"
)
_CLIENT_OPTIONS = _names(  # obstore's ClientConfig
    "allow_http allow_invalid_certificates connect_timeout default_content_type "
    "default_headers http1_only http2_keep_alive_interval http2_keep_alive_timeout "
    "http2_keep_alive_while_idle http2_only pool_idle_timeout pool_max_idle_per_host "
    "proxy_ca_certificate proxy_excludes proxy_url randomize_addresses read_timeout "
    "root_certificate timeout user_agent"
)
_BOOL_CLIENT_OPTIONS = ("allow_http", "allow_invalid_certificates", "http1_only", "http2_only")

_RANGE_NOT_SATISFIABLE = re.compile(r"status code: 416\b|<Code>InvalidRange</Code>")
_DEFAULT_REGION = "us-east-1"
_MAX_RETRY_SECONDS = 86_400.0
"""The longest ``retry_timeout``: a day (a timedelta past ~10^9 days cannot even be made)."""
_DEFAULT_CLIENT: dict[str, Any] = {
    # Fail fast on an endpoint that does not answer; a whole request (one blocklet range, or
    # one 5 MiB part of a large PUT) gets two minutes.
    "connect_timeout": "3s",
    "timeout": "120s",
}
_DEFAULT_RETRY: dict[str, Any] = {
    "max_retries": 3,
    "retry_timeout": timedelta(seconds=30),
    "backoff": {
        "init_backoff": timedelta(milliseconds=100),
        "max_backoff": timedelta(seconds=2),
        "base": 2,
    },
}


@dataclass(frozen=True, slots=True)
class S3Settings:
    """What :func:`s3_settings` makes of the storage options: obstore's three argument sets."""

    config: dict[str, Any]
    client_options: dict[str, Any]
    retry_config: dict[str, Any]
    endpoint: str
    """The endpoint requests go to, for messages."""


def s3_settings(storage_options: Mapping[str, Any] | None) -> S3Settings:
    """Translate storage options (fsspec/s3fs names, or obstore's own) into obstore's config.

    Names are case-insensitive (Spark lower-cases them); values may be strings ("true").

    ==========================================  =============================================
    given                                       obstore
    ==========================================  =============================================
    ``endpoint_url``                            ``endpoint``; an ``http://`` endpoint also
                                                sets ``client_options.allow_http``
    ``key`` / ``secret`` / ``token``            ``access_key_id`` / ``secret_access_key`` /
                                                ``session_token``
    ``region``                                  ``region`` (default ``us-east-1`` when neither
                                                an option nor ``AWS_REGION`` /
                                                ``AWS_DEFAULT_REGION`` gives one)
    ``anon``                                    ``skip_signature`` (unsigned requests)
    ``requester_pays``                          ``request_payer``
    ``use_ssl=False``                           ``allow_http``; ``http://`` for an endpoint
                                                given without a scheme
    ``client_kwargs={"region_name", "endpoint_url", "aws_access_key_id",
    "aws_secret_access_key", "aws_session_token", "verify", "use_ssl"}``
                                                as above; ``verify=False`` is
                                                ``allow_invalid_certificates``
    ``config_kwargs={"s3": {"addressing_style"}}``
                                                ``virtual_hosted_style_request``
                                                (``"virtual"``; default: path style)
    fsspec cache knobs (``use_listings_cache``, ignored: obstore keeps no cache
    ``skip_instance_cache``, ``default_block_size``, ...)
    obstore ``S3Config`` names (also with an    as given (``bucket`` excepted: it is the
    ``aws_`` prefix, e.g. ``aws_endpoint``)     first part of the path)
    obstore ``ClientConfig`` names              ``client_options`` (e.g. ``connect_timeout``,
    (``allow_http``, ``timeout``, ...) or a     ``timeout``, ``proxy_url``)
    ``client_options`` mapping (or JSON text)
    ``max_retries``, ``retry_timeout``          ``retry_config`` (``retry_timeout`` in
                                                seconds)
    ==========================================  =============================================

    Defaults: connect timeout 3 s, request timeout 120 s, 3 retries within 30 s (backoff
    0.1-2 s), so an unreachable endpoint fails in seconds. Anything else is an
    :class:`~carbonlite.errors.InvalidOptionError` naming the option and the valid names.
    """
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    retry: dict[str, Any] = {**_DEFAULT_RETRY, "backoff": dict(_DEFAULT_RETRY["backoff"])}
    use_ssl: bool | None = None
    for given, key, value in _flat_options(storage_options or {}):
        if key in _IGNORED:
            continue
        name = _FSSPEC_NAMES.get(key, key)
        if key.startswith("aws_") and key[4:] in _S3_CONFIG:
            name = key[4:]
        if name in _S3_CONFIG:
            if name in config:
                raise InvalidOptionError(
                    f"S3 storage options set {name!r} twice (again: {given!r})"
                )
            bool_name = key in ("anon", "requester_pays")
            config[name] = _as_bool(given, value) if bool_name else value
        elif key == "use_ssl":
            use_ssl = _as_bool(given, value)
        elif key == "client_options":
            client.update({str(k).lower(): v for k, v in _as_mapping(given, value).items()})
        elif key in _CLIENT_OPTIONS:
            client[key] = value
        elif key == "max_retries":
            retry["max_retries"] = _as_number(given, value, int)
        elif key == "retry_timeout":
            seconds = _as_number(given, value, float)
            if not 0 <= seconds <= _MAX_RETRY_SECONDS:  # nan too
                raise InvalidOptionError(
                    f"S3 storage option {given}={value!r} must be a number of seconds from 0 "
                    f"to {_MAX_RETRY_SECONDS:g} (a day)"
                )
            retry["retry_timeout"] = timedelta(seconds=seconds)
        else:
            _unknown(given)

    for name in _BOOL_CLIENT_OPTIONS:
        if name in client:
            client[name] = _as_bool(name, client[name])
    endpoint = config.get("aws_endpoint_url_s3") or config.get("endpoint")
    if endpoint is not None:
        _check_endpoint(endpoint)
    if endpoint is not None and "://" not in str(endpoint):
        endpoint = f"{'http' if use_ssl is False else 'https'}://{endpoint}"
        config["aws_endpoint_url_s3" if "aws_endpoint_url_s3" in config else "endpoint"] = endpoint
    if endpoint is None:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        endpoint = endpoint or os.environ.get("AWS_ENDPOINT")
    plain_http = use_ssl is False or str(endpoint or "").startswith("http://")
    if plain_http and "allow_http" not in client:
        client["allow_http"] = True
    region = config.get("region") or config.get("default_region")
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        config["region"] = region = _DEFAULT_REGION
    return S3Settings(
        config=config,
        client_options={**_DEFAULT_CLIENT, **client},
        retry_config=retry,
        endpoint=str(endpoint or f"https://s3.{region}.amazonaws.com"),
    )


def _check_endpoint(endpoint: object) -> None:
    """An endpoint is ``[http[s]://]HOST[:PORT][/PATH]``: text without spaces, and a port
    that is a number, so a typo fails here and not as a request to a mangled address."""
    text = endpoint if isinstance(endpoint, str) else ""
    try:
        parts = urlsplit(text if "://" in text else f"https://{text}")
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if (
        parts is None
        or not port_ok
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or re.search(r"\s", text)
    ):
        raise InvalidOptionError(
            f"S3 storage option endpoint_url={endpoint!r} is not an endpoint such as "
            "'http://127.0.0.1:9000' or 'https://s3.eu-west-1.amazonaws.com'"
        )


def _flat_options(options: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """``(name as given, lower-case name, value)``, with s3fs's boto3 ``client_kwargs`` and
    ``config_kwargs`` unpacked into the equivalent top-level names."""
    for given, value in options.items():
        key = str(given).lower()
        if key == "client_kwargs":
            for sub, sub_value in _as_mapping(given, value).items():
                sub_key, label = str(sub).lower(), f"client_kwargs.{sub}"
                if sub_key in _CLIENT_KWARGS:
                    yield label, _CLIENT_KWARGS[sub_key], sub_value
                elif sub_key == "verify":
                    yield label, "allow_invalid_certificates", not _as_bool(label, sub_value)
                elif sub_key == "use_ssl":
                    yield label, "use_ssl", sub_value
                else:
                    _unknown(label, [*_CLIENT_KWARGS, "verify", "use_ssl"])
        elif key == "config_kwargs":
            for sub, sub_value in _as_mapping(given, value).items():
                style = _as_mapping(f"config_kwargs.{sub}", sub_value) if sub == "s3" else None
                if style is None or set(style) - {"addressing_style"}:
                    _unknown(f"config_kwargs.{sub}", ["s3.addressing_style"])
                virtual = str(style.get("addressing_style", "path")).lower() == "virtual"
                yield "config_kwargs.s3.addressing_style", "virtual_hosted_style_request", virtual
        else:
            yield str(given), key, value


def _unknown(name: str, valid: list[str] | None = None) -> NoReturn:
    if valid is not None:
        names = ", ".join(sorted(valid))
    else:
        fsspec = [*_FSSPEC_NAMES, "use_ssl", "client_kwargs", "config_kwargs"]
        client = [*sorted(_CLIENT_OPTIONS), "client_options", "max_retries", "retry_timeout"]
        names = (
            f"fsspec/s3fs names {', '.join(fsspec)}; obstore S3Config names (also with an "
            f"'aws_' prefix) {', '.join(sorted(_S3_CONFIG))}; obstore client names "
            f"{', '.join(client)}"
        )
    raise InvalidOptionError(f"unknown S3 storage option {name!r}; valid names: {names}")


def _as_bool(name: str, value: Any) -> bool:
    try:
        return parse_bool(value)
    except ValueError:
        raise InvalidOptionError(
            f"S3 storage option {name}={value!r} must be true or false"
        ) from None


def _as_number(name: str, value: Any, kind: Callable[[str], T]) -> T:
    try:
        return kind(str(value))
    except ValueError:
        raise InvalidOptionError(f"S3 storage option {name}={value!r} must be a number") from None


def _as_mapping(name: str, value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):  # Spark gives every value as text
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidOptionError(
                f"S3 storage option {name} is not a JSON object: {exc}"
            ) from None
    if not isinstance(value, Mapping):
        raise InvalidOptionError(f"S3 storage option {name} must be a mapping, got {value!r}")
    return value


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
        self._verified_buckets: set[str] = set()
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
        out = [
            FileStatus(f"{bucket}/{m['path']}", int(m["size"]), m["last_modified"].timestamp())
            for m in metas
        ]
        out.sort(key=lambda s: s.path)
        return out

    # --- writing -----------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self._verify_conditional_put(path.split("/", 1)[0])
        return self._create(path, data)

    def put(self, path: str, data: bytes) -> None:
        store, key = self._locate(path)
        self._call("write", path, lambda: obstore.put(store, key, bytes(data)), writing=True)

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
            no_bucket = "<Code>NoSuchBucket</Code>" in str(exc)  # not always a FileNotFoundError
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
        if bucket in self._verified_buckets:
            return
        with self._verify_lock:
            if bucket in self._verified_buckets:
                return
            probe = f"{bucket}/_carbonlite_probe/{uuid.uuid4().hex}"
            try:
                # The first create may report "exists" after a retried PUT; only the second,
                # on an object that surely exists, tells whether the header was honoured.
                self._create(probe, b"1")
                honoured = not self._create(probe, b"2")
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
                    "conditional writes (If-None-Match: *), so concurrent commits could "
                    "overwrite each other; CarbonLite refuses to write there"
                )
            self._verified_buckets.add(bucket)
