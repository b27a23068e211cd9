"""Start and stop a moto S3 server on loopback for tests (and benchmarks)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    endpoint_url: str
    process: subprocess.Popen[bytes]
    buckets: list[str] = field(default_factory=list)

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "key": "testing", "secret": "testing"}

    def new_bucket(self) -> str:
        import boto3

        name = f"t-{uuid.uuid4().hex[:12]}"
        boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_s3_server(timeout: float = 30.0) -> S3Server:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        raise RuntimeError(f"moto server did not listen on port {port} within {timeout}s")
    return S3Server(endpoint_url=f"http://127.0.0.1:{port}", process=process)
