"""The S3 backend beyond the shared contract: option names, errors, and a table on moto."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import carbonlite as cl
from carbonlite.errors import (
    InvalidOptionError,
    StorageError,
    UnsupportedStorageError,
    WriteRefusedError,
)
from carbonlite.spark.options import SparkOptions
from carbonlite.storage import open_storage
from carbonlite.storage.s3 import S3Storage, s3_settings
from tests.support import REPO
from tests.support.s3_server import S3Server, free_port
from tests.support.tables import EVENTS, events, rows

_AWS_ENV = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _AWS_ENV:
        monkeypatch.delenv(name, raising=False)


# --- options -------------------------------------------------------------------------------


def test_fsspec_names_become_obstore_config(clean_env: None) -> None:
    s = s3_settings(
        {"endpoint_url": "http://127.0.0.1:9000", "key": "k", "secret": "s", "token": "t"}
    )
    assert s.config == {
        "endpoint": "http://127.0.0.1:9000",
        "access_key_id": "k",
        "secret_access_key": "s",
        "session_token": "t",
        "region": "us-east-1",
    }
    assert s.client_options["allow_http"] is True
    assert s.client_options["connect_timeout"] == "3s"
    assert s.retry_config["max_retries"] == 3
    assert s.endpoint == "http://127.0.0.1:9000"


def test_https_endpoint_does_not_allow_http(clean_env: None) -> None:
    s = s3_settings({"endpoint_url": "https://minio.example:9000", "region": "eu-west-1"})
    assert "allow_http" not in s.client_options
    assert s.config == {"endpoint": "https://minio.example:9000", "region": "eu-west-1"}


def test_client_kwargs_config_kwargs_and_flags(clean_env: None) -> None:
    s = s3_settings(
        {
            "client_kwargs": {
                "region_name": "eu-central-1",
                "endpoint_url": "minio:9000",
                "verify": False,
            },
            "use_ssl": "false",
            "anon": "true",
            "requester_pays": True,
            "config_kwargs": {"s3": {"addressing_style": "virtual"}},
            "use_listings_cache": False,  # an fsspec cache knob: accepted, means nothing
        }
    )
    assert s.config == {
        "region": "eu-central-1",
        "endpoint": "http://minio:9000",
        "skip_signature": True,
        "request_payer": True,
        "virtual_hosted_style_request": True,
    }
    assert s.client_options["allow_http"] is True
    assert s.client_options["allow_invalid_certificates"] is True


def test_obstore_names_are_accepted_as_given(clean_env: None) -> None:
    s = s3_settings(
        {
            "AWS_ENDPOINT": "http://h:1",
            "access_key_id": "k",
            "aws_secret_access_key": "s",
            "virtual_hosted_style_request": "false",
            "connect_timeout": "1s",
            "client_options": '{"timeout": "10s"}',  # Spark gives JSON text
            "max_retries": "5",
            "retry_timeout": "7.5",
        }
    )
    assert s.config == {
        "endpoint": "http://h:1",
        "access_key_id": "k",
        "secret_access_key": "s",
        "virtual_hosted_style_request": "false",
        "region": "us-east-1",
    }
    assert s.client_options == {
        "connect_timeout": "1s",
        "timeout": "10s",
        "allow_http": True,
    }
    assert s.retry_config["max_retries"] == 5
    assert s.retry_config["retry_timeout"] == timedelta(seconds=7.5)


def test_region_from_the_environment_is_not_overridden(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    s = s3_settings({})
    assert "region" not in s.config  # obstore reads AWS_REGION itself
    assert s.endpoint == "https://s3.ap-south-1.amazonaws.com"


def test_spark_storage_options_translate(clean_env: None) -> None:
    options = SparkOptions(
        {"storage.endpoint_url": "http://127.0.0.1:9", "storage.Key": "k", "storage.secret": "s"}
    ).storage_options
    s = s3_settings(options)
    assert s.config["endpoint"] == "http://127.0.0.1:9"
    assert s.config["access_key_id"] == "k"
    assert s.config["secret_access_key"] == "s"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"endpoint": "http://h", "bogus": 1}, "'bogus'"),
        ({"bucket": "b"}, "'bucket'"),  # comes from the path
        ({"client_kwargs": {"retries": 3}}, "'client_kwargs.retries'"),
        ({"config_kwargs": {"connect_timeout": 3}}, "'config_kwargs.connect_timeout'"),
    ],
)
def test_unknown_option_names_itself_and_the_valid_ones(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidOptionError, match="unknown S3 storage option") as info:
        open_storage("s3://b/t", options)
    message = str(info.value)
    assert named in message
    if "." not in named:
        assert "endpoint_url" in message
        assert "access_key_id" in message


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"anon": "maybe"}, "anon='maybe' must be true or false"),
        ({"key": "a", "access_key_id": "b"}, "set 'access_key_id' twice"),
        ({"client_kwargs": "{nope"}, "client_kwargs is not a JSON object"),
        ({"max_retries": "many"}, "max_retries='many' must be a number"),
    ],
)
def test_bad_option_values_are_refused(options: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        s3_settings(options)


# --- errors --------------------------------------------------------------------------------


def test_unreachable_endpoint_is_a_storage_error_in_seconds() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    storage = S3Storage({"endpoint_url": endpoint, "key": "k", "secret": "s"})
    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        storage.exists("bucket/t/x.json")
    assert time.monotonic() - started < 20
    message = str(info.value)
    assert "'s3://bucket/t/x.json'" in message
    assert endpoint in message
    assert "Connection refused" in message
    assert "Debug source" not in message
    assert info.value.__cause__ is None and info.value.__context__ is not None


def test_open_table_on_unreachable_endpoint_fails_fast() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    options = {"endpoint_url": endpoint, "key": "k", "secret": "s"}  # no credential lookup
    started = time.monotonic()
    with pytest.raises(cl.CarbonLiteError, match=re.escape(f"at endpoint {endpoint} failed")):
        cl.open_table("s3://bucket/t", storage_options=options)
    assert time.monotonic() - started < 20


def test_import_carbonlite_does_not_import_obstore() -> None:
    code = "import sys, carbonlite, carbonlite.storage; sys.exit('obstore' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_missing_obstore_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "carbonlite.storage.s3")
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore -> ImportError
    with pytest.raises(UnsupportedStorageError, match=r"pip install 'carbonlite\[s3\]'"):
        open_storage("s3://b/t", {"key": "only-for-this-test"})


# --- against moto --------------------------------------------------------------------------


@pytest.mark.s3
def test_missing_bucket(s3_server: S3Server) -> None:
    storage = S3Storage(s3_server.storage_options)
    assert not storage.exists("no-such-bucket/x")
    with pytest.raises(FileNotFoundError, match="no such S3 bucket"):
        storage.read("no-such-bucket/x")
    assert storage.list("no-such-bucket/t") == []
    with pytest.raises(StorageError, match=r"bucket 'no-such-bucket' does not exist") as info:
        storage.put("no-such-bucket/x", b"1")
    assert not isinstance(info.value, UnsupportedStorageError)
    with pytest.raises(WriteRefusedError, match="could not check conditional writes"):
        storage.put_if_absent("no-such-bucket/x", b"1")


@pytest.mark.s3
def test_creating_a_table_in_a_missing_bucket_is_refused_not_uncertain(s3_server) -> None:
    """Nothing can land in a bucket that does not exist: a plain StorageError, never the
    CommitStateUnknownError of a write whose outcome cannot be told."""
    with pytest.raises(WriteRefusedError, match="does not exist") as info:
        cl.create_table(
            "s3://no-such-bucket/t",
            pa.schema([("id", pa.int64())]),
            storage_options=s3_server.storage_options,
        )
    assert not isinstance(info.value, cl.CommitStateUnknownError)


@pytest.mark.s3
def test_reads_past_the_end_and_pickling(s3_server: S3Server) -> None:
    storage = S3Storage(s3_server.storage_options)
    bucket = s3_server.new_bucket()
    storage.put(f"{bucket}/a", b"hello")
    assert storage.read(f"{bucket}/a", 5) == b""
    assert storage.read(f"{bucket}/a", 7, 9) == b""
    assert storage.read(f"{bucket}/a", 3, 99) == b"lo"
    copy = pickle.loads(pickle.dumps(storage))
    assert copy.read(f"{bucket}/a") == b"hello"
    assert copy.put_if_absent(f"{bucket}/a", b"again") is False


@pytest.mark.s3
def test_a_table_round_trips_on_s3(s3_server: S3Server) -> None:
    uri = f"s3://{s3_server.new_bucket()}/events"
    options = s3_server.storage_options
    t = cl.create_table(uri, EVENTS, storage_options=options)
    t.append(events(0, 100))
    t.append(events(100, 50))
    again = cl.open_table(uri, storage_options=options)
    assert rows(again.to_arrow()) == rows(events(0, 150))
    assert rows(again.to_arrow(version=1)) == rows(events(0, 100))
    assert again.count_rows() == 150
    with pytest.raises(cl.TableExistsError):
        cl.create_table(uri, EVENTS, storage_options=options)
