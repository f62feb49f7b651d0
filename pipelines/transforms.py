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
Final records
    An address, link or connection that goes away has one ``final: true`` record with its last
    counts (see ``agent.metrics``). Its d_ deltas count in the windows like any other record
    (they are the counts since the previous sample); its interval_s does not add to the time a
    window covers unless the key has no live record there (it came and went between samples).
    Exact totals (``counter_totals``) come from the cumulative counters instead of the deltas:
    per key, the last value of each incarnation (an incarnation ends at its final record, or
    where the counter goes down), summed - so the first sample's null deltas and missed
    samples lose nothing.
Addresses
    ``address`` is the key without its class prefix (``key_text``: ``M0orders`` -> ``orders``,
    ``Ltemp.x`` -> ``temp.x``), whatever the producer wrote. The router's own addresses
    (``common.metrics_schema.INTERNAL_KEY``, the console's rule too: management's ``$management`` and
    ``$_management_internal``, the routing protocol's ``qdrouter*``/``qdhello``, ``_$qd.*``,
    router, topological and area keys) are ``is_internal``; ``without_internal`` leaves them out of every per-address table, and so of
    the top addresses, the chart and the summary, unless the jobs are run with --internal.
Message paths
    Load generator receivers run with ``--record-trace`` report, per route through the routers
    (each message's ``x-opt-qd.trace`` annotation), how many messages took it:
    ``message_paths`` sums them per address and route, ``message_hops`` per hop, beside what
    the sending router counted as sent on (its address's deliveriesTransit).
Streaming
    ``with_event_time``, ``address_throughput`` and ``router_throughput`` are single windowed
    aggregations and run unchanged on streaming DataFrames (add a watermark on ``event_time``
    first). ``with_counter_deltas``, ``counter_totals``, ``top_addresses``, ``reconcile`` and
    the network view use window functions, sorting or joins of aggregates: batch only.
"""
from __future__ import annotations

import re
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from common.metrics_schema import DELTA_PREFIX, INTERNAL_KEY, KINDS
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
    return (df.withColumns({"window_start": F.col("window.start"),
                            "window_end": F.col("window.end")}).drop("window"))


# ------------------------------------------------------------------------------------------
# Router metrics
# ------------------------------------------------------------------------------------------
def metrics_records(raw: DataFrame) -> DataFrame:
    """Only well-formed "router-metrics/1" records (other lines and corrupt ones dropped);
    ``final`` is false where a producer did not write it, ``address`` is ``key_text`` of the
    address key (an address record's key, a link's owningAddr)."""
    kind = F.col("kind")
    address = (F.when(kind == "address", key_text(F.col("key")))
               .when((kind == "link") & F.col("owningAddr").isNotNull(),
                     key_text(F.col("owningAddr")))
               .otherwise(F.col("address")))
    return (raw.filter((F.col("schema") == METRICS_SCHEMA_TAG) & F.col("ts").isNotNull()
                       & kind.isNotNull() & F.col("router_id").isNotNull())
            .withColumns({"final": F.coalesce(F.col("final"), F.lit(False)),
                          "address": address}))


def dedup_final(metrics: DataFrame) -> DataFrame:
    """Each final record once (batch): a sink writes it once, but two sinks of one router
    (an agent restarted without its files) could both have; (router_id, kind, key, seq,
    gone_mono) identifies it."""
    finals = (metrics.filter(F.col("final"))
              .dropDuplicates(["router_id", "kind", "key", "seq", "gone_mono"]))
    return metrics.filter(~F.col("final")).unionByName(finals)


def key_text(key: Column) -> Column:
    """An address key without its class prefix, as qdstat -a and the console show it:
    ``M0orders`` -> ``orders`` (class and phase), ``Ltemp.x`` -> ``temp.x``, ``RR2`` -> ``R2``."""
    return F.regexp_replace(key, "^(M[0-9]|.)", "")


def is_internal(key: Column) -> Column:
    """True for the router's own addresses (``INTERNAL_KEY``): the one rule every table,
    the chart and the summary hide them by (shown with --internal)."""
    return F.coalesce(key.rlike(INTERNAL_KEY), F.lit(False))


def without_internal(per_address: DataFrame) -> DataFrame:
    """A per-address table (a ``key`` column: address_throughput, counter_totals...) without
    the router's own addresses; streaming too."""
    return per_address.filter(~is_internal(F.col("key")))


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
    w = _incarnation_order()
    counters = _counter_columns(metrics)
    # the previous record as ONE lag of a struct: a lag per counter is a window expression
    # each, and analysing two dozen of them costs more than the whole job on small input
    prev = F.lag(F.struct(*[F.col(c).alias(c) for c in ("ts", "final", *counters)])).over(w)
    df = metrics.withColumn("_prev", prev)
    no_deltas = F.coalesce(*[F.col(DELTA_PREFIX + c) for c in counters]).isNull()
    fill = no_deltas & F.col("_prev").isNotNull()
    new = {}
    for c in counters:
        before = F.col("_prev")[c]
        # after a final record the key is a new incarnation: it started at zero
        diff = (F.when(F.col(c) < before, F.col(c)).when(F.col("_prev")["final"], F.col(c))
                .otherwise(F.col(c) - before))
        new[DELTA_PREFIX + c] = F.when(fill, diff).otherwise(F.col(DELTA_PREFIX + c))
    new["interval_s"] = (F.when(fill, F.col("ts") - F.col("_prev")["ts"])
                         .otherwise(F.col("interval_s")))
    return df.withColumns(new).drop("_prev")


def _incarnation_order() -> Window:
    """A key's records in time order; within one sample, the final records (older
    incarnations, by seq) before the live one."""
    return (Window.partitionBy("router_id", "kind", "key")
            .orderBy("ts", F.col("final").desc(), F.coalesce(F.col("seq"), F.lit(0))))


def counter_totals(metrics: DataFrame, kind: str = "address") -> DataFrame:
    """Exact totals per router and key from the cumulative counters (batch): per incarnation
    its last value (it ends at a final record, where the counter goes down, or at the last
    record), summed. Columns: router_id, key, address, then one column per counter of the kind
    (``deliveriesIngress``...), plus ``incarnations`` and ``gone`` (how many ended in a final
    record)."""
    counters = [c for c in KINDS[kind][0] if c in metrics.columns]
    w = _incarnation_order()
    df = metrics.filter(F.col("kind") == kind)
    first = counters[0]
    nxt = F.lead(first).over(w)
    # a counter going down (the first one: they reset together) ends the incarnation too
    ends = F.col("final") | nxt.isNull() | (nxt < F.col(first))
    df = df.withColumn("_end", ends).filter(F.col("_end"))
    return df.groupBy("router_id", "key", "address").agg(
        *[F.coalesce(F.sum(c), F.lit(0)).alias(c) for c in counters],
        F.count(F.lit(1)).alias("incarnations"),
        F.sum(F.col("final").cast("int")).alias("gone"))


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
        # time covered: live samples; a key seen only in final records covers one interval
        F.coalesce(_sum_if(is_addr & ~F.col("final"), "interval_s"),
                   F.max(F.when(is_addr, F.col("interval_s")))).alias("covered_s"),
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
    df = df.withColumns({"ingress_per_s": _ratio(F.col("ingress"), cov),
                         "egress_per_s": _ratio(F.col("egress"), cov),
                         "bytes_ingress_per_s": _ratio(F.col("bytes_ingress"), cov),
                         "bytes_egress_per_s": _ratio(F.col("bytes_egress"), cov),
                         "settled": settled})
    return df.withColumns({f"{o}_ratio": _ratio(F.col(o), F.col("settled")) for o in OUTCOMES})


def top_addresses(address_tp: DataFrame, n: int = 10, internal: bool = False) -> DataFrame:
    """The n addresses with the most deliveries in (then out), summed over routers and windows;
    the router's internal addresses (``is_internal``) only with ``internal``.

    Columns: rank (1 = busiest), key, address, ingress, egress, ingress_share (of all ingress
    of the addresses considered).
    """
    if not internal:
        address_tp = without_internal(address_tp)
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
    joined = joined.withColumns({c: F.coalesce(F.col(c), F.lit(0)) for c in counts})
    joined = joined.withColumns({
        "ingress_gap": F.col("client_sent") - F.col("router_ingress"),
        "egress_gap": F.col("router_egress") - F.col("client_received")})
    running = (Window.partitionBy("address").orderBy("window_start")
               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (joined.withColumns({"cum_ingress_gap": F.sum("ingress_gap").over(running),
                                "cum_egress_gap": F.sum("egress_gap").over(running)})
            .select(*keys, *counts, "ingress_gap", "egress_gap", "cum_ingress_gap",
                    "cum_egress_gap"))


def reconcile_totals(address_totals: DataFrame, seconds: DataFrame) -> DataFrame:
    """Clients vs router over the whole run, per address the clients used, exact counts.

    address_totals: ``counter_totals(metrics, "address")``; seconds: ``loadgen_seconds``.
    Columns: address, client_sent, client_settled, router_ingress, router_egress,
    router_transit, client_received, not_counted_in (= client_sent - router_ingress),
    not_received (= router_egress - client_received): 0 and 0 when every count adds up."""
    is_sender = F.col("role") == "sender"
    client = seconds.groupBy("address").agg(
        F.coalesce(_sum_if(is_sender, "sent"), F.lit(0)).alias("client_sent"),
        F.coalesce(_sum_if(is_sender, "settled"), F.lit(0)).alias("client_settled"),
        F.coalesce(_sum_if(F.col("role") == "receiver", "received"), F.lit(0))
        .alias("client_received"))
    router = address_totals.groupBy("address").agg(
        F.sum("deliveriesIngress").alias("router_ingress"),
        F.sum("deliveriesEgress").alias("router_egress"),
        F.sum("deliveriesTransit").alias("router_transit"))
    joined = client.join(router, on="address", how="left")
    joined = joined.withColumns({c: F.coalesce(F.col(c), F.lit(0))
                                 for c in ("router_ingress", "router_egress", "router_transit")})
    return (joined.withColumns({
        "not_counted_in": F.col("client_sent") - F.col("router_ingress"),
        "not_received": F.col("router_egress") - F.col("client_received")})
            .select("address", "client_sent", "client_settled", "router_ingress",
                    "router_egress", "router_transit", "client_received", "not_counted_in",
                    "not_received")
            .orderBy("address"))


# ------------------------------------------------------------------------------------------
# Network view (several routers writing to the same metrics directory)
# ------------------------------------------------------------------------------------------
def network_throughput(router_tp: DataFrame) -> DataFrame:
    """Per window, the whole network: routers reporting, deliveries in from clients (ingress),
    out to clients (egress), forwarded between routers (transit, one per hop), msgs/s of each.
    Each client message counts once in ingress (at its first router) and once per receiver in
    egress, so ingress/egress are network-wide client throughput; transit/ingress is the mean
    number of router-to-router hops per message."""
    agg = router_tp.groupBy("window_start", "window_end").agg(
        F.countDistinct("router_id").alias("routers"),
        F.sum("ingress").alias("ingress"), F.sum("egress").alias("egress"),
        F.sum("transit").alias("transit"), F.max("covered_s").alias("covered_s"))
    cov = F.col("covered_s")
    return (agg.withColumns({"ingress_per_s": _ratio(F.col("ingress"), cov),
                             "egress_per_s": _ratio(F.col("egress"), cov),
                             "transit_per_s": _ratio(F.col("transit"), cov)})
            .orderBy("window_start"))


def transit_hops(address_totals: DataFrame) -> DataFrame:
    """Per router and address, exact counts from the address totals: deliveries in from local
    senders, out to local receivers, and sent on toward other routers (deliveriesTransit: the
    hops that router made). Only rows with any transit. Columns: router_id, key, address,
    ingress, egress, transit."""
    return (address_totals.filter(F.col("deliveriesTransit") > 0)
            .select("router_id", "key", "address",
                    F.col("deliveriesIngress").alias("ingress"),
                    F.col("deliveriesEgress").alias("egress"),
                    F.col("deliveriesTransit").alias("transit"))
            .orderBy("address", "router_id"))


def message_paths(loadgen: DataFrame) -> DataFrame:
    """Per address and path through the routers: the messages receivers got along it, from the
    loadgen receivers' ``paths`` (``--record-trace``: each message's x-opt-qd.trace). Columns:
    address, path (router ids in order), route (``"A > B > C"``), hops (routers passed between:
    len(path) - 1), messages. Empty when no receiver recorded paths."""
    rows = (loadgen.filter((F.col("schema") == LOADGEN_SCHEMA_TAG)
                           & (F.col("role") == "receiver") & F.col("paths").isNotNull())
            .select("address", F.explode("paths").alias("p")))
    return (rows.groupBy("address", F.col("p.path").alias("path"))
            .agg(F.sum("p.count").alias("messages"))
            .withColumns({"route": F.array_join("path", " > "),
                          "hops": F.size("path") - 1})
            .select("address", "path", "route", "hops", "messages")
            .orderBy("address", F.col("messages").desc(), "route"))


def message_hops(paths: DataFrame, address_totals: DataFrame) -> DataFrame:
    """Per address and hop (one router to the next) the messages that crossed it, from
    ``message_paths``, beside what the sending router counted as sent on for that address
    (its deliveriesTransit in ``address_totals``, null when it has no record): with one route
    per address the two are equal. Columns: address, from_router, to_router, messages,
    router_transit."""
    hop = F.expr("transform(sequence(1, size(path) - 1), "
                 "i -> named_struct('from_router', path[i - 1], 'to_router', path[i]))")
    hops = (paths.filter(F.size("path") >= 2)
            .select("address", "messages", F.explode(hop).alias("h"))
            .groupBy("address", "h.from_router", "h.to_router")
            .agg(F.sum("messages").alias("messages")))
    transit = (address_totals.groupBy(F.col("router_id").alias("from_router"), "address")
               .agg(F.sum("deliveriesTransit").alias("router_transit")))
    return (hops.join(transit, on=["from_router", "address"], how="left")
            .select("address", "from_router", "to_router", "messages", "router_transit")
            .orderBy("address", "from_router", "to_router"))
