"""Pure DataFrame -> DataFrame transforms over router metrics and loadgen results.

No I/O and no SparkSession here: every function takes DataFrames (read with ``pipelines.schemas``)
and returns a DataFrame; the job scripts read, write and plot.

Time
    A "router-metrics/1" record at ``ts`` carries deltas over (ts - interval_s, ts]. It is placed
    in time at the middle of that interval (``event_time``), so a record taken at 20.0 every 10 s
    lands in the window [10, 20) - the same window as the loadgen seconds 10..19 it overlaps.
    Loadgen's ``per_second`` row ``t`` covers [t, t+1) and is placed at ``t``.
Rates
    msgs/s in a window = sum of the d_ deltas / sum of the interval_s of those records (the time
    they cover), so a window only partly covered by samples is not diluted. Records whose deltas
    are null (a router's first sample) are left out altogether: no window row comes of them.
Latency
    Windowed client latency from per-second receiver percentiles: ``lat_p50_us`` is the
    received-weighted median of the per-second medians (an estimate), ``lat_p99_us`` the largest
    per-second p99 - an upper bound of the window's true p99 (no second has more than 1 % of its
    messages above it, so neither has the window).
Streaming
    ``with_event_time``, ``address_throughput`` and ``router_throughput`` are single windowed
    aggregations and run unchanged on streaming DataFrames (add a watermark on ``event_time``
    first). ``with_counter_deltas``, ``top_addresses`` and ``reconcile`` use window functions,
    sorting or joins of aggregates: batch only.
"""
from __future__ import annotations

import re
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from agent.metrics import DELTA_PREFIX, KINDS
from pipelines.schemas import LOADGEN_SCHEMA_TAG, METRICS_SCHEMA_TAG

OUTCOMES = ("accepted", "rejected", "released", "modified")
_UNITS = {"ms": "milliseconds", "s": "seconds", "sec": "seconds", "m": "minutes",
          "min": "minutes", "h": "hours"}


def window_duration(spec: str) -> str:
    """``"10s"`` -> ``"10 seconds"`` (Spark's interval words); ``"2 minutes"`` passes through."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|sec|m|min|h)\s*", spec)
    return f"{m.group(1)} {_UNITS[m.group(2)]}" if m else spec.strip()


def _ratio(num: Column, den: Column) -> Column:
    """num / den, null when den is 0 or null (ANSI mode raises on division by zero)."""
    return F.when(den > 0, num / den)


def _sum_if(cond: Column, col: str) -> Column:
    return F.sum(F.when(cond, F.col(col)))


def _window_cols(df: DataFrame) -> DataFrame:
    return (df.withColumn("window_start", F.col("window.start"))
            .withColumn("window_end", F.col("window.end")).drop("window"))


# ------------------------------------------------------------------------------------------
# Router metrics
# ------------------------------------------------------------------------------------------
def metrics_records(raw: DataFrame) -> DataFrame:
    """Only well-formed "router-metrics/1" records (other lines and corrupt ones dropped)."""
    return raw.filter((F.col("schema") == METRICS_SCHEMA_TAG) & F.col("ts").isNotNull()
                      & F.col("kind").isNotNull() & F.col("router_id").isNotNull())


def with_event_time(metrics: DataFrame) -> DataFrame:
    """Add ``event_time``: the middle of the interval the record's deltas cover."""
    mid = F.col("ts") - F.coalesce(F.col("interval_s"), F.lit(0.0)) / 2
    return metrics.withColumn("event_time", F.timestamp_seconds(mid))


def _counter_columns(df: DataFrame) -> list[str]:
    names: list[str] = []
    for counters, _, _, byte_counters in KINDS.values():
        for name in counters + byte_counters:
            if name in df.columns and DELTA_PREFIX + name in df.columns and name not in names:
                names.append(name)
    return names


def with_counter_deltas(metrics: DataFrame) -> DataFrame:
    """Fill null d_ deltas from the previous record of the same router, kind and key (batch only).

    For records written without deltas (a first sample after a restart, or a producer that does
    not compute them): d_x = x - previous x, or x when it went down (a reset), and interval_s
    becomes the time since the previous record. Records that already have deltas are unchanged.
    """
    w = Window.partitionBy("router_id", "kind", "key").orderBy("ts")
    counters = _counter_columns(metrics)
    df = metrics.withColumn("_prev_ts", F.lag("ts").over(w))
    no_deltas = F.coalesce(*[F.col(DELTA_PREFIX + c) for c in counters]).isNull()
    df = df.withColumn("_fill", no_deltas & F.col("_prev_ts").isNotNull())
    for c in counters:
        prev = F.lag(c).over(w)
        diff = F.when(F.col(c) < prev, F.col(c)).otherwise(F.col(c) - prev)
        df = df.withColumn(DELTA_PREFIX + c, F.when(F.col("_fill"), diff)
                           .otherwise(F.col(DELTA_PREFIX + c)))
    df = df.withColumn("interval_s", F.when(F.col("_fill"), F.col("ts") - F.col("_prev_ts"))
                       .otherwise(F.col("interval_s")))
    return df.drop("_prev_ts", "_fill")


