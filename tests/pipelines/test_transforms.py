"""The pure transforms on small generated DataFrames, with exact expected numbers.

The scenario is described in spark_support's docstring.
"""
from __future__ import annotations

from datetime import datetime

import pytest

from spark_support import skip_unless_spark

skip_unless_spark()

from pyspark.sql import Row  # noqa: E402

from pipelines import schemas, transforms as tf  # noqa: E402
from spark_support import spark  # noqa: E402,F401  (the fixture)
from spark_support import T0, loadgen_lines, metrics_records  # noqa: E402

W = "10 seconds"


def at(offset: int) -> datetime:
    # PySpark returns timestamps as naive datetimes in the local time zone of this process
    return datetime.fromtimestamp(T0 + offset)


@pytest.fixture(scope="module")
def metrics(spark):
    rows = metrics_records() + [{"schema": "other/1", "ts": 1.0, "kind": "router",
                                 "router_id": "X"}]
    return tf.metrics_records(spark.createDataFrame(
        [Row(**{f.name: r.get(f.name) for f in schemas.METRICS_SCHEMA.fields}) for r in rows],
        schemas.METRICS_SCHEMA)).cache()


@pytest.fixture(scope="module")
def seconds(spark):
    df = spark.createDataFrame(loadgen_lines(), schemas.LOADGEN_SCHEMA)
    return tf.loadgen_seconds(df).cache()


@pytest.fixture(scope="module")
def address_tp(metrics):
    return tf.address_throughput(metrics, W).cache()


def rows_by(df, *keys):
    return {tuple(r[k] for k in keys): r.asDict() for r in df.collect()}


def test_window_duration():
    assert tf.window_duration("10s") == "10 seconds"
    assert tf.window_duration("1m") == "1 minutes"
    assert tf.window_duration("500ms") == "500 milliseconds"
    assert tf.window_duration("2 hours") == "2 hours"


def test_metrics_records_drops_foreign_lines(metrics):
    assert metrics.filter("router_id = 'X'").count() == 0
    assert metrics.count() == len(metrics_records())


def test_event_time_is_the_middle_of_the_interval(metrics):
    r = tf.with_event_time(metrics).filter("router_id = 'R1' AND kind = 'router'") \
        .orderBy("ts").collect()
    assert [x["event_time"] for x in r] == [at(-5), at(5), at(15), at(25)]


def test_router_throughput(metrics):
    got = rows_by(tf.router_throughput(metrics, W), "router_id", "window_start")
    assert set(got) == {("R1", at(0)), ("R1", at(10)), ("R1", at(20)),
                        ("R2", at(10)), ("R2", at(20))}      # first samples (no deltas) left out
    w1 = got[("R1", at(0))]
    assert w1["window_end"] == at(10)
    assert (w1["ingress"], w1["egress"], w1["covered_s"]) == (150, 150, 10.0)
    assert (w1["ingress_per_s"], w1["egress_per_s"]) == (15.0, 15.0)
    assert (w1["accepted"], w1["released"], w1["rejected"], w1["settled"]) == (90, 10, 0, 100)
    assert w1["accepted_ratio"] == 0.9 and w1["released_ratio"] == 0.1
    assert w1["presettled"] == 50 and w1["dropped_presettled"] == 0
    assert w1["bytes_ingress"] is None and w1["bytes_ingress_per_s"] is None
    w2, w3 = got[("R1", at(10))], got[("R1", at(20))]
    assert (w2["ingress"], w2["egress"], w2["ingress_per_s"]) == (249, 250, 24.9)
    assert (w3["ingress"], w3["accepted"], w3["accepted_ratio"]) == (351, 300, 1.0)
    r2 = got[("R2", at(20))]
    assert (r2["ingress"], r2["ingress_per_s"]) == (20, 2.0)
    assert (r2["bytes_ingress"], r2["bytes_ingress_per_s"]) == (2000, 200.0)
    assert r2["settled"] == 0 and r2["accepted_ratio"] is None


def test_address_throughput(address_tp):
    got = rows_by(address_tp, "router_id", "key", "window_start")
    assert len(got) == 3 * 2 + 2
    q1 = [got[("R1", "M0q1", at(o))] for o in (0, 10, 20)]
    assert [r["ingress"] for r in q1] == [100, 199, 301]
    assert [r["egress"] for r in q1] == [100, 200, 300]
    assert [r["ingress_per_s"] for r in q1] == [10.0, 19.9, 30.1]
    assert all(r["address"] == "q1" and r["covered_s"] == 10.0 for r in q1)
    # outcome mix from the inbound link only (the outbound link's accepted are not counted)
    assert [(r["accepted"], r["released"], r["settled"]) for r in q1] == [
        (90, 10, 100), (180, 20, 200), (300, 0, 300)]
    assert [r["accepted_ratio"] for r in q1] == [0.9, 0.9, 1.0]
    q2 = got[("R1", "M0q2", at(10))]
    assert (q2["ingress"], q2["egress"], q2["settled"], q2["accepted_ratio"]) == (50, 50, 0, None)
    q3 = got[("R2", "M0q3", at(10))]
    assert (q3["ingress"], q3["bytes_ingress"], q3["bytes_ingress_per_s"]) == (10, 1000, 100.0)
    assert q3["bytes_egress"] is None


