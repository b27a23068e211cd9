from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from carbonlite.storage import Storage, open_storage


class Backend:
    """A storage under test, rooted in a fresh directory."""

    def __init__(self, name: str, uri: str, options: dict[str, Any] | None) -> None:
        self.name = name
        self.uri = uri
        self.options = options
        self.storage: Storage
        self.storage, self.root = open_storage(uri, options)

    def path(self, *parts: str) -> str:
        return self.storage.join(self.root, *parts)


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    if request.param == "local":
        yield Backend("local", str(tmp_path / "root"), None)
    elif request.param == "memory":
        yield Backend("memory", f"memory://conformance-{uuid.uuid4().hex}", None)
    else:
        server = request.getfixturevalue("s3_server")
        bucket = server.new_bucket()
        yield Backend("s3", f"s3://{bucket}/root", server.storage_options)
