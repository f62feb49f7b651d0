"""Exact totals from final records, internal addresses, the network view (pure transforms).

Records come from ``agent.metrics.snapshot_records`` over synthetic snapshots with a "gone" ring,
as the router's agent writes them.
"""
from __future__ import annotations

from spark_support import skip_unless_spark

skip_unless_spark()

import pytest  # noqa: E402
from pyspark.sql import Row  # noqa: E402

from pipelines import schemas, transforms as tf  # noqa: E402
from spark_support import spark  # noqa: E402,F401  (the fixture)
from spark_support import T0, _address, _router  # noqa: E402
from agent.metrics import snapshot_records  # noqa: E402

W = "10 seconds"


def gone(seq, at, kind="address", **view):
    return dict(view, seq=seq, kind=kind, goneAt=at)


def samples():
    """R1, sampled at T0, T0+10, T0+20 (core clock = unix time - T0 + 100):
    q1 counts 40 by T0+10, then 10 more and goes (gone at T0+12), comes back and counts 5;
    q2 lives only between T0+13 and T0+15 (7 messages); $management and _topo traffic too.
    R2 (same network) forwards q1: transit 45 by T0+20."""
    s0 = {"router": _router(id="R1"), "addresses": [], "links": [], "connections": [],
          "gone": [], "now": 100.0}
    s1 = {"router": _router(id="R1", deliveriesIngress=40 + 3),
          "addresses": [_address("M0q1", deliveriesIngress=40, deliveriesEgress=40),
                        _address("L$management", deliveriesIngress=3)],
          "links": [], "connections": [], "gone": [], "now": 110.0}
    s2 = {"router": _router(id="R1", deliveriesIngress=40 + 10 + 7 + 5 + 3 + 9),
          "addresses": [_address("M0q1", deliveriesIngress=5, deliveriesEgress=5),
                        _address("L$management", deliveriesIngress=3),
                        _address("M0_topo/0/R2/x", deliveriesIngress=9)],
          "links": [], "connections": [],
          "gone": [gone(1, 112.0, **_address("M0q1", deliveriesIngress=50, deliveriesEgress=50)),
                   gone(2, 115.0, **_address("M0q2", deliveriesIngress=7, deliveriesEgress=7)),
                   gone(3, 116.0, kind="connection", identity="4", container="c4",
                        host="h", role="normal", dir="in", uptimeSeconds=3)],
          "now": 120.0}
    recs, prev = [], None
    for i, snap in enumerate((s0, s1, s2)):
        recs += snapshot_records(snap, "R1", T0 + 10 * i, 10.0, prev)
        prev = snap
    r2 = [{"router": _router(id="R2", deliveriesTransit=t),
           "addresses": [_address("M0q1", deliveriesTransit=t)], "links": [],
           "connections": [], "gone": [], "now": 0.0} for t in (0, 20, 45)]
    prev = None
    for i, snap in enumerate(r2):
        recs += snapshot_records(snap, "R2", T0 + 10 * i, 10.0, prev)
        prev = snap
    return recs


@pytest.fixture(scope="module")
def metrics(spark):
    rows = samples()
    rows += [r for r in rows if r["final"]]  # written twice (two sinks): counted once
    df = spark.createDataFrame(
        [Row(**{f.name: r.get(f.name) for f in schemas.METRICS_SCHEMA.fields}) for r in rows],
        schemas.METRICS_SCHEMA)
    return tf.with_counter_deltas(tf.dedup_final(tf.metrics_records(df))).cache()


def test_counter_totals_are_exact_per_incarnation(metrics):
    got = {(r["router_id"], r["key"]): r for r in tf.counter_totals(metrics).collect()}
    q1 = got[("R1", "M0q1")]
    assert (q1["deliveriesIngress"], q1["incarnations"], q1["gone"]) == (55, 2, 1)
    assert got[("R1", "M0q2")]["deliveriesIngress"] == 7
    assert got[("R2", "M0q1")]["deliveriesTransit"] == 45
    router = {r["router_id"]: r for r in tf.counter_totals(metrics, "router").collect()}
    assert router["R1"]["deliveriesIngress"] == 74


def test_windowed_deltas_add_up_to_the_totals(metrics):
    at = tf.address_throughput(metrics, W)
    q1 = at.filter("router_id = 'R1' AND key = 'M0q1'").agg({"ingress": "sum"}).first()[0]
    assert q1 == 55
    q2 = at.filter("key = 'M0q2'").collect()
    assert [(r["ingress"], r["covered_s"]) for r in q2] == [(7, 10.0)]  # final only
    w2 = at.filter("router_id = 'R1' AND key = 'M0q1'").orderBy("window_start").collect()[-1]
    assert w2["covered_s"] == 10.0  # the final record does not double the time covered


def test_connection_final_records(metrics):
    conns = metrics.filter("kind = 'connection'").collect()
    assert [(r["key"], r["container"], r["final"], r["seq"]) for r in conns] == [
        ("4", "c4", True, 3)]
    assert conns[0]["gone_ts"] == pytest.approx(T0 + 16.0)


