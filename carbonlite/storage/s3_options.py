"""S3 storage options: fsspec/s3fs names (and obstore's own) translated into obstore's config.

Kept apart from the backend (:mod:`carbonlite.storage.s3`) because it is pure translation: it
needs no obstore and no server, and the option names are a user-facing table of their own
(docs/STORAGE.md, "Storage options").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from carbonlite.errors import InvalidOptionError
from carbonlite.properties import parse_bool

__all__ = ["S3Settings", "s3_settings"]

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
