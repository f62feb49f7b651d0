"""Batch job: router metrics (+ loadgen results) -> Parquet tables, a chart and a summary.

    python -m pipelines.batch_job --metrics-dir DIR [--loadgen FILE ...] --out OUTDIR \
        [--master local[*]] [--window 10s] [--top 10] [--internal] [--progress]

Reads every ``router-metrics-*.jsonl*`` file in DIR (closed and active ones, of every router
writing there; a URL such as hdfs://... works too, Spark lists it) and the loadgen JSON-lines
files, runs ``pipelines.transforms`` and writes, under OUTDIR (overwriting):
    router_throughput/    Parquet, per window and router (+ client latency over all addresses)
    address_throughput/   Parquet, per window, router and address (+ client latency)
    address_totals/       Parquet, exact totals per router and address (cumulative counters)
    top_addresses/        Parquet, the --top busiest addresses
(the per-address tables, the top addresses and the chart leave the router's own addresses
out unless --internal: ``pipelines.transforms.is_internal``)
    network_throughput/   Parquet, per window over all routers (ingress, egress, transit)
    transit_hops/         Parquet, per router and address: deliveries sent on to other routers
    message_paths/        Parquet, per address and route through the routers: messages (only
                          when loadgen receivers ran with --record-trace: x-opt-qd.trace)
    message_hops/         Parquet, per address and hop: messages, beside the router's transit
    client_latency/       Parquet, per window and address (only with --loadgen)
    reconciliation/       Parquet, clients vs router per window and address (only with --loadgen)
    reconciliation_totals/ Parquet, clients vs router per address over the run, exact
    throughput.png        msgs/s per router and per top address, client latency p50/p99,
                          router vs clients (matplotlib; skipped with a note when missing)
    summary.txt           a short text summary (also printed)
``--master`` goes to SparkSession.builder.master, so a cluster URL (spark://host:7077, yarn)
works unchanged; without it the session's own default applies (spark-submit's --master, else
local[*]). Settings follow the data size: shuffle partitions from the input bytes (64 MiB each),
adaptive execution from 256 MiB up (below, neither it nor code generation: the job is
planning-bound and they double its time), Spark's log at WARN (the JVM's with
pipelines/log4j2.properties) and no console progress bars or web UI unless ``--progress``.
The driver JVM starts from a class archive (JDK class data sharing, ``-XX:SharedArchiveFile``)
kept in ``$XDG_CACHE_HOME/qdrouter-py`` (else ``~/.cache/qdrouter-py``), one per Java and
pyspark install: the first run says so on stderr before its JVM starts and writes it when
that JVM exits (about 180 MB; that run takes about three times as long as later ones, which
load Spark's classes from it instead of the jars). ``--no-class-archive`` does without; a JVM that cannot use an archive ignores it.
The Parquet tables go wherever Spark can write (hdfs://, s3a:// ...); the chart and summary are
written by the driver, so OUTDIR must also be a local (or mounted) path for those two.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import glob
import hashlib
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.errors import AnalysisException

from pipelines import schemas, transforms as tf

METRICS_GLOB = "router-metrics-*.jsonl*"
DOCS_EPILOG = ("More (the record format, running on a Spark cluster, the first run's cost): "
               "docs/metrics.md in the qdrouter-py source tree.")
LOG4J_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")
BYTES_PER_PARTITION = 64 * 1024 * 1024
SMALL_INPUT = 256 * 1024 * 1024  # below this, whole-stage code generation costs more than it saves


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.batch_job", description=__doc__,
                                epilog=DOCS_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metrics-dir", required=True, help="directory of router-metrics-*.jsonl*")
    p.add_argument("--loadgen", nargs="*", default=[], metavar="FILE",
                   help="loadgen/1 JSON-lines files (benchmarks/loadgen.py --out)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--master", default=None, help="Spark master URL, e.g. local[*], "
                                                  "spark://host:7077, yarn")
    p.add_argument("--window", default="10s", help="window width: 10s, 1m, '30 seconds'")
    p.add_argument("--top", type=int, default=10, help="how many top addresses")
    p.add_argument("--internal", action="store_true",
                   help="keep the router's own addresses ($management, "
                        "$_management_internal, qdrouter, _topo/...) in the per-address tables, "
                        "the top addresses and the chart (left out by default)")
    p.add_argument("--progress", action="store_true",
                   help="Spark's console progress bars and web UI (off by default)")
    p.add_argument("--no-class-archive", dest="class_archive", action="store_false",
                   help="start the driver JVM without (and do not write) the class archive")
    p.add_argument("--timings", action="store_true",
                   help="print where the time went (phases, JVM CPU) on stderr")
    return p.parse_args(argv)


def input_bytes(paths: Sequence[str]) -> Optional[int]:
    """Total size of the local input files (None when any path is a URL Spark will list)."""
    total = 0
    for pattern in paths:
        if "://" in pattern and not pattern.startswith("file://"):
            return None
        for name in glob.glob(pattern.replace("file://", "", 1)):
            try:
                total += os.path.getsize(name)
            except OSError:
                pass
    return total


def shuffle_partitions(nbytes: Optional[int], cores: int = 0) -> int:
    """One shuffle partition per 64 MiB of input (at least 1, at most 200); unknown input
    size: the cores' worth (adaptive execution coalesces what is too many)."""
    if nbytes is None:
        return max(8, cores)
    return max(1, min(200, math.ceil(nbytes / BYTES_PER_PARTITION)))