def test_top_addresses_leave_internal_ones_out(metrics):
    at = tf.address_throughput(metrics, W)
    assert [r["address"] for r in tf.top_addresses(at, 10).collect()] == ["q1", "q2"]
    everything = [r["address"] for r in tf.top_addresses(at, 10, internal=True).collect()]
    assert set(everything) == {"q1", "q2", "_topo/0/R2/x", "$management"}
    assert {r["key"] for r in tf.without_internal(at).collect()} == {"M0q1", "M0q2"}


def test_internal_patterns(spark):
    """One rule on the key: management (1.19's agent address $_management_internal too), the
    routing protocol, router/topological/area keys; a receiver's dynamic address is not."""
    internal = ["L$management", "L$_management_internal", "M0$management", "L_$qd.x",
                "Lqdrouter", "Lqdrouter.ma", "Lqdhello", "Tqdrouter", "M0qdrouter.ma",
                "M0_topo/0/A/b", "RRouter.B", "T0/all", "AArea2"]
    users = ["M0orders", "M0management", "Ltemp.x", "M1orders", "L_local_user"]
    df = spark.createDataFrame([(k,) for k in internal + users], "key string")
    got = {r["key"]: r["i"] for r in df.select("key", tf.is_internal(df["key"]).alias("i"))
           .collect()}
    assert [k for k, v in got.items() if v] == internal


def test_address_text_without_the_class_prefix(spark):
    """Local keys lose their class character as mobile ones lose class and phase, whatever
    the producer wrote in ``address`` (records written before kept ``Ltemp.x``)."""
    recs = [{"schema": "router-metrics/1", "ts": 1.0, "router_id": "R", "kind": "address",
             "key": key, "address": written, "final": False}
            for key, written in (("M0orders", "orders"), ("Ltemp.x", "Ltemp.x"),
                                 ("L$_management_internal", "L$_management_internal"),
                                 ("M1orders", "orders"))]
    recs.append({"schema": "router-metrics/1", "ts": 1.0, "router_id": "R", "kind": "link",
                 "key": "7", "owningAddr": "Ltemp.y", "address": "Ltemp.y", "final": False})
    recs.append({"schema": "router-metrics/1", "ts": 1.0, "router_id": "R", "kind": "router",
                 "key": "R", "address": None, "final": False})
    df = tf.metrics_records(spark.createDataFrame(
        [Row(**{f.name: r.get(f.name) for f in schemas.METRICS_SCHEMA.fields}) for r in recs],
        schemas.METRICS_SCHEMA))
    assert [r["address"] for r in df.collect()] == [
        "orders", "temp.x", "$_management_internal", "orders", "temp.y", None]


def test_network_view(metrics):
    rt = tf.router_throughput(metrics, W)
    net = tf.network_throughput(rt).collect()
    assert [(r["routers"], r["transit"]) for r in net] == [(2, 20), (2, 25)]
    hops = tf.transit_hops(tf.counter_totals(metrics)).collect()
    assert [(r["router_id"], r["address"], r["transit"]) for r in hops] == [("R2", "q1", 45)]


def test_reconcile_totals(spark, metrics):
    lines = [{"schema": "loadgen/1", "role": "sender", "address": "q1",
              "per_second": [{"t": T0 + 1, "sent": 50, "settled": 50, "received": 0},
                             {"t": T0 + 15, "sent": 5, "settled": 5, "received": 0}]},
             {"schema": "loadgen/1", "role": "receiver", "address": "q1",
              "per_second": [{"t": T0 + 2, "sent": 0, "settled": 0, "received": 55}]}]
    seconds = tf.loadgen_seconds(spark.createDataFrame(lines, schemas.LOADGEN_SCHEMA))
    rows = tf.reconcile_totals(tf.counter_totals(metrics), seconds).collect()
    assert [(r["address"], r["client_sent"], r["router_ingress"], r["router_egress"],
             r["client_received"], r["not_counted_in"], r["not_received"]) for r in rows] == [
        ("q1", 55, 55, 55, 55, 0, 0)]


def test_message_paths_and_hops(spark, metrics):
    """Receivers' --record-trace paths: per route, and per hop beside the router's transit
    (R2 sent on 45 deliveries of q1; two receivers got 40 and 5 of them through R2 > R1)."""
    def line(role, address, paths):
        rec = {"schema": "loadgen/1", "role": role, "address": address, "paths": paths}
        return {f.name: rec.get(f.name) for f in schemas.LOADGEN_SCHEMA.fields}
    lines = [line("receiver", "q1", [{"path": ["R2", "R1"], "count": 40},
                                     {"path": ["R1"], "count": 10}]),
             line("receiver", "q1", [{"path": ["R2", "R1"], "count": 5}]),
             line("receiver", "q9", None),
             line("sender", "q1", None)]
    paths = tf.message_paths(spark.createDataFrame(lines, schemas.LOADGEN_SCHEMA))
    assert [(r["address"], r["path"], r["route"], r["hops"], r["messages"])
            for r in paths.collect()] == [("q1", ["R2", "R1"], "R2 > R1", 1, 45),
                                          ("q1", ["R1"], "R1", 0, 10)]
    hops = tf.message_hops(paths, tf.counter_totals(metrics)).collect()
    assert [(r["address"], r["from_router"], r["to_router"], r["messages"], r["router_transit"])
            for r in hops] == [("q1", "R2", "R1", 45, 45)]

