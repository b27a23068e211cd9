"""A Spark driver that SIGKILLs itself between the table commit and Spark's checkpoint commit.

    python -m tests.support.spark_kill_driver '{"source": ..., "table": ..., "checkpoint": ...,
                                                "kill_batch": 1, "report": "killed.json"}'

It streams the parquet files in ``source`` (``maxFilesPerTrigger=1``, ``availableNow``) into
``table`` through ``format("carbonlite_killer")``: the real CarbonLite sink, subclassed so
that right after ``commit()`` of micro-batch ``kill_batch`` has committed the table version,
the committing process writes ``report`` (its pid, process group and session) and kills the
driver with SIGKILL. Start this script with ``start_new_session=True``: the session is then
this driver and everything it started. The commit runs in a Python process forked by
pyspark's daemon, which moves itself into a process group of its own, so the committer
kills two groups: first the session's leading group (this Python driver and its JVM), then
its own (the daemon and its workers, itself included). Spark never writes ``commits/<kill_batch>`` to the checkpoint, so a restarted query
replays that batch. No hook is added to carbonlite: the subclass lives here, and Spark's
Python processes import it from this module (PYTHONPATH must hold the repository).

If the query ends without being killed, the script prints ``{"killed": false}`` and exits 3.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from carbonlite.spark.datasource import CarbonLiteDataSource
from carbonlite.spark.options import SparkOptions
from carbonlite.spark.sink import CarbonLiteStreamWriter

KILLER_FORMAT = "carbonlite_killer"


class KillingStreamWriter(CarbonLiteStreamWriter):
    """The CarbonLite stream writer, plus a SIGKILL of the driver after one batch's commit."""

    def __init__(self, options: SparkOptions, spark_schema: Any, overwrite: bool) -> None:
        super().__init__(options, spark_schema, overwrite)
        self.kill_batch = int(options.get("killAtBatch", "-1") or -1)
        self.report = options.get("killReport")

    def commit(self, messages: list[Any], batchId: int) -> None:
        super().commit(messages, batchId)
        if batchId != self.kill_batch:
            return
        session, group = os.getsid(0), os.getpgid(0)
        if self.report:
            with open(self.report, "w") as f:
                json.dump({"pid": os.getpid(), "pgid": group, "sid": session, "batch": batchId}, f)
        # The driver (Python and JVM) is the process group that leads this session: kill it
        # first, so Spark cannot go on to commit the batch in its checkpoint. This process
        # runs under pyspark's daemon, which put itself in a group of its own: kill that too.
        os.killpg(session, signal.SIGKILL)
        os.killpg(group, signal.SIGKILL)


class KillingDataSource(CarbonLiteDataSource):
    extra_options = ("killAtBatch", "killReport")

    @classmethod
    def name(cls) -> str:
        return KILLER_FORMAT

    def streamWriter(self, schema: Any, overwrite: bool) -> KillingStreamWriter:
        return KillingStreamWriter(self._options(), schema, overwrite)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import carbonlite.spark
    from tests.support.spark_data import SOURCE_DDL

    spark = carbonlite.spark.local_session(app_name="carbonlite-kill-test")
    spark.dataSource.register(KillingDataSource)
    query = (
        spark.readStream.schema(SOURCE_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(spec["source"])
        .writeStream.format(KILLER_FORMAT)
        .option("checkpointLocation", spec["checkpoint"])
        .option("killAtBatch", str(spec["kill_batch"]))
        .option("killReport", spec["report"])
        .trigger(availableNow=True)
        .start(spec["table"])
    )
    query.awaitTermination()
    print(json.dumps({"killed": False}), flush=True)
    spark.stop()
    return 3


if __name__ == "__main__":
    # Run the copy of this module imported under its real name, so Spark pickles the classes
    # above by reference (Python processes import this module) rather than as __main__ code.
    from tests.support.spark_kill_driver import main as _main

    sys.exit(_main(sys.argv[1:]))
