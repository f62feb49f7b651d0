"""Exact counters: the core's ring of "gone" records, final records, the crash-safe sink.

Both core builds (pure and compiled); no processes, no sockets (the sink writes to tmp_path).
"""
from __future__ import annotations

import json
import re

import pytest

from agent.metrics import snapshot_records
from agent.metrics_sink import MetricsSink
from router_core.corestate import GONE_MAX
from common.ipc import ConnClosed, LinkDetach
from common.metrics_schema import INTERNAL_KEY
from test_core import BUILDS, Harness


@pytest.fixture(params=BUILDS)
def h(request):
    return Harness(request.param)


def by(records, kind, final=None):
    return [r for r in records if r["kind"] == kind and (final is None or r["final"] is final)]


def test_gone_ring_keeps_final_views_non_destructively(h):
    h.conn(1).sender(10, 1, "q1").receiver(11, 1, "q1", credit=10)
    for _ in range(3):
        h.send(10)
    h.effects()
    assert h.core.snapshot(0)["gone"] == []
    h.do(LinkDetach(11, True, ""))
    h.do(ConnClosed(1, "bye"))
    gone = h.core.snapshot(0)["gone"]
    assert [(g["seq"], g["kind"]) for g in gone] == [
        (1, "link"), (2, "address"), (3, "link"), (4, "connection")]
    out_link = gone[0]
    assert out_link["identity"] == "11" and out_link["deliveryCount"] == 3
    assert out_link["linkDir"] == "out" and out_link["owningAddr"] == "M0q1"
    addr = gone[1]
    assert addr["key"] == "M0q1" and addr["deliveriesIngress"] == 3
    assert addr["deliveriesEgress"] == 3 and addr["distribution"] == "balanced"
    assert gone[3]["identity"] == "1" and gone[3]["container"] == "c1"
    assert all("goneAt" in g for g in gone)
    assert h.core.snapshot(0)["gone"] == gone  # reading does not consume
    # only the metrics sink asks for them, and only for those it has not seen
    assert h.snap()["gone"] == [] and h.snap()["goneSeq"] == 4
    assert [g["seq"] for g in h.core.snapshot(2)["gone"]] == [3, 4]


def test_gone_ring_is_bounded(h):
    h.conn(1)
    for i in range(GONE_MAX + 5):
        h.sender(100 + i, 1, "q1")
        h.do(LinkDetach(100 + i, True, ""))
    gone = h.core.snapshot(0)["gone"]
    assert len(gone) == GONE_MAX
    assert gone[-1]["seq"] == 2 * (GONE_MAX + 5)  # a link and its address each time
    assert [g["seq"] for g in gone] == sorted(g["seq"] for g in gone)


def test_final_records_make_address_totals_exact(h):
    """An address that comes and goes between samples, and one that goes after a sample:
    the sum of d_ per key equals what was sent."""
    h.conn(1).sender(10, 1, "q1").receiver(11, 1, "q1", credit=100)
    s0 = h.core.snapshot(0)
    for _ in range(5):
        h.send(10)
    h.effects()
    s1 = h.core.snapshot(0)
    for _ in range(7):
        h.send(10)
    h.do(LinkDetach(10, True, ""), LinkDetach(11, True, ""))
    # q2 comes and goes inside the next interval, q1 comes back with a new incarnation
    h.sender(20, 1, "q2").receiver(21, 1, "q2", credit=100)
    for _ in range(4):
        h.send(20)
    h.do(LinkDetach(20, True, ""), LinkDetach(21, True, ""))
    h.sender(12, 1, "q1").receiver(13, 1, "q1", credit=100)
    h.send(12)
    h.effects()
    s2 = h.core.snapshot(0)
    recs = (snapshot_records(s0, "R1", 0.0, 1.0, None) + snapshot_records(s1, "R1", 1.0, 1.0, s0)
            + snapshot_records(s2, "R1", 2.0, 1.0, s1))
    totals = {}  # of the clients' addresses: the router's own (INTERNAL_KEY) carry no traffic
    for r in by(recs, "address"):
        if r["d_deliveriesIngress"] is not None and not re.match(INTERNAL_KEY, r["key"]):
            totals[r["key"]] = totals.get(r["key"], 0) + r["d_deliveriesIngress"]
    assert totals == {"M0q1": 5 + 7 + 1, "M0q2": 4}
    finals = by(recs, "address", final=True)
    assert [(r["key"], r["deliveriesIngress"], r["d_deliveriesIngress"]) for r in finals] == [
        ("M0q1", 12, 7), ("M0q2", 4, 4)]
    live_q1 = [r for r in by(recs, "address", final=False)
               if r["ts"] == 2.0 and r["key"] == "M0q1"][0]
    assert live_q1["deliveriesIngress"] == 1 and live_q1["d_deliveriesIngress"] == 1
    for r in finals:
        assert r["seq"] > 0 and r["gone_ts"] is not None and r["gone_mono"] is not None
    conns = by(recs, "connection")
    assert conns == []  # the connection is still open
    json.dumps(recs, allow_nan=False)


