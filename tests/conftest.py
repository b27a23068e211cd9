"""Shared fixtures: an S3-protocol server on loopback for the whole session."""

from __future__ import annotations

import os
import sys

import pytest

# Spark's Python workers must run this interpreter, which has the project installed.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from tests.support.s3_server import S3Server, start_s3_server


@pytest.fixture(scope="session")
def s3_server() -> S3Server:
    """A real moto S3 server on 127.0.0.1 with a free port, stopped after the session."""
    server = start_s3_server()
    yield server
    server.stop()
