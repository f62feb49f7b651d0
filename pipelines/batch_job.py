"""Batch job: router metrics (+ loadgen results) -> Parquet tables, a chart and a summary.

    python -m pipelines.batch_job --metrics-dir DIR [--loadgen FILE ...] --out OUTDIR \
        [--master local[*]] [--window 10s] [--top 10] [--internal] [--progress]

Reads every ``router-metrics-*.jsonl*`` file in DIR (closed and active ones, of every router
writing there; a URL such as hdfs://... works too, Spark lists it) and the loadgen JSON-lines
files, runs ``pipelines.transforms`` and writes, under OUTDIR (overwriting):
    router_throughput/    Parquet, per window and router (+ client latency over all addresses)
    address_throughput/   Parquet, per window, router and address (+ client latency)
    address_totals/       Parquet, exact totals per router and address (cumulative counters)
    top_addresses/        Parquet, the --top busiest addresses (internal ones with --internal)
    network_throughput/   Parquet, per window over all routers (ingress, egress, transit)
    transit_hops/         Parquet, per router and address: deliveries sent on to other routers
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
The Parquet tables go wherever Spark can write (hdfs://, s3a:// ...); the chart and summary are
written by the driver, so OUTDIR must also be a local (or mounted) path for those two.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import glob
import math
import os
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.errors import AnalysisException

from pipelines import schemas, transforms as tf

METRICS_GLOB = "router-metrics-*.jsonl*"
LOG4J_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")
BYTES_PER_PARTITION = 64 * 1024 * 1024
SMALL_INPUT = 256 * 1024 * 1024  # below this, whole-stage code generation costs more than it saves


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.batch_job", description=__doc__,
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
                   help="count the router's internal addresses ($management, _topo/...) "
                        "among the top addresses")
    p.add_argument("--progress", action="store_true",
                   help="Spark's console progress bars and web UI (off by default)")
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


def build_session(master: Optional[str], app: str, *, nbytes: Optional[int] = None,
                  progress: bool = False) -> SparkSession:
    small = nbytes is not None and nbytes < SMALL_INPUT
    java_options = f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    if small:  # a JVM that lives seconds: the quick compiler and a plain GC start faster
        java_options += " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    # Small inputs (a benchmark run: kilobytes to megabytes) are planning-bound: adaptive
    # re-planning and code generation cost seconds per query and save nothing on one
    # partition, so they are off there; from SMALL_INPUT up (or when the size is unknown)
    # adaptive execution coalesces and splits partitions.
    builder = (SparkSession.builder.appName(app)
               .config("spark.sql.session.timeZone", "UTC")
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


JOB_THREADS = 4  # Spark jobs submitted at once by run()


def run(spark: SparkSession, args: argparse.Namespace) -> dict:
    """Compute and write every output; return what the summary was made of."""
    window = tf.window_duration(args.window)
    out = args.out.rstrip("/")
    metrics = tf.with_counter_deltas(read_metrics(spark, args.metrics_dir)).cache()
    address_tp = tf.address_throughput(metrics, window)
    router_tp = tf.router_throughput(metrics, window)
    tables: dict[str, DataFrame] = {}
    seconds = reconciliation = recon_totals = None
    if args.loadgen:
        seconds = tf.loadgen_seconds(read_loadgen(spark, args.loadgen)).cache()
        latency = tables["client_latency"] = tf.client_latency(seconds, window).cache()
        address_tp = tf.with_latency(address_tp, latency)
        router_tp = tf.with_latency(router_tp,
                                    tf.client_latency(seconds, window, by_address=False))
    address_tp = tables["address_throughput"] = address_tp.cache()
    router_tp = tables["router_throughput"] = (router_tp.orderBy("window_start", "router_id")
                                               .cache())
    totals = tables["address_totals"] = tf.counter_totals(metrics, "address").cache()
    tables["top_addresses"] = top = tf.top_addresses(address_tp, args.top,
                                                     internal=args.internal).cache()
    network = tables["network_throughput"] = tf.network_throughput(router_tp).cache()
    hops = tables["transit_hops"] = tf.transit_hops(totals)
    if seconds is not None:
        reconciliation = tables["reconciliation"] = (tf.reconcile(address_tp, seconds, window)
                                                     .cache())
        recon_totals = tables["reconciliation_totals"] = tf.reconcile_totals(totals, seconds)
    # Every output is a small Spark job whose time goes into planning, not data: run them side
    # by side (Spark takes jobs from several threads) instead of one after another.
    with ThreadPoolExecutor(max_workers=JOB_THREADS) as pool:
        writes = [pool.submit(table.write.mode("overwrite").parquet, f"{out}/{name}")
                  for name, table in tables.items()]
        overview = pool.submit(lambda: metrics.agg(
            F.count(F.lit(1)).alias("records"),
            F.sum(F.col("final").cast("int")).alias("finals"),
            F.array_sort(F.collect_set("router_id")).alias("routers"),
            F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")).first())
        pending = {
            "router_rows": pool.submit(router_tp.collect),
            "network_rows": pool.submit(network.collect),
            "router_totals": pool.submit(lambda: tf.counter_totals(metrics, "router")
                                         .orderBy("router_id").collect()),
            "hops": pool.submit(hops.collect),
            "reconciliation": pool.submit(lambda: recon_totals.collect()
                                          if recon_totals is not None else None),
            "recon_series": pool.submit(lambda: reconciliation.groupBy("window_start").agg(
                *[F.sum(c).alias(c) for c in ("client_sent", "client_received",
                                              "router_ingress", "router_egress")])
                .orderBy("window_start").collect() if reconciliation is not None else None),
        }
        top_rows = top.collect()
        top_keys = [r["key"] for r in top_rows[:6]]
        top_series = (address_tp.filter(F.col("key").isin(top_keys))
                      .groupBy("window_start", "address")
                      .agg(F.sum("ingress_per_s").alias("ingress_per_s"))
                      .orderBy("window_start").collect()) if top_keys else []
        overview = overview.result()
        facts = {
            "window": window,
            "records": overview["records"],
            "finals": overview["finals"] or 0,
            "routers": list(overview["routers"]),
            "span": (overview["first_ts"], overview["last_ts"]),
            "top": top_rows,
            "top_series": top_series,
            **{key: future.result() for key, future in pending.items()},
        }
        for write in writes:
            write.result()
    out_dir = Path(out)
    facts["chart"] = write_chart(out_dir / "throughput.png", facts)
    (out_dir / "summary.txt").write_text(summary_text(facts))
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


def main(argv: Optional[Sequence[str]] = None, spark: Optional[SparkSession] = None) -> int:
    """Run the job; with ``spark`` given (tests), use that session and leave it running."""
    started = time.monotonic()
    args = parse_args(argv)
    # the chart's library loads (about a second) while the JVM starts
    threading.Thread(target=_preload_matplotlib, daemon=True).start()
    own = spark is None
    session = spark or build_session(
        args.master, "router-metrics-batch", progress=args.progress,
        nbytes=input_bytes([f"{args.metrics_dir.rstrip('/')}/{METRICS_GLOB}", *args.loadgen]))
    try:
        facts = run(session, args)
    except AnalysisException as e:
        if "PATH_NOT_FOUND" not in str(e) and "does not exist" not in str(e):
            raise
        print(f"batch_job: no input: {e}", file=sys.stderr)
        return 2
    finally:
        if own:
            session.stop()
    print(summary_text(facts), end="")
    print(f"batch_job: done in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