def test_first_sample_emits_the_whole_ring_without_deltas(h):
    h.conn(1).sender(10, 1, "q1")
    h.do(ConnClosed(1, "bye"))
    recs = snapshot_records(h.core.snapshot(0), "R1", 5.0, 1.0, None)
    finals = [r for r in recs if r["final"]]
    assert [r["kind"] for r in finals] == ["address", "link", "connection"]
    assert all(r["d_deliveriesIngress"] is None for r in by(recs, "address"))
    conn = by(recs, "connection")[0]
    assert conn["key"] == "1" and conn["container"] == "c1" and conn["address"] is None


def test_restarted_core_ring_is_all_new():
    prev = {"router": {}, "gone": [{"seq": 50, "kind": "address", "key": "M0a"}]}
    now = {"router": {}, "gone": [{"seq": 1, "kind": "address", "key": "M0b",
                                   "deliveriesIngress": 3, "goneAt": 1.0}], "now": 2.0}
    finals = [r for r in snapshot_records(now, "R1", 10.0, 1.0, prev) if r["final"]]
    assert [(r["key"], r["d_deliveriesIngress"], r["gone_ts"]) for r in finals] == [
        ("M0b", 3, 9.0)]


# sink ------------------------------------------------------------------------------------

def final(seq, mono=100.0, wall=1000.0, key="M0q"):
    return {"schema": "router-metrics/1", "kind": "address", "key": key, "final": True,
            "seq": seq, "gone_mono": mono + seq, "gone_ts": wall + seq}


def lines(sink):
    return [json.loads(x) for p in sink.files() for x in p.read_text().splitlines()]


def test_sink_writes_each_final_record_once_across_restarts(tmp_path):
    sink = MetricsSink(tmp_path, "R1", max_bytes=400, keep_files=10)
    sink.write([final(1), final(2)])
    sink.write([final(1), final(2), final(3)])  # a new agent's first sample: the whole ring
    assert [r["seq"] for r in lines(sink)] == [1, 2, 3]
    again = MetricsSink(tmp_path, "R1", max_bytes=400, keep_files=10)  # agent restarted
    assert again.last_final == (3, 103.0, 1003.0)
    again.write([final(2), final(3), final(4)])
    assert [r["seq"] for r in lines(again)] == [1, 2, 3, 4]
    # a restarted core numbers from 1 again, later (monotonic clock) or after a reboot (wall)
    again.write([final(1, mono=500.0), final(2, mono=1.0, wall=5000.0)])
    assert [r["seq"] for r in lines(again)] == [1, 2, 3, 4, 1, 2]


def test_sink_cuts_a_torn_tail(tmp_path):
    sink = MetricsSink(tmp_path, "R1")
    sink.write([{"a": 1}, {"a": 2}])
    with open(sink.path, "ab") as f:
        f.write(b'{"a": 3, "tor')  # a crash in the middle of a write
    again = MetricsSink(tmp_path, "R1")
    again.write([{"a": 4}])
    assert [json.loads(x)["a"] for x in again.path.read_text().splitlines()] == [1, 2, 4]


def test_sink_rotation_fsyncs(tmp_path, monkeypatch):
    import os
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    sink = MetricsSink(tmp_path, "R1")
    sink.write([{"a": 1}])
    sink.rotate()
    assert len(synced) >= 2  # the file, then the directory
    assert [p.name for p in sink.files()] == ["router-metrics-R1.jsonl.1"]