class ClassArchive:
    """The driver JVM's class archive (see the module docstring): ``options`` for the JVM, and
    ``finish()`` after the session stopped, which waits for a JVM that is writing a new archive
    and puts it in place (written under a temporary name, renamed when whole)."""

    def __init__(self, directory: Optional[Path] = None) -> None:
        self.path: Optional[Path] = None
        self.writing: Optional[Path] = None
        java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) \
            if os.environ.get("JAVA_HOME") else shutil.which("java")
        if java is None:
            return
        import pyspark
        java = os.path.realpath(java)
        try:
            stamp = f"{java}:{os.stat(java).st_mtime_ns}:{pyspark.__version__}:{pyspark.__file__}"
        except OSError:
            return
        if directory is None:
            cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
            directory = Path(cache) / "qdrouter-py"
        key = hashlib.sha1(stamp.encode()).hexdigest()[:16]
        self.path = directory / f"spark-driver-{pyspark.__version__}-{key}.jsa"

    def options(self) -> str:
        if self.path is None:
            return ""
        # the JVM's own remarks about archiving (classes it cannot archive ...) would go to
        # stdout, into the summary: errors only, on stderr
        quiet = " -Xlog:disable -Xlog:all=error:stderr"
        self._remove_stale()
        if self.path.is_file():
            return f" -XX:SharedArchiveFile={self.path}{quiet}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return ""
        self.writing = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        print(f"batch_job: first run with this Java and pyspark: the driver JVM loads Spark's "
              f"classes from the jars and writes a class archive (about 180 MB) to "
              f"{self.path.parent} when it exits; the job takes about three times as long as "
              f"later runs, which start from the archive (--no-class-archive: neither)",
              file=sys.stderr, flush=True)
        return f" -XX:ArchiveClassesAtExit={self.writing}{quiet}"

    def _remove_stale(self) -> None:
        """Archives left half-written by a job that was killed (its process is gone)."""
        for tmp in self.path.parent.glob(f"{self.path.name}.*.tmp"):
            try:
                os.kill(int(tmp.name.rsplit(".", 2)[-2]), 0)
            except ProcessLookupError:
                tmp.unlink(missing_ok=True)
            except (ValueError, OSError):
                pass

    def finish(self, jvm: Optional[subprocess.Popen], timeout: float = 180.0) -> None:
        if self.writing is None or jvm is None:
            return
        print(f"batch_job: writing the JVM class archive {self.path} (first run only; later "
              f"runs start faster)", file=sys.stderr)
        try:
            if jvm.stdin is not None:
                jvm.stdin.close()  # PySpark's JVM exits when its stdin closes (and then dumps)
            jvm.wait(timeout)
        except subprocess.TimeoutExpired:
            print("batch_job: the JVM did not finish its class archive in time; not kept",
                  file=sys.stderr)
            return
        finally:
            if jvm.returncode is None or jvm.returncode != 0:
                self.writing.unlink(missing_ok=True)
        if self.writing.is_file() and self.writing.stat().st_size > 0:
            os.replace(self.writing, self.path)


