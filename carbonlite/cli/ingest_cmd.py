"""``carbonlite ingest kafka`` and ``carbonlite ingest files``: the Kafka ingester
(``carbonlite/ingest/kafka.py``) and the file ingester (``carbonlite/ingest/files.py``) as
commands."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.markup import escape

from carbonlite.cli.app import JSON_OPTION, STORAGE_OPTION, app, emit, err_console, fail_cleanly
from carbonlite.cli.values import seconds_of, storage_options_of
from carbonlite.errors import InvalidOptionError

ingest_app = typer.Typer(help="Ingest into a table without Spark.", no_args_is_help=True)
app.add_typer(ingest_app, name="ingest")


def _partitions(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise InvalidOptionError(
            f"--partitions {text!r} is not a comma-separated list of numbers such as 0,1,2"
        ) from None


class _StderrWarnings(logging.Handler):
    """A logger's warnings as ``warning: ...`` lines on stderr."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(
            f"[yellow]warning:[/yellow] {escape(record.getMessage())}",
            highlight=False,
            soft_wrap=True,
        )


@contextmanager
def _warnings_on_stderr(logger: str) -> Iterator[None]:
    """While it runs, the warnings of ``logger`` go to stderr (beside its other handlers)."""
    handler = _StderrWarnings()
    target = logging.getLogger(logger)
    target.addHandler(handler)
    try:
        yield
    finally:
        target.removeHandler(handler)


class _LiveLine:
    """A command's live progress line on a terminal (none when stderr is not one, or with
    --json)."""

    def __init__(self, as_json: bool) -> None:
        self.started = time.monotonic()
        self.live = sys.stderr.isatty() and not as_json

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def rate(self, rows: int) -> float:
        return rows / max(time.monotonic() - self.started, 1e-9)

    def show(self, text: str) -> None:
        if self.live:
            err_console.print(f"\r{text}", end="")

    def end(self) -> None:
        if self.live:
            err_console.print()