def _ensure_event_time(metrics: DataFrame) -> DataFrame:
    return metrics if "event_time" in metrics.columns else with_event_time(metrics)


def address_throughput(metrics: DataFrame, window: str = "10 seconds") -> DataFrame:
    """Per window, router and address: deliveries in/out, msgs/s, bytes/s, outcome mix.

    Counts come from address records (d_deliveriesIngress/Egress/Transit, d_bytes*); the
    outcome mix from the address's inbound links (the outcomes returned to senders).
    Columns: window_start, window_end, router_id, key, address, ingress, egress, transit,
    covered_s, ingress_per_s, egress_per_s, bytes_ingress, bytes_egress, bytes_ingress_per_s,
    bytes_egress_per_s, accepted, rejected, released, modified, settled, <outcome>_ratio.
    """
    df = _ensure_event_time(metrics)
    is_addr = F.col("kind") == "address"
    is_in_link = (F.col("kind") == "link") & (F.col("linkDir") == "in")
    df = (df.filter((is_addr & F.col("d_deliveriesIngress").isNotNull())
                    | (is_in_link & F.col("d_deliveryCount").isNotNull()))
          .withColumn("_addr_key", F.when(is_addr, F.col("key")).otherwise(F.col("owningAddr")))
          .filter(F.col("_addr_key").isNotNull()))
    agg = df.groupBy(F.window("event_time", window), "router_id",
                     F.col("_addr_key").alias("key"), "address").agg(
        _sum_if(is_addr, "d_deliveriesIngress").alias("ingress"),
        _sum_if(is_addr, "d_deliveriesEgress").alias("egress"),
        _sum_if(is_addr, "d_deliveriesTransit").alias("transit"),
        _sum_if(is_addr, "interval_s").alias("covered_s"),
        _sum_if(is_addr, "d_bytesIngress").alias("bytes_ingress"),
        _sum_if(is_addr, "d_bytesEgress").alias("bytes_egress"),
        *[_sum_if(is_in_link, f"d_{o}Count").alias(o) for o in OUTCOMES])
    return _rates_and_mix(_window_cols(agg))


def router_throughput(metrics: DataFrame, window: str = "10 seconds") -> DataFrame:
    """Per window and router: deliveries in/out/transit, presettled, dropped, msgs/s, bytes/s and
    the outcome mix (router-wide outcomes returned to senders). Columns as address_throughput
    without key/address, plus presettled and dropped_presettled."""
    df = _ensure_event_time(metrics).filter(
        (F.col("kind") == "router") & F.col("d_deliveriesIngress").isNotNull())
    agg = df.groupBy(F.window("event_time", window), "router_id").agg(
        F.sum("d_deliveriesIngress").alias("ingress"),
        F.sum("d_deliveriesEgress").alias("egress"),
        F.sum("d_deliveriesTransit").alias("transit"),
        F.sum("interval_s").alias("covered_s"),
        F.sum("d_bytesIngress").alias("bytes_ingress"),
        F.sum("d_bytesEgress").alias("bytes_egress"),
        F.sum("d_presettledDeliveries").alias("presettled"),
        F.sum("d_droppedPresettledDeliveries").alias("dropped_presettled"),
        *[F.sum(f"d_{o}Deliveries").alias(o) for o in OUTCOMES])
    return _rates_and_mix(_window_cols(agg))


def _rates_and_mix(df: DataFrame) -> DataFrame:
    cov = F.col("covered_s")
    settled = reduce(lambda a, b: a + b, [F.coalesce(F.col(o), F.lit(0)) for o in OUTCOMES])
    df = (df.withColumn("ingress_per_s", _ratio(F.col("ingress"), cov))
          .withColumn("egress_per_s", _ratio(F.col("egress"), cov))
          .withColumn("bytes_ingress_per_s", _ratio(F.col("bytes_ingress"), cov))
          .withColumn("bytes_egress_per_s", _ratio(F.col("bytes_egress"), cov))
          .withColumn("settled", settled))
    for o in OUTCOMES:
        df = df.withColumn(f"{o}_ratio", _ratio(F.col(o), F.col("settled")))
    return df


def top_addresses(address_tp: DataFrame, n: int = 10) -> DataFrame:
    """The n addresses with the most deliveries in (then out), summed over routers and windows.

    Columns: rank (1 = busiest), key, address, ingress, egress, ingress_share (of all ingress).
    """
    per_addr = address_tp.groupBy("key", "address").agg(
        F.coalesce(F.sum("ingress"), F.lit(0)).alias("ingress"),
        F.coalesce(F.sum("egress"), F.lit(0)).alias("egress"))
    total = per_addr.agg(F.sum("ingress").alias("_total"))
    order = [F.col("ingress").desc(), F.col("egress").desc(), F.col("key").asc()]
    top = per_addr.orderBy(*order).limit(n)
    # at most n rows here, so one partition for the ranking is fine (and says so to Spark)
    ranked = top.withColumn("rank", F.row_number().over(
        Window.partitionBy(F.lit(0)).orderBy(*order)))
    return (ranked.crossJoin(total)
            .withColumn("ingress_share", _ratio(F.col("ingress"), F.col("_total")))
            .select("rank", "key", "address", "ingress", "egress", "ingress_share")
            .orderBy("rank"))