def build_session(master: Optional[str], app: str, *, nbytes: Optional[int] = None,
                  progress: bool = False,
                  archive: Optional[ClassArchive] = None) -> SparkSession:
    small = nbytes is not None and nbytes < SMALL_INPUT
    java_options = f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    if small:  # a JVM that lives seconds: the quick compiler and a plain GC start faster
        java_options += " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    if archive is not None:
        java_options += archive.options()
    # Small inputs (a benchmark run: kilobytes to megabytes) are planning-bound: adaptive
    # re-planning and code generation cost seconds per query and save nothing on one
    # partition, so they are off there; from SMALL_INPUT up (or when the size is unknown)
    # adaptive execution coalesces and splits partitions.
    builder = (SparkSession.builder.appName(app)
               .config("spark.sql.session.timeZone", "UTC")
               # PySpark sends each Column call's Python call site to the JVM (four py4j
               # round trips per F.col, F.when ...): thousands per job, for error messages
               .config("spark.python.sql.dataFrameDebugging.enabled", "false")
               .config("spark.sql.adaptive.enabled", "false" if small else "true")
               .config("spark.sql.adaptive.coalescePartitions.enabled", "true")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions(nbytes)))
               .config("spark.ui.showConsoleProgress", "true" if progress else "false")
               .config("spark.ui.enabled", "true" if progress else "false")
               .config("spark.driver.extraJavaOptions", java_options))
    if small:
        builder = (builder.config("spark.sql.codegen.wholeStage", "false")
                   .config("spark.sql.codegen.factoryMode", "NO_CODEGEN"))  # internal setting
    if master:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def read_metrics(spark: SparkSession, metrics_dir: str) -> DataFrame:
    raw = spark.read.schema(schemas.METRICS_SCHEMA).json(f"{metrics_dir.rstrip('/')}/"
                                                         f"{METRICS_GLOB}")
    return tf.dedup_final(tf.metrics_records(raw))


