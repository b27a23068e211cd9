"""One local SparkSession for the whole Spark suite, and the background Spark drivers.

``local[2,2]``: two cores, and ``maxFailures=2`` so a failed task is retried even in local mode
(the task-retry test depends on it). Starting Spark takes tens of seconds and every
micro-batch about a second, so tests keep their data small and share this session.

Tests marked ``spark_job(name)`` need a driver that runs as a subprocess with its own Spark
(tests/support/spark_jobs.py). In one process, every such driver a selected test needs is
started when the session's Spark starts, so their start-up overlaps, and those tests run last
and collect the results. Under pytest-xdist (the default: ``-n 2``) every worker collects every
test but runs only some, so a driver starts when its test first asks for it and those tests
run first, each driver beside the other worker's tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.spark_jobs import JOBS, Job, start_job

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "spark_job(name): needs the background Spark driver `name` (tests/support/spark_jobs.py)",
    )


def under_xdist() -> bool:
    """True in a pytest-xdist worker."""
    return "PYTEST_XDIST_WORKER" in os.environ


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that wait for a background driver go after the other tests (their drivers were
    started with the session's Spark), or first under xdist (their drivers start with them)."""
    waiting = [i for i in items if i.get_closest_marker("spark_job") is not None]
    if waiting:
        rest = [i for i in items if i.get_closest_marker("spark_job") is None]
        items[:] = waiting + rest if under_xdist() else rest + waiting


class SparkJobs:
    """The background drivers of this session, by name."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.jobs: dict[str, Job] = {}

    def start(self, name: str) -> Job:
        if name not in self.jobs:
            self.jobs[name] = start_job(name, self.root / name)
        return self.jobs[name]

    def close(self) -> None:
        for job in self.jobs.values():
            job.kill()


@pytest.fixture(scope="session")
def spark_jobs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkJobs]:
    jobs = SparkJobs(tmp_path_factory.mktemp("spark-jobs"))
    wanted = {m.args[0] for item in request.session.items for m in item.iter_markers("spark_job")}
    unknown = wanted - set(JOBS)
    if unknown:
        raise pytest.UsageError(f"unknown spark_job names: {sorted(unknown)}")
    if not under_xdist():
        for name in sorted(wanted):
            jobs.start(name)
    yield jobs
    jobs.close()


@pytest.fixture(scope="session")
def spark(spark_jobs: SparkJobs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import carbonlite.spark

    warehouse = tmp_path_factory.mktemp("spark-warehouse")  # catalog tables' own directories
    session = carbonlite.spark.local_session(
        "local[2,2]",
        app_name="carbonlite-tests",
        config={"spark.sql.warehouse.dir": str(warehouse)},
    )
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture
def stop_queries(spark: Any) -> Iterator[None]:
    """Stops any query a test left running (after a failed assertion)."""
    yield
    for q in spark.streams.active:
        q.stop()


@pytest.fixture
def merge_on_executors(spark: Any) -> Iterator[None]:
    """Merges from Spark run on the executors whatever the source's size (a small source
    otherwise merges as ``Table.merge`` on the driver: ``CarbonMergeBuilder._on_driver``)."""
    from carbonlite.spark.merge_builder import DRIVER_SOURCE_CONF

    spark.conf.set(DRIVER_SOURCE_CONF, "0")
    yield
    spark.conf.unset(DRIVER_SOURCE_CONF)


@pytest.fixture(params=["driver", pytest.param("executors", marks=pytest.mark.slow)])
def merge_route(request: pytest.FixtureRequest, spark: Any) -> Iterator[str]:
    """A merge test run on both routes: a small source merged on the driver (the default) and
    the same merge on the executors (the slow tier: the executors' route keeps its own tests
    in the default tier, ``merge_on_executors``)."""
    from carbonlite.spark.merge_builder import DRIVER_SOURCE_CONF

    if request.param == "executors":
        spark.conf.set(DRIVER_SOURCE_CONF, "0")
    yield request.param
    spark.conf.unset(DRIVER_SOURCE_CONF)


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The jobs a delete, update or merge from Spark plans for the executors
    (``run_distributed_change``'s ``plan_change``, spied on): none when a merge runs on the
    driver."""
    import carbonlite.driver_changes

    planned: list[Any] = []
    real = carbonlite.driver_changes.plan_change

    def spy(*args: Any, **kwargs: Any) -> Any:
        job, snapshot = real(*args, **kwargs)
        planned.append(job)
        return job, snapshot

    monkeypatch.setattr(carbonlite.driver_changes, "plan_change", spy)
    return planned
