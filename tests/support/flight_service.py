"""A real ``carbonlite serve`` process on 127.0.0.1 (a free port), and a Flight client of it.

with ServiceProcess(root, "--flush-interval", "0.2") as service:
    client = service.client()
    ack = put(client, "events", "producer-1", 0, rows)
    ...
    service.kill()      # SIGKILL
    service.start()     # the same root and options, a new process (it replays its log)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

__all__ = ["ServiceProcess", "files_of", "health", "put", "read_all", "wait_for"]


def _command() -> list[str]:
    found = shutil.which("carbonlite")
    if found is None:
        found = os.path.join(os.path.dirname(sys.executable), "carbonlite")
    return [found]


class ServiceProcess:
    """``carbonlite serve ROOT --port 0 ...``; the port it printed; its stderr kept."""

    def __init__(self, root: str, *options: str, token: str | None = None) -> None:
        self.root = root
        self.options = list(options) + (["--auth-token", token] if token else [])
        self.token = token
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.stderr: list[str] = []
        self._drains: list[threading.Thread] = []

    def start(self, timeout: float = 30) -> ServiceProcess:
        self.proc = subprocess.Popen(
            [*_command(), "serve", self.root, "--port", "0", *self.options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        drain = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        drain.start()
        self._drains.append(drain)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            found = re.search(rb"on grpc://[^:]+:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                return self
        raise AssertionError(
            f"the service did not start ({line!r}; exit {self.proc.poll()}):\n"
            + "".join(self.stderr)
        )

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        # the one reader of the process's stderr (a second reader would take lines from it)
        assert proc.stderr is not None
        for raw in proc.stderr:
            self.stderr.append(raw.decode(errors="replace"))

    def client(self, token: str | None = None) -> flight.FlightClient:
        return flight.FlightClient(f"grpc://127.0.0.1:{self.port}")

    def options_for(self, token: str | None) -> flight.FlightCallOptions:
        given = token if token is not None else self.token
        headers = [(b"authorization", f"Bearer {given}".encode())] if given else []
        return flight.FlightCallOptions(headers=headers)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM; the exit code, once everything the process wrote to stderr is kept."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        for drain in self._drains:
            drain.join(timeout)
        return code

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def put(
    client: flight.FlightClient,
    table: str,
    producer: str,
    sequence: int,
    rows: pa.Table,
    options: flight.FlightCallOptions | None = None,
) -> dict[str, Any]:
    """One DoPut; the service's answer (``{"version", "skipped"}``)."""
    command = json.dumps({"table": table, "producer_id": producer, "sequence": sequence})
    descriptor = flight.FlightDescriptor.for_command(command)
    writer, reader = client.do_put(descriptor, rows.schema, options=options)
    writer.write_table(rows)
    writer.done_writing()
    answer = reader.read()
    writer.close()
    assert answer is not None, "the service sent no PutResult"
    return json.loads(answer.to_pybytes())


def read_all(
    client: flight.FlightClient,
    descriptor: flight.FlightDescriptor,
    options: flight.FlightCallOptions | None = None,
) -> pa.Table:
    """GetFlightInfo, then DoGet of every endpoint, concatenated."""
    info = client.get_flight_info(descriptor, options=options)
    parts = [client.do_get(e.ticket, options=options).read_all() for e in info.endpoints]
    return pa.concat_tables(parts) if parts else info.schema.empty_table()


def health(
    client: flight.FlightClient, options: flight.FlightCallOptions | None = None
) -> dict[str, Any]:
    """The healthcheck action's answer."""
    results = list(client.do_action(flight.Action("healthcheck", b""), options=options))
    assert len(results) == 1, results
    return json.loads(results[0].body.to_pybytes())


def wait_for(condition: Any, what: str, timeout: float = 30) -> None:
    """Poll ``condition()`` until it is true; fail saying ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def files_of(directory: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``directory`` (links not followed) and its bytes, by relative path,
    and every directory (``path/``, no bytes): compare two of these to show nothing under it
    changed."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), directory) + "/"] = b""
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out
