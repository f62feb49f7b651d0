"""Streaming job: windowed router and address throughput over the metrics directory, live.

    python -m pipelines.streaming_job --metrics-dir DIR --out OUTDIR \
        [--checkpoint DIR] [--window 10s] [--watermark 30s] [--once] [--console] \
        [--master local[*]]

Structured Streaming over the CLOSED metrics files (``router-metrics-*.jsonl.<n>``, see
``agent.metrics_sink``): the file source reads each path once, so the file still being appended
to is left alone until the sink rotates it. The same transforms as the batch job
(``with_event_time``, ``router_throughput``, ``address_throughput``) run with a watermark on
``event_time`` and append finished windows to Parquet:
    OUTDIR/router_throughput/, OUTDIR/address_throughput/
(``--console`` prints them as well). Checkpoints default to OUTDIR/_checkpoints/<table>.

A window is written once the watermark (newest event time seen minus --watermark) passes its
end, so the newest windows wait for later data. ``--once`` processes what is there now
(trigger availableNow) and stops: testable, and usable from cron. A router closes its file
when it stops, so a stopped router's records are all read; an active file (a running router's,
or one left by a router killed without stopping) is named on stderr as not read, and --once
with no closed file at all exits 2 saying so. After --once, stderr says up to where windows
were written; records read but no window written (each window they fall in is still open:
a router that ran for less than a window plus the watermark) is exit status 3, with why.
Batch-only transforms (counter differences, top addresses, reconciliation) are not run here.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipelines import schemas, transforms as tf
from pipelines.batch_job import DOCS_EPILOG, build_session

CLOSED_FILES_GLOB = "router-metrics-*.jsonl.*"
ACTIVE_FILES_GLOB = "router-metrics-*.jsonl"
TABLES = ("router_throughput", "address_throughput")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.streaming_job", description=__doc__,
                                epilog=DOCS_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metrics-dir", required=True, help="directory the MetricsSink writes")
    p.add_argument("--out", required=True, help="output directory (Parquet tables)")
    p.add_argument("--checkpoint", default=None, help="checkpoint root (OUTDIR/_checkpoints)")
    p.add_argument("--window", default="10s", help="window width: 10s, 1m, '30 seconds'")
    p.add_argument("--watermark", default="30s", help="how late a record may arrive")
    p.add_argument("--trigger", default="10s", help="micro-batch interval when not --once")
    p.add_argument("--once", action="store_true",
                   help="process the files present now (availableNow) and stop")
    p.add_argument("--console", action="store_true", help="also print each micro-batch")
    p.add_argument("--internal", action="store_true",
                   help="keep the router's own addresses ($management, qdrouter...) in "
                        "address_throughput (left out by default, as in the batch job)")
    p.add_argument("--master", default=None, help="Spark master URL, e.g. local[*]")
    return p.parse_args(argv)


def windowed_tables(raw: DataFrame, window: str, watermark: str,
                    internal: bool = False) -> dict[str, DataFrame]:
    """The streaming tables from a raw metrics stream (pure: no sources or sinks); the
    router's own addresses only with ``internal``."""
    events = tf.with_event_time(tf.metrics_records(raw)).withWatermark("event_time", watermark)
    addresses = tf.address_throughput(events, window)
    return {"router_throughput": tf.router_throughput(events, window),
            "address_throughput": addresses if internal else tf.without_internal(addresses)}


def start(spark: SparkSession, args: argparse.Namespace) -> list[StreamingQuery]:
    raw = (spark.readStream.schema(schemas.METRICS_SCHEMA)
           .json(f"{args.metrics_dir.rstrip('/')}/{CLOSED_FILES_GLOB}"))
    tables = windowed_tables(raw, tf.window_duration(args.window),
                             tf.window_duration(args.watermark), args.internal)
    out = args.out.rstrip("/")
    checkpoints = (args.checkpoint or f"{out}/_checkpoints").rstrip("/")
    trigger = ({"availableNow": True} if args.once
               else {"processingTime": tf.window_duration(args.trigger)})
    queries = []
    for name in TABLES:
        queries.append(tables[name].writeStream.queryName(name).format("parquet")
                       .outputMode("append").option("path", f"{out}/{name}")
                       .option("checkpointLocation", f"{checkpoints}/{name}")
                       .trigger(**trigger).start())
        if args.console:
            queries.append(tables[name].writeStream.queryName(f"{name}_console")
                           .format("console").outputMode("append")
                           .option("truncate", "false")
                           .option("checkpointLocation", f"{checkpoints}/{name}_console")
                           .trigger(**trigger).start())
    return queries