@ingest_app.command("kafka")
@fail_cleanly
def kafka(
    path: str = typer.Argument(..., help="Table path or URI (the table must exist)."),
    bootstrap_servers: str = typer.Option(..., "--bootstrap-servers", help="HOST:PORT[,...]"),
    topic: str = typer.Option(..., "--topic", help="The topic to ingest."),
    partitions: str | None = typer.Option(
        None, "--partitions", help="Comma-separated partitions (default: all of the topic's)."
    ),
    format: str = typer.Option("json", "--format", help="Message format: json."),
    max_batch_rows: int = typer.Option(
        100_000, "--max-batch-rows", help="Rows per commit, at most."
    ),
    max_latency: str = typer.Option("1s", "--max-latency", help="Commit at least this often."),
    stop_at_end: bool = typer.Option(
        False, "--stop-at-end", help="Exit 0 once every partition is ingested to its end at start."
    ),
    bad_records: str | None = typer.Option(
        None, "--bad-records", help="Table for messages that do not decode (created if missing)."
    ),
    client: str = typer.Option(
        "auto",
        "--client",
        help="Kafka client: confluent-kafka, kafka-python, or auto (the first when installed).",
    ),
    connect_timeout: str = typer.Option(
        "10s",
        "--connect-timeout",
        help="Give up (exit 1) when no broker answers within this long.",
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Ingest a Kafka topic into a table exactly once: each commit holds the rows and, in the
    same version, one transaction marker per partition (kafka:TOPIC:PARTITION = last offset),
    so a restart resumes after the last commit. Runs until SIGTERM (which finishes and commits
    the current batch) or, with --stop-at-end, until the topic's end at start."""
    from carbonlite.ingest import IngestResult, KafkaIngester

    options = storage_options_of(storage_options)
    line = _LiveLine(as_json)

    def show(result: IngestResult) -> None:
        lag = " ".join(f"{p}:{n:,}" for p, n in sorted(result.lag.items())) or "-"
        line.show(
            f"{result.rows:,} rows, {result.commits:,} commits, {line.rate(result.rows):,.0f} "
            f"rows/s, lag {lag}"
        )

    ingester = KafkaIngester(
        path,
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        partitions=_partitions(partitions),
        format=format,
        max_batch_rows=max_batch_rows,
        max_latency=seconds_of(max_latency, "--max-latency"),
        stop_at_end=stop_at_end,
        bad_records=bad_records,
        storage_options=options,
        client=client,  # type: ignore[arg-type]  # checked by the ingester
        connect_timeout=seconds_of(connect_timeout, "--connect-timeout"),
        progress=show,
    )
    result = ingester.run(handle_sigterm=True)
    line.end()
    summary = {
        "rows": result.rows,
        "bad_records": result.bad_records,
        "commits": result.commits,
        "offsets": {str(p): o for p, o in sorted(result.offsets.items())},
        "restarts": result.restarts,
        "seconds": line.seconds,
    }
    if as_json:
        emit(summary)
    else:
        offsets = ", ".join(f"{p}:{o}" for p, o in sorted(result.offsets.items())) or "none"
        print(
            f"ingested {result.rows:,} rows ({result.bad_records:,} bad records) from "
            f"{topic!r} in {result.commits:,} commits; last offsets {offsets}"
        )


@ingest_app.command("files")
@fail_cleanly
def files(
    path: str = typer.Argument(..., help="Table path or URI (the table must exist)."),
    source: str = typer.Option(
        ..., "--source", help="Directory or s3://bucket/prefix the engine writes files into."
    ),
    format: str = typer.Option(
        "parquet", "--format", help="File format: parquet, json (one object a line), csv, arrow."
    ),
    max_batch_rows: int = typer.Option(
        100_000, "--max-batch-rows", help="Rows per commit (a file is never split)."
    ),
    max_latency: str = typer.Option(
        "1s", "--max-latency", help="Commit a file at most this long after it was written."
    ),
    max_file_age: str = typer.Option(
        "7d",
        "--max-file-age",
        help="A file modified this long before the newest one counts as ingested.",
    ),
    glob: str | None = typer.Option(
        None, "--glob", help="Only files whose path below the source matches, e.g. '*.parquet'."
    ),
    stop_at_end: bool = typer.Option(
        False, "--stop-at-end", help="Exit 0 once every file there at start is ingested."
    ),
    bad_records: str | None = typer.Option(
        None, "--bad-records", help="Table for files that cannot be ingested (created if missing)."
    ),
    as_json: bool = JSON_OPTION,
    storage_options: str | None = STORAGE_OPTION,
) -> None:
    """Ingest the finished files below a directory exactly once: each commit holds the rows of
    its files and, in the same version, the record of the files ingested (files:SOURCE), so a
    restart goes on with the files not recorded. Files whose path has a part starting with '.'
    or '_', or ending in .tmp, .inprogress or ._COPYING_, are not final and never read. Runs
    until SIGTERM (which finishes and commits the current batch) or, with --stop-at-end, until
    every file there at start is ingested. A file replaced under its path is ingested as a new
    file; symbolic links in the source are never followed; each such case is a warning on
    stderr."""
    from carbonlite.ingest import FileIngester, FileIngestResult
    from carbonlite.ingest.file_notes import LOGGER_NAME

    options = storage_options_of(storage_options)
    line = _LiveLine(as_json)

    def show(result: FileIngestResult) -> None:
        line.show(
            f"{result.files:,} files, {result.rows:,} rows, {result.commits:,} commits, "
            f"{line.rate(result.rows):,.0f} rows/s, {result.pending:,} files pending"
        )

    ingester = FileIngester(
        path,
        source,
        format=format,
        storage_options=options,
        max_batch_rows=max_batch_rows,
        max_latency=seconds_of(max_latency, "--max-latency"),
        max_file_age=seconds_of(max_file_age, "--max-file-age"),
        bad_records=bad_records,
        glob=glob,
        progress=show,
    )
    with _warnings_on_stderr(LOGGER_NAME):
        result = ingester.run(stop_at_end=stop_at_end, handle_sigterm=True)
    line.end()
    summary = {
        "files": result.files,
        "rows": result.rows,
        "bad_files": result.bad_files,
        "commits": result.commits,
        "restarts": result.restarts,
        "pending": result.pending,
        "behind_horizon": result.behind_horizon,
        "replaced_files": result.replaced_files,
        "future_files": result.future_files,
        "skipped_links": result.skipped_links,
        "seconds": line.seconds,
    }
    if as_json:
        emit(summary)
    else:
        print(
            f"ingested {result.rows:,} rows from {result.files:,} files of {source!r} "
            f"({result.bad_files:,} bad files) in {result.commits:,} commits"
        )