def test_counter_deltas_filled_from_previous_records(spark, metrics):
    bare = spark.createDataFrame(
        [Row(**{f.name: r.get(f.name) for f in schemas.METRICS_SCHEMA.fields})
         for r in metrics_records(with_deltas=False)], schemas.METRICS_SCHEMA)
    assert bare.filter("d_deliveriesIngress IS NOT NULL").count() == 0
    filled = tf.with_counter_deltas(bare)
    cols = ["router_id", "kind", "key", "ts"]
    deltas = [c for c in schemas.METRICS_SCHEMA.fieldNames() if c.startswith("d_")]
    expected = rows_by(metrics.select(*cols, "interval_s", *deltas), *cols)
    assert rows_by(filled.select(*cols, "interval_s", *deltas), *cols) == expected


def test_counter_deltas_reset_and_existing_deltas(spark):
    base = {"schema": "router-metrics/1", "router_id": "R", "kind": "link", "key": "9",
            "interval_s": 5.0}
    rows = [dict(base, ts=100.0, deliveryCount=40),
            dict(base, ts=107.0, deliveryCount=50),                       # +10 over 7 s
            dict(base, ts=110.0, deliveryCount=4),                        # reset
            dict(base, ts=115.0, deliveryCount=9, d_deliveryCount=123)]   # kept as it is
    df = spark.createDataFrame(
        [Row(**{f.name: r.get(f.name) for f in schemas.METRICS_SCHEMA.fields}) for r in rows],
        schemas.METRICS_SCHEMA)
    got = [(r["d_deliveryCount"], r["interval_s"])
           for r in tf.with_counter_deltas(df).orderBy("ts").collect()]
    assert got == [(None, 5.0), (10, 7.0), (4, 3.0), (123, 5.0)]


def test_top_addresses(address_tp):
    top = tf.top_addresses(address_tp, 2).collect()
    assert [(r["rank"], r["address"], r["ingress"], r["egress"]) for r in top] == [
        (1, "q1", 600, 600), (2, "q2", 150, 150)]
    assert top[0]["ingress_share"] == pytest.approx(600 / 780)
    assert len(tf.top_addresses(address_tp, 10).collect()) == 3


def test_loadgen_seconds(seconds):
    assert seconds.count() == 60
    row = seconds.filter(f"role = 'receiver' AND t = {T0 + 29}").collect()[0]
    assert (row["address"], row["received"], row["p50_us"], row["pid"]) == ("q1", 25, 300, 102)
    assert row["event_time"] == at(29)


def test_client_latency(seconds):
    got = rows_by(tf.client_latency(seconds, W), "address", "window_start")
    assert set(got) == {("q1", at(0)), ("q1", at(10)), ("q1", at(20))}
    w1, w2, w3 = (got[("q1", at(o))] for o in (0, 10, 20))
    # equal weights over 100..109: the weighted median interpolates between 104 and 105
    assert (w1["received"], w1["lat_p50_us"], w1["lat_p99_us"]) == (100, 104.5, 509)
    assert (w2["received"], w2["lat_p50_us"], w2["lat_p99_us"]) == (200, 200.0, 900)
    # the untimed second counts as received but not in the latencies
    assert (w3["received"], w3["lat_p50_us"], w3["lat_p99_us"]) == (295, 300.0, 700)
    overall = tf.client_latency(seconds, W, by_address=False)
    assert "address" not in overall.columns and overall.count() == 3


def test_with_latency(seconds, address_tp, metrics):
    joined = tf.with_latency(address_tp, tf.client_latency(seconds, W))
    got = rows_by(joined, "key", "window_start")
    assert got[("M0q1", at(10))]["lat_p99_us"] == 900
    assert got[("M0q1", at(10))]["client_received"] == 200
    assert got[("M0q2", at(10))]["lat_p50_us"] is None
    per_router = tf.with_latency(tf.router_throughput(metrics, W),
                                 tf.client_latency(seconds, W, by_address=False))
    assert rows_by(per_router, "router_id", "window_start")[("R1", at(0))]["lat_p50_us"] == 104.5


def test_reconcile(address_tp, seconds):
    rec = tf.reconcile(address_tp, seconds, W)
    got = rows_by(rec, "address", "window_start")
    assert set(got) == {("q1", at(0)), ("q1", at(10)), ("q1", at(20))}   # q2/q3: no clients
    cols = ("client_sent", "client_settled", "router_ingress", "ingress_gap", "cum_ingress_gap",
            "router_egress", "client_received", "egress_gap", "cum_egress_gap")
    table = [tuple(got[("q1", at(o))][c] for c in cols) for o in (0, 10, 20)]
    assert table == [
        (100, 100, 100, 0, 0, 100, 100, 0, 0),
        (200, 200, 199, 1, 1, 200, 200, 0, 0),     # one message counted a window late ...
        (300, 300, 301, -1, 0, 300, 295, 5, 5),    # ... evens out; 5 never reached a receiver
    ]


def test_reconcile_router_only_window_is_kept(spark, address_tp, seconds):
    """A window where the router counted q1 but no client reported anything still shows up."""
    early = seconds.filter(f"t >= {T0 + 10}")
    got = rows_by(tf.reconcile(address_tp, early, W), "address", "window_start")
    w1 = got[("q1", at(0))]
    assert (w1["client_sent"], w1["router_ingress"], w1["ingress_gap"]) == (0, 100, -100)