def written_rows(spark: SparkSession, out: str) -> Optional[int]:
    """Rows in the output tables now (through the file sink's log); None where unknown."""
    total = 0
    for name in TABLES:
        path = f"{out.rstrip('/')}/{name}"
        if "://" not in path and not Path(path).is_dir():
            continue
        try:
            total += spark.read.parquet(path).count()
        except Exception:  # noqa: BLE001 - an unreadable table: say nothing rather than guess
            return None
    return total


def once_report(queries: Sequence[StreamingQuery], out: str,
                written: Optional[int]) -> tuple[int, str]:
    """After --once: (exit status, what to say). ``written``: rows this run added to the
    tables (None: unknown). Records read but no window written (every window they fall in
    ends after the watermark: a router that ran for less than a window and a watermark, say)
    is status 3; nothing new to read, or windows written, is 0."""
    read = 0
    marks = set()
    for q in queries:
        if q.name not in TABLES:
            continue  # the --console copies
        for progress in q.recentProgress:
            read += progress.get("numInputRows") or 0
            mark = (progress.get("eventTime") or {}).get("watermark")
            if mark:
                marks.add(mark)
    mark = max(marks) if marks else "none yet"
    if not read:
        return 0, "no new records since the last run (checkpoints: --checkpoint)"
    if written == 0:
        return 3, (f"read {read} records but wrote no window: each window they fall in ends "
                   f"after the watermark ({mark}: the newest event time minus --watermark), "
                   f"so it waits for newer records; pipelines.batch_job computes every window "
                   f"of the files now")
    return 0, (f"windows ending by {mark} written to {out}; later ones are written when newer "
               f"records arrive (--watermark)")


def local_files(metrics_dir: str) -> Optional[tuple[list[str], list[str]]]:
    """(closed files, active files) in a local metrics directory; None for a URL (hdfs://...:
    Spark lists those itself)."""
    if "://" in metrics_dir and not metrics_dir.startswith("file://"):
        return None
    base = Path(metrics_dir.replace("file://", "", 1))
    return (sorted(p.name for p in base.glob(CLOSED_FILES_GLOB)),
            sorted(p.name for p in base.glob(ACTIVE_FILES_GLOB)))


def check_input(args: argparse.Namespace) -> Optional[str]:
    """Name the active files left alone (on stderr); why --once has nothing to read (None:
    it has something, or the directory is a URL)."""
    found = local_files(args.metrics_dir)
    if found is None:
        return None
    closed, active = found
    if active:
        print(f"streaming_job: not read: {', '.join(active)} (still being written by its "
              f"router, or left by one that did not stop cleanly; a router that stops closes "
              f"its file; pipelines.batch_job reads every file)", file=sys.stderr)
    if args.once and not closed:
        return (f"no closed metrics files ({CLOSED_FILES_GLOB}) in {args.metrics_dir}: "
                f"nothing to process" + (" (see above)" if active else ""))
    return None


def main(argv: Optional[Sequence[str]] = None, spark: Optional[SparkSession] = None,
         timeout_s: Optional[float] = None) -> int:
    """Run until stopped (or, with --once, until the present files are processed).

    With ``spark`` given (tests), use that session and leave it running; ``timeout_s`` bounds
    the wait for each query (an unfinished query is stopped and reported as an error)."""
    args = parse_args(argv)
    problem = check_input(args)
    if problem:
        print(f"streaming_job: {problem}", file=sys.stderr)
        return 2
    own = spark is None
    session = spark or build_session(args.master, "router-metrics-streaming")
    queries: list[StreamingQuery] = []
    try:
        before = written_rows(session, args.out) if args.once else None
        queries = start(session, args)
        for q in queries:
            finished = q.awaitTermination(timeout_s) if timeout_s else q.awaitTermination()
            if finished is False:
                print(f"streaming_job: {q.name} still running after {timeout_s}s",
                      file=sys.stderr)
                return 1
        if args.once:
            after = written_rows(session, args.out) if before is not None else None
            status, text = once_report(queries, args.out,
                                       None if after is None else after - before)
            print(f"streaming_job: {text}", file=sys.stderr)
            return status
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
        if own:
            session.stop()


if __name__ == "__main__":
    sys.exit(main())
