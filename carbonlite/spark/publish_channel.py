"""What ``carbonlite.spark.publish`` hands the Spark publish writer and gets back from it.

Spark runs a Python data source's writer and its commit in worker processes, not in the
process that called ``df.write``, and passes them only string options. So the state tables
are written first (as the files their ``storeState`` actions will name) and passed as a JSON
option, and the commit leaves its :class:`PublishResult` in a small file under
``_carbonlite/publish/`` that the caller reads back and deletes.
"""

from __future__ import annotations

import json
from typing import Any

from carbonlite.errors import CarbonLiteError, InvalidOptionError
from carbonlite.metadata import StateStored
from carbonlite.metadata.serde import state_from_json, state_to_json
from carbonlite.storage import Storage, open_storage
from carbonlite.writer.partition_rows import partition_spec
from carbonlite.writer.publish import PublishResult
from carbonlite.writer.write_plan import WritePlan

__all__ = ["RESULT_DIR", "load_result", "save_result", "states_from_option", "states_option"]

RESULT_DIR = "_carbonlite/publish"


def states_option(states: tuple[StateStored, ...]) -> str:
    return json.dumps([state_to_json(s) for s in states])


def states_from_option(text: str | None) -> tuple[StateStored, ...]:
    if not text:
        return ()
    try:
        return tuple(state_from_json(obj["name"], obj) for obj in json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidOptionError(
            f"option publishState is not a list of stored states: {exc}"
        ) from None


def _path(storage: Storage, root: str, token: str) -> str:
    if not token.isalnum():
        raise InvalidOptionError(f"option publishToken must be letters and digits, not {token!r}")
    return storage.join(root, RESULT_DIR, f"{token}.json")


def save_result(plan: WritePlan, token: str, result: PublishResult) -> None:
    """Leave ``result`` for the caller of ``carbonlite.spark.publish`` (driver side)."""
    from carbonlite.create import open_table

    storage, root = open_storage(plan.uri, plan.storage_options or None)
    spec = partition_spec(
        open_table(plan.uri, storage_options=plan.storage_options or None).snapshot().metadata
    )
    body = {
        "version": result.version,
        **{
            name: [spec.value_to_json(v) for v in getattr(result, name)]
            for name in ("added", "changed", "unchanged", "deleted")
        },
    }
    storage.put(_path(storage, root, token), json.dumps(body).encode())


def load_result(table: Any, token: str) -> PublishResult:
    """The result the publish ``token`` left, removed from storage."""
    path = _path(table.storage, table.root, token)
    try:
        body = json.loads(table.storage.read(path))
    except FileNotFoundError:
        raise CarbonLiteError(
            f"the Spark publish into {table.path!r} finished without leaving its result"
        ) from None
    table.storage.delete(path)
    spec = partition_spec(table.refresh().snapshot().metadata)
    values = {
        name: [spec.value_from_json(list(v)) for v in body[name]]
        for name in ("added", "changed", "unchanged", "deleted")
    }
    return PublishResult(body["version"], **values)
