"""Shared fixtures: an S3-protocol server on loopback for the whole session."""

from __future__ import annotations

import os
import sys

import pytest

# Spark's Python workers must run this interpreter, which has the project installed.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from carbonlite.metadata import post_commit
from tests.support.places import Place
from tests.support.s3_server import S3Server, start_s3_server

# Checkpoints are written before commit() returns in this process, so what a test observes
# after a commit does not depend on a background thread's timing (processes the tests start
# keep the default, "background"; tests/metadata/test_post_commit.py covers that mode here).
post_commit.default_mode = "inline"


@pytest.fixture(scope="session")
def s3_server() -> S3Server:
    """A real moto S3 server on 127.0.0.1 with a free port, stopped after the session."""
    server = start_s3_server()
    yield server
    server.stop()


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def place(request: pytest.FixtureRequest, tmp_path) -> Place:
    """Run the test on local storage and on S3 (the moto server)."""
    if request.param == "local":
        return Place("local", str(tmp_path), None)
    server = request.getfixturevalue("s3_server")
    return Place("s3", f"s3://{server.new_bucket()}", server.storage_options)
