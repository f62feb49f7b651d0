"""Batch job: router metrics (+ loadgen results) -> Parquet tables, a chart and a summary.

    python -m pipelines.batch_job --metrics-dir DIR [--loadgen FILE ...] --out OUTDIR \
        [--master local[*]] [--window 10s] [--top 10]

Reads every ``router-metrics-*.jsonl*`` file in DIR (closed and active ones; a URL such as
hdfs://... works too, Spark lists it) and the loadgen JSON-lines files, runs
``pipelines.transforms`` and writes, under OUTDIR (overwriting):
    router_throughput/    Parquet, per window and router (+ client latency over all addresses)
    address_throughput/   Parquet, per window, router and address (+ client latency)
    top_addresses/        Parquet, the --top busiest addresses
    client_latency/       Parquet, per window and address (only with --loadgen)
    reconciliation/       Parquet, clients vs router per window and address (only with --loadgen)
    throughput.png        msgs/s over time per router and for the top addresses (matplotlib;
                          skipped with a note in the summary when it is not installed)
    summary.txt           a short text summary
``--master`` goes to SparkSession.builder.master, so a cluster URL (spark://host:7077, yarn)
works unchanged; without it the session's own default applies (spark-submit's --master).
The Parquet tables go wherever Spark can write (hdfs://, s3a:// ...); the chart and summary are
written by the driver, so OUTDIR must also be a local (or mounted) path for those two.
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.errors import AnalysisException

from pipelines import schemas, transforms as tf

METRICS_GLOB = "router-metrics-*.jsonl*"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipelines.batch_job", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metrics-dir", required=True, help="directory of router-metrics-*.jsonl*")
    p.add_argument("--loadgen", nargs="*", default=[], metavar="FILE",
                   help="loadgen/1 JSON-lines files (benchmarks/loadgen.py --out)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--master", default=None, help="Spark master URL, e.g. local[*]")
    p.add_argument("--window", default="10s", help="window width: 10s, 1m, '30 seconds'")
    p.add_argument("--top", type=int, default=10, help="how many top addresses")
    return p.parse_args(argv)


def build_session(master: Optional[str], app: str) -> SparkSession:
    builder = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
    if master:
        builder = builder.master(master)
    return builder.getOrCreate()


def read_metrics(spark: SparkSession, metrics_dir: str) -> DataFrame:
    raw = spark.read.schema(schemas.METRICS_SCHEMA).json(f"{metrics_dir.rstrip('/')}/"
                                                         f"{METRICS_GLOB}")
    return tf.metrics_records(raw)


def read_loadgen(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    return spark.read.schema(schemas.LOADGEN_SCHEMA).json(list(files))


def run(spark: SparkSession, args: argparse.Namespace) -> dict:
    """Compute and write every output; return what the summary was made of."""
    window = tf.window_duration(args.window)
    out = args.out.rstrip("/")
    metrics = tf.with_counter_deltas(read_metrics(spark, args.metrics_dir)).cache()
    address_tp = tf.address_throughput(metrics, window)
    router_tp = tf.router_throughput(metrics, window)
    tables: dict[str, DataFrame] = {}
    seconds = reconciliation = None
    if args.loadgen:
        seconds = tf.loadgen_seconds(read_loadgen(spark, args.loadgen)).cache()
        latency = tables["client_latency"] = tf.client_latency(seconds, window).cache()
        address_tp = tf.with_latency(address_tp, latency)
        router_tp = tf.with_latency(router_tp,
                                    tf.client_latency(seconds, window, by_address=False))
    address_tp = tables["address_throughput"] = address_tp.cache()
    router_tp = tables["router_throughput"] = (router_tp.orderBy("window_start", "router_id")
                                               .cache())
    tables["top_addresses"] = top = tf.top_addresses(address_tp, args.top).cache()
    if seconds is not None:
        reconciliation = tables["reconciliation"] = (tf.reconcile(address_tp, seconds, window)
                                                     .cache())
    for name, table in tables.items():
        table.write.mode("overwrite").parquet(f"{out}/{name}")

    overview = metrics.agg(F.count(F.lit(1)).alias("records"),
                           F.array_sort(F.collect_set("router_id")).alias("routers"),
                           F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")).first()
    facts = {
        "window": window,
        "records": overview["records"],
        "routers": list(overview["routers"]),
        "span": (overview["first_ts"], overview["last_ts"]),
        "router_rows": router_tp.collect(),
        "top": top.collect(),
        "top_series": address_tp.join(top.select("key").limit(5), "key")
        .groupBy("window_start", "address").agg(F.sum("ingress_per_s").alias("ingress_per_s"))
        .orderBy("window_start").collect(),
        "reconciliation": (reconciliation.groupBy("address").agg(
            *[F.sum(c).alias(c) for c in ("client_sent", "client_settled", "router_ingress",
                                          "router_egress", "client_received")])
            .orderBy("address").collect() if reconciliation is not None else None),
    }
    out_dir = Path(out)
    facts["chart"] = write_chart(out_dir / "throughput.png", facts)
    (out_dir / "summary.txt").write_text(summary_text(facts))
    return facts


def _utc(value: datetime) -> datetime:
    """PySpark returns timestamps as naive local-time datetimes; plot them in UTC."""
    return datetime.fromtimestamp(value.timestamp(), timezone.utc)


def write_chart(path: Path, facts: dict) -> Optional[str]:
    """throughput.png; returns None, or why there is no chart."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[spark]'): no chart"
    fig, (top_ax, addr_ax) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for router_id in facts["routers"]:
        rows = [r for r in facts["router_rows"] if r["router_id"] == router_id]
        xs = [_utc(r["window_start"]) for r in rows]
        top_ax.plot(xs, [r["ingress_per_s"] for r in rows], marker=".",
                    label=f"{router_id} in")
        top_ax.plot(xs, [r["egress_per_s"] for r in rows], linestyle="--",
                    label=f"{router_id} out")
    top_ax.set_ylabel("deliveries/s")
    top_ax.set_title(f"Router throughput per {facts['window']}")
    top_ax.legend(loc="best", fontsize="small")
    for address in sorted({r["address"] for r in facts["top_series"]}, key=str):
        rows = [r for r in facts["top_series"] if r["address"] == address]
        addr_ax.plot([_utc(r["window_start"]) for r in rows], [r["ingress_per_s"] for r in rows],
                     marker=".", label=str(address))
    addr_ax.set_ylabel("deliveries in/s")
    addr_ax.set_title("Top addresses")
    if facts["top_series"]:
        addr_ax.legend(loc="best", fontsize="small")
    addr_ax.set_xlabel("window start (UTC)")
    fig.autofmt_xdate()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return None


def _ts(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary_text(facts: dict) -> str:
    lo, hi = facts["span"][0], facts["span"][1]
    lines = [f"router metrics: {facts['records']} records from {len(facts['routers'])} "
             f"router(s) {', '.join(facts['routers'])}; {_ts(lo)} .. {_ts(hi)}; "
             f"window {facts['window']}"]
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
        lines.append(line)
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
        lines.append("clients vs router (sent / router in / router out / received):")
        for r in facts["reconciliation"]:
            gap_in = r["client_sent"] - r["router_ingress"]
            gap_out = r["router_egress"] - r["client_received"]
            lines.append(f"  {r['address']}: {r['client_sent']} / {r['router_ingress']} / "
                         f"{r['router_egress']} / {r['client_received']}"
                         f"  (not counted in: {gap_in}, not received: {gap_out})")
    if facts["chart"]:
        lines.append(facts["chart"])
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None, spark: Optional[SparkSession] = None) -> int:
    """Run the job; with ``spark`` given (tests), use that session and leave it running."""
    args = parse_args(argv)
    own = spark is None
    session = spark or build_session(args.master, "router-metrics-batch")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