def read_loadgen(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    return spark.read.schema(schemas.LOADGEN_SCHEMA).json(list(files))


class Frames:
    """The job's DataFrames, each built once on first use from any thread (its builder may
    use others): outputs are built by the threads that write or collect them, so Spark plans
    one while it runs another."""

    def __init__(self, builders: dict[str, Callable[[], Optional[DataFrame]]]) -> None:
        self.builders = builders
        self.built: dict[str, Optional[DataFrame]] = {}
        self.locks = {name: threading.Lock() for name in builders}

    def __getitem__(self, name: str) -> Optional[DataFrame]:
        with self.locks[name]:
            if name not in self.built:
                self.built[name] = self.builders[name]()
            return self.built[name]


def keeper(nbytes: Optional[int]) -> Callable[[DataFrame], DataFrame]:
    """How the job keeps a DataFrame that several outputs read: a small input's frames are
    checkpointed (computed once, then a leaf: every query built on them is planned over a few
    hundred rows, not over the whole lineage of reads, windows and joins, which is where a
    small job's time went); from SMALL_INPUT up (or an unknown size) they are cached, which
    survives the loss of an executor."""
    if nbytes is not None and nbytes < SMALL_INPUT:
        return lambda df: df.localCheckpoint()
    return lambda df: df.cache()


def run(spark: SparkSession, args: argparse.Namespace,
        mark: Callable[[str], None] = lambda phase: None) -> dict:
    """Compute and write every output; return what the summary was made of. ``mark(phase)``
    is called as each phase ends (``--timings``)."""
    window = tf.window_duration(args.window)
    out = args.out.rstrip("/")
    clients = bool(args.loadgen)
    keep = keeper(input_bytes([f"{args.metrics_dir.rstrip('/')}/{METRICS_GLOB}",
                               *args.loadgen]))
    loadgen = read_loadgen(spark, args.loadgen) if clients else None
    metrics = tf.with_counter_deltas(read_metrics(spark, args.metrics_dir)).transform(keep)
    # the overview first, alone: for a large input it fills the metrics cache every other job
    # reads (jobs started together would each compute it); a small one is checkpointed already
    overview = metrics.agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("final").cast("int")).alias("finals"),
        F.array_sort(F.collect_set("router_id")).alias("routers"),
        F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")).first()
    mark("metrics read")

    def own(per_address: DataFrame) -> DataFrame:
        """The router's own addresses only with --internal (the one rule: tf.is_internal)."""
        return per_address if args.internal else tf.without_internal(per_address)

    def address_tp() -> DataFrame:
        tp = own(tf.address_throughput(metrics, window))
        return (tf.with_latency(tp, f["client_latency"]) if clients else tp).transform(keep)

    def router_tp() -> DataFrame:
        tp = tf.router_throughput(metrics, window)
        if clients:
            tp = tf.with_latency(tp, tf.client_latency(f["seconds"], window, by_address=False))
        return tp.orderBy("window_start", "router_id").transform(keep)

    f = Frames({
        "seconds": lambda: tf.loadgen_seconds(loadgen).transform(keep) if clients else None,
        "paths": lambda: tf.message_paths(loadgen).transform(keep) if clients else None,
        "client_latency": lambda: (tf.client_latency(f["seconds"], window).transform(keep)
                                   if clients else None),
        "address_throughput": address_tp,
        "router_throughput": router_tp,
        "address_totals": lambda: own(tf.counter_totals(metrics, "address")).transform(keep),
        "top_addresses": lambda: tf.top_addresses(f["address_throughput"], args.top,
                                                  internal=args.internal).transform(keep),
        "network_throughput": lambda: tf.network_throughput(f["router_throughput"]).transform(keep),
        "transit_hops": lambda: tf.transit_hops(f["address_totals"]).transform(keep),
        "reconciliation": lambda: (tf.reconcile(f["address_throughput"], f["seconds"], window)
                                   .transform(keep) if clients else None),
        "reconciliation_totals": lambda: (tf.reconcile_totals(f["address_totals"],
                                                              f["seconds"]).transform(keep)
                                          if clients else None),
    })
    tables = ["router_throughput", "address_throughput", "address_totals", "top_addresses",
              "network_throughput", "transit_hops"]
    if clients:
        tables += ["client_latency", "reconciliation", "reconciliation_totals"]

    def collect(name: str) -> Optional[list]:
        df = f[name]
        return df.collect() if df is not None else None

    def top_series() -> list:
        keys = [r["key"] for r in f["top_addresses"].collect()[:6]]
        return (f["address_throughput"].filter(F.col("key").isin(keys))
                .groupBy("window_start", "address")
                .agg(F.sum("ingress_per_s").alias("ingress_per_s"))
                .orderBy("window_start").collect()) if keys else []

    def recon_series() -> Optional[list]:
        if not clients:
            return None
        return (f["reconciliation"].groupBy("window_start")
                .agg(*[F.sum(c).alias(c) for c in ("client_sent", "client_received",
                                                   "router_ingress", "router_egress")])
                .orderBy("window_start").collect())

    pending = {
        "router_rows": lambda: collect("router_throughput"),
        "network_rows": lambda: collect("network_throughput"),
        "router_totals": lambda: (tf.counter_totals(metrics, "router").orderBy("router_id")
                                  .collect()),
        "hops": lambda: collect("transit_hops"),
        "reconciliation": lambda: collect("reconciliation_totals"),
        "paths": lambda: collect("paths"),
        "top": lambda: collect("top_addresses"),
        "top_series": top_series,
        "recon_series": recon_series,
    }
    # Every output is a small Spark job whose time goes into planning, not data: build and run
    # them side by side (Spark plans and runs jobs from several threads) instead of one after
    # another. One thread per task: a task waiting for a DataFrame another one builds never
    # holds up the pool.
    with ThreadPoolExecutor(max_workers=len(tables) + len(pending)) as pool:
        writes = [pool.submit(lambda name=name: f[name].write.mode("overwrite")
                              .parquet(f"{out}/{name}")) for name in tables]
        futures = {key: pool.submit(task) for key, task in pending.items()}
        facts = {
            "window": window,
            "records": overview["records"],
            "finals": overview["finals"] or 0,
            "routers": list(overview["routers"]),
            "span": (overview["first_ts"], overview["last_ts"]),
            **{key: future.result() for key, future in futures.items()},
        }
        for write in writes:
            write.result()
    if facts["paths"]:  # receivers recorded the messages' paths (--record-trace)
        message_hops = tf.message_hops(f["paths"], f["address_totals"]).transform(keep)
        f["paths"].write.mode("overwrite").parquet(f"{out}/message_paths")
        message_hops.write.mode("overwrite").parquet(f"{out}/message_hops")
        facts["message_hops"] = message_hops.collect()
    mark("Spark jobs")
    out_dir = Path(out)
    facts["chart"] = write_chart(out_dir / "throughput.png", facts)
    (out_dir / "summary.txt").write_text(summary_text(facts))
    mark("chart and summary")
    return facts