# ------------------------------------------------------------------------------------------
# Loadgen
# ------------------------------------------------------------------------------------------
def loadgen_seconds(loadgen: DataFrame) -> DataFrame:
    """One row per client and second (``pipelines.schemas.LOADGEN_SECOND_SCHEMA`` columns plus
    ``event_time``) from "loadgen/1" result lines."""
    rows = (loadgen.filter(F.col("schema") == LOADGEN_SCHEMA_TAG)
            .select("run_id", "role", "pid", "address", "body_size",
                    F.explode("per_second").alias("s"))
            .select("run_id", "role", "pid", "address", "body_size", "s.*"))
    return rows.withColumn("event_time", F.timestamp_seconds(F.col("t")))


def client_latency(seconds: DataFrame, window: str = "10 seconds",
                   by_address: bool = True) -> DataFrame:
    """Per window (and address): messages received and the latency estimates (see the module
    docstring). Columns: window_start, window_end, [address,] received, lat_p50_us, lat_p99_us."""
    rx = seconds.filter((F.col("role") == "receiver") & (F.col("received") > 0))
    keys = [F.window("event_time", window)] + ([F.col("address")] if by_address else [])
    timed = F.col("p50_us").isNotNull()
    agg = rx.groupBy(*keys).agg(
        F.sum("received").alias("received"),
        F.expr("percentile(CASE WHEN p50_us IS NOT NULL THEN p50_us END, 0.5, "
               "CASE WHEN p50_us IS NOT NULL THEN received ELSE 0 END)").alias("_p50"),
        F.max(F.when(timed, F.col("p99_us"))).alias("lat_p99_us"))
    return (_window_cols(agg).withColumn("lat_p50_us", F.col("_p50").cast("double"))
            .drop("_p50"))


def with_latency(throughput: DataFrame, latency: DataFrame) -> DataFrame:
    """Left-join client latency onto a throughput table by window (and address when both have
    it): adds client_received, lat_p50_us, lat_p99_us (null where no receiver reported)."""
    keys = ["window_start", "window_end"]
    if "address" in throughput.columns and "address" in latency.columns:
        keys.append("address")
    lat = latency.withColumnRenamed("received", "client_received")
    return throughput.join(lat, on=keys, how="left")


def reconcile(address_tp: DataFrame, seconds: DataFrame, window: str = "10 seconds") -> DataFrame:
    """Clients vs router per window and address, for the addresses the clients used.

    client_sent / client_settled: loadgen senders' ``sent`` / ``settled``; client_received:
    receivers' ``received``; router_ingress / router_egress: the address's deliveriesIngress /
    deliveriesEgress deltas summed over routers. Gaps (0 when everything adds up):
    ingress_gap = client_sent - router_ingress, egress_gap = router_egress - client_received,
    and the same from the start of the data (cum_ingress_gap, cum_egress_gap), which separates
    messages counted one window apart (the per-window gap returns to 0 in the cumulative one)
    from messages really lost. Window widths must match address_tp's.
    """
    is_sender = F.col("role") == "sender"
    client = _window_cols(seconds.groupBy(F.window("event_time", window), "address").agg(
        F.coalesce(_sum_if(is_sender, "sent"), F.lit(0)).alias("client_sent"),
        F.coalesce(_sum_if(is_sender, "settled"), F.lit(0)).alias("client_settled"),
        F.coalesce(_sum_if(F.col("role") == "receiver", "received"), F.lit(0))
        .alias("client_received")))
    router = address_tp.groupBy("window_start", "window_end", "address").agg(
        F.coalesce(F.sum("ingress"), F.lit(0)).alias("router_ingress"),
        F.coalesce(F.sum("egress"), F.lit(0)).alias("router_egress"))
    keys = ["window_start", "window_end", "address"]
    joined = (client.join(router, on=keys, how="full")
              .join(client.select("address").distinct(), on="address", how="left_semi"))
    counts = ("client_sent", "client_settled", "client_received", "router_ingress",
              "router_egress")
    for c in counts:
        joined = joined.withColumn(c, F.coalesce(F.col(c), F.lit(0)))
    joined = (joined.withColumn("ingress_gap", F.col("client_sent") - F.col("router_ingress"))
              .withColumn("egress_gap", F.col("router_egress") - F.col("client_received")))
    running = (Window.partitionBy("address").orderBy("window_start")
               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (joined.withColumn("cum_ingress_gap", F.sum("ingress_gap").over(running))
            .withColumn("cum_egress_gap", F.sum("egress_gap").over(running))
            .select(*keys, *counts, "ingress_gap", "egress_gap", "cum_ingress_gap",
                    "cum_egress_gap"))