def _utc(value: datetime) -> datetime:
    """PySpark returns timestamps as naive local-time datetimes; plot them in UTC."""
    return datetime.fromtimestamp(value.timestamp(), timezone.utc)


def _series(rows: list, x: str, y: str) -> tuple[list, list]:
    pts = sorted(((_utc(r[x]), r[y]) for r in rows if r[x] is not None), key=lambda p: p[0])
    return [p[0] for p in pts], [float("nan") if p[1] is None else p[1] for p in pts]


def write_chart(path: Path, facts: dict) -> Optional[str]:
    """throughput.png; returns None, or why there is no chart.

    Panels (shared wall-clock axis, HH:MM:SS UTC): msgs/s per router (in solid, out dashed;
    the network total when there are several routers), msgs/s in per top address (lines),
    client latency p50/p99 (ms, from the load generator's receivers) and router vs clients
    (msgs/s the clients sent/received and the router counted in/out)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[spark]'): no chart"
    has_clients = bool(facts.get("recon_series"))
    latency = [r for r in facts["router_rows"] if r["lat_p50_us"] is not None] \
        if facts["router_rows"] and "lat_p50_us" in facts["router_rows"][0] else []
    panels = 2 + (1 if latency else 0) + (1 if has_clients else 0)
    fig, axes = plt.subplots(panels, 1, figsize=(11, 2.6 * panels + 0.8), sharex=True)
    axes = list(axes)
    ax = axes.pop(0)
    for router_id in facts["routers"]:
        rows = [r for r in facts["router_rows"] if r["router_id"] == router_id]
        line, = ax.plot(*_series(rows, "window_start", "ingress_per_s"), marker=".",
                        markersize=3, label=f"{router_id} in")
        ax.plot(*_series(rows, "window_start", "egress_per_s"), linestyle="--",
                color=line.get_color(), label=f"{router_id} out")
    if len(facts["routers"]) > 1 and facts.get("network_rows"):
        ax.plot(*_series(facts["network_rows"], "window_start", "ingress_per_s"),
                color="black", linewidth=1.5, label="network in")
    ax.set_ylabel("deliveries/s")
    ax.set_title(f"Router throughput per {facts['window']}")
    ax.legend(loc="best", fontsize="small", ncol=2)
    ax = axes.pop(0)
    for address in sorted({r["address"] for r in facts["top_series"]}, key=str):
        rows = [r for r in facts["top_series"] if r["address"] == address]
        ax.plot(*_series(rows, "window_start", "ingress_per_s"), marker=".", markersize=3,
                label=str(address))
    ax.set_ylabel("deliveries in/s")
    ax.set_title("Top addresses")
    if facts["top_series"]:
        ax.legend(loc="best", fontsize="small", ncol=2)
    if latency:
        ax = axes.pop(0)
        xs, p50 = _series(latency, "window_start", "lat_p50_us")
        _, p99 = _series(latency, "window_start", "lat_p99_us")
        ax.plot(xs, [v / 1000.0 for v in p50], marker=".", markersize=3, label="p50")
        ax.plot(xs, [v / 1000.0 for v in p99], marker=".", markersize=3, label="p99 (bound)")
        ax.set_ylabel("latency ms")
        ax.set_title("Client latency (receivers)")
        ax.legend(loc="best", fontsize="small")
    if has_clients:
        ax = axes.pop(0)
        rows = facts["recon_series"]
        for col, style, label in (("client_sent", "-", "clients sent"),
                                  ("router_ingress", ":", "router in"),
                                  ("client_received", "-", "clients received"),
                                  ("router_egress", ":", "router out")):
            xs, ys = _series(rows, "window_start", col)
            running, total = [], 0
            for y in ys:
                total += 0 if y != y else y  # NaN: nothing in that window
                running.append(total)
            ax.plot(xs, running, linestyle=style, marker=".", markersize=3, label=label)
        ax.set_ylabel("deliveries so far")
        ax.set_title("Router vs clients (cumulative; the lines meet when every count adds up)")
        ax.legend(loc="best", fontsize="small", ncol=2)
    last = fig.axes[-1]
    last.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))
    last.set_xlabel("time (UTC)")
    for a in fig.axes:
        a.grid(True, alpha=0.3)
        a.set_ylim(bottom=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=90)
    plt.close(fig)
    return None


def _ts(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary_text(facts: dict) -> str:
    lo, hi = facts["span"][0], facts["span"][1]
    lines = [f"router metrics: {facts['records']} records ({facts.get('finals', 0)} final) "
             f"from {len(facts['routers'])} router(s) {', '.join(facts['routers'])}; "
             f"{_ts(lo)} .. {_ts(hi)}; window {facts['window']}"]
    totals = {r["router_id"]: r for r in facts.get("router_totals", [])}
    for router_id in facts["routers"]:
        rows = [r for r in facts["router_rows"] if r["router_id"] == router_id]
        rates = [r["ingress_per_s"] for r in rows if r["ingress_per_s"] is not None]
        total = sum(r["ingress"] or 0 for r in rows)
        settled = sum(r["settled"] or 0 for r in rows)
        accepted = sum(r["accepted"] or 0 for r in rows)
        line = f"  {router_id}: {total} deliveries in"
        if rates:
            line += f", mean {sum(rates) / len(rates):.1f}/s, peak {max(rates):.1f}/s"
        if settled:
            line += f", {100.0 * accepted / settled:.1f}% of {settled} settled accepted"
        if router_id in totals:
            t = totals[router_id]
            line += (f"; since start: in {t['deliveriesIngress']}, out {t['deliveriesEgress']}"
                     f", transit {t['deliveriesTransit']}")
        lines.append(line)
    if len(facts["routers"]) > 1:
        net = facts.get("network_rows") or []
        rates = [r["ingress_per_s"] for r in net if r["ingress_per_s"] is not None]
        t_in = sum(t["deliveriesIngress"] for t in totals.values())
        t_out = sum(t["deliveriesEgress"] for t in totals.values())
        t_tr = sum(t["deliveriesTransit"] for t in totals.values())
        line = (f"network: {len(facts['routers'])} routers, in {t_in}, out {t_out}, "
                f"transit {t_tr} (router-to-router hops)")
        if rates:
            line += f"; peak {max(rates):.1f}/s in"
        lines.append(line)
        if facts.get("hops"):
            lines.append("transit per hop (router, address, in / sent on / out):")
            lines.extend(f"  {r['router_id']} {r['address']}: {r['ingress']} / {r['transit']} "
                         f"/ {r['egress']}" for r in facts["hops"])
    if facts.get("paths"):
        lines.append("message paths (the receivers' x-opt-qd.trace; address: route, messages):")
        lines.extend(f"  {r['address']}: {r['route']} ({r['hops']} hop(s)): {r['messages']}"
                     for r in facts["paths"])
        lines.append("messages per hop (address: from -> to, messages / the router's own "
                     "count of deliveries it sent on):")
        lines.extend(f"  {r['address']}: {r['from_router']} -> {r['to_router']}: "
                     f"{r['messages']} / "
                     f"{'-' if r['router_transit'] is None else r['router_transit']}"
                     for r in facts.get("message_hops") or [])
    if facts["top"]:
        first = facts["top"][0]
        lines.append(f"top address: {first['address']} ({first['ingress']} deliveries in, "
                     f"{100.0 * (first['ingress_share'] or 0):.1f}% of all)")
        lines.append("top addresses (rank, address, in, out):")
        lines.extend(f"  {r['rank']}. {r['address']} {r['ingress']} {r['egress']}"
                     for r in facts["top"])
    else:
        lines.append("top address: none (no address deliveries in the data)")
    if facts["reconciliation"] is not None:
        rows = facts["reconciliation"]
        exact = sum(1 for r in rows if r["not_counted_in"] == 0 and r["not_received"] == 0)
        lines.append(f"clients vs router, exact totals (sent / router in / router out / "
                     f"received): {exact} of {len(rows)} address(es) reconcile")
        for r in rows:
            lines.append(f"  {r['address']}: {r['client_sent']} / {r['router_ingress']} / "
                         f"{r['router_egress']} / {r['client_received']}"
                         f"  (not counted in: {r['not_counted_in']}, "
                         f"not received: {r['not_received']})")
    if facts["chart"]:
        lines.append(facts["chart"])
    return "\n".join(lines) + "\n"


def _preload_matplotlib() -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass  # write_chart() says there is no chart


class Timings:
    """``--timings``: seconds per phase and the driver JVM's CPU time, on stderr."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.last = self.started = time.monotonic()
        self.phases: list[tuple[str, float]] = []

    def mark(self, phase: str) -> None:
        now = time.monotonic()
        self.phases.append((phase, now - self.last))
        self.last = now

    def report(self, jvm: Optional[subprocess.Popen]) -> None:
        if not self.on:
            return
        parts = ", ".join(f"{name} {secs:.1f} s" for name, secs in self.phases)
        cpu = _process_cpu(jvm.pid) if jvm is not None else None
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        print(f"batch_job: timings: {parts}"
              + (f"; driver JVM CPU {cpu:.1f} s" if cpu is not None else "")
              + (f"; load average {load:.2f}" if load is not None else ""), file=sys.stderr)


def _process_cpu(pid: int) -> Optional[float]:
    """utime + stime of a live process in seconds (Linux), else None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _jvm_process(session: SparkSession) -> Optional[subprocess.Popen]:
    """The driver JVM PySpark launched (None when it was started some other way)."""
    proc = getattr(getattr(session.sparkContext, "_gateway", None), "proc", None)
    return proc if isinstance(proc, subprocess.Popen) else None


def main(argv: Optional[Sequence[str]] = None, spark: Optional[SparkSession] = None) -> int:
    """Run the job; with ``spark`` given (tests), use that session and leave it running."""
    args = parse_args(argv)
    timings = Timings(args.timings)
    # the chart's library loads (about a second) while the JVM starts
    threading.Thread(target=_preload_matplotlib, daemon=True).start()
    own = spark is None
    archive = ClassArchive() if own and args.class_archive else None
    session = spark or build_session(
        args.master, "router-metrics-batch", progress=args.progress, archive=archive,
        nbytes=input_bytes([f"{args.metrics_dir.rstrip('/')}/{METRICS_GLOB}", *args.loadgen]))
    jvm = _jvm_process(session) if own else None
    timings.mark("Spark session")
    try:
        facts = run(session, args, timings.mark)
        print(summary_text(facts), end="", flush=True)
        timings.report(jvm)
    except AnalysisException as e:
        if "PATH_NOT_FOUND" not in str(e) and "does not exist" not in str(e):
            raise
        print(f"batch_job: no input: {e}", file=sys.stderr)
        return 2
    finally:
        if own:
            session.stop()
            if archive is not None:
                archive.finish(jvm)
    print(f"batch_job: done in {time.monotonic() - timings.started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
