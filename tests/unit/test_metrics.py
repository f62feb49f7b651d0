"""Metrics: "router-metrics/1" interval records, Prometheus text, the rotating JSON-lines sink.

No processes, no sockets; the sink writes to pytest's tmp_path.
"""
from __future__ import annotations

import json
import re

import pytest

from agent import metrics
from agent.metrics import (
    ADDRESS_COUNTERS, KINDS, LINK_COUNTERS, ROUTER_COUNTERS, SCHEMA, prometheus_text,
    snapshot_records)
from agent.metrics_sink import MetricsSink
from router_core.core import RouterCore


def router(**counters):
    base = {"id": "R1", "area": "0", "mode": "standalone", "addrCount": 1, "linkCount": 2,
            "connectionCount": 1}
    base.update({name: 0 for name in ROUTER_COUNTERS})
    base.update(counters)
    return base


def address(key, **counters):
    base = {"identity": key, "name": key, "key": key, "distribution": "balanced",
            "subscriberCount": 1, "remoteCount": 0, "containerCount": 0}
    base.update({name: 0 for name in ADDRESS_COUNTERS})
    base.update(counters)
    return base


def link(identity, direction, owning, **counters):
    base = {"identity": str(identity), "name": f"l{identity}", "linkName": f"l{identity}",
            "linkDir": direction, "owningAddr": owning, "connectionId": 1, "capacity": 250,
            "undeliveredCount": 0, "unsettledCount": 0, "creditAvailable": 250}
    base.update({name: 0 for name in LINK_COUNTERS})
    base.update(counters)
    return base


def snap(routers, addresses=(), links=()):
    return {"router": routers, "addresses": list(addresses), "links": list(links),
            "connections": []}


FIRST = snap(router(deliveriesIngress=100, deliveriesEgress=90, acceptedDeliveries=80),
             [address("M0q1", deliveriesIngress=100, deliveriesEgress=90)],
             [link(5, "in", "M0q1", deliveryCount=100, acceptedCount=80),
              link(6, "out", "M0q1", deliveryCount=90)])
SECOND = snap(router(deliveriesIngress=150, deliveriesEgress=130, acceptedDeliveries=120),
              [address("M0q1", deliveriesIngress=150, deliveriesEgress=130),
               address("Ltemp", deliveriesIngress=7)],
              [link(5, "in", "M0q1", deliveryCount=150, acceptedCount=120),
               link(6, "out", "M0q1", deliveryCount=40),  # reset: identity reused
               link(7, "out", None, deliveryCount=3)])


def by_key(records, kind):
    return {r["key"]: r for r in records if r["kind"] == kind}


# records -------------------------------------------------------------------------------

def test_record_common_keys_and_order():
    recs = snapshot_records(FIRST, "R1", 1000.5, 10, None)
    assert [(r["kind"], r["key"]) for r in recs] == [
        ("router", "R1"), ("address", "M0q1"), ("link", "5"), ("link", "6")]
    for r in recs:
        assert r["schema"] == SCHEMA == "router-metrics/1"
        assert r["ts"] == 1000.5 and isinstance(r["ts"], float)
        assert r["router_id"] == "R1" and r["interval_s"] == 10.0
    assert json.loads(json.dumps(recs)) == recs


def test_record_keys_per_kind_are_stable():
    recs = snapshot_records(SECOND, "R1", 2.0, 1.0, FIRST)
    for r in recs:
        counters, gauges, attrs, _ = KINDS[r["kind"]]
        expected = set(metrics.COMMON_KEYS) | set(counters) | set(gauges) | set(attrs) | {
            "d_" + c for c in counters}
        assert set(r) == expected, r["kind"]


def test_first_sample_has_null_deltas_and_cumulative_counters():
    recs = snapshot_records(FIRST, "R1", 10.0, 10.0, None)
    rtr = by_key(recs, "router")["R1"]
    assert rtr["deliveriesIngress"] == 100 and rtr["acceptedDeliveries"] == 80
    assert rtr["connectionCount"] == 1 and rtr["address"] is None
    assert all(rtr["d_" + c] is None for c in ROUTER_COUNTERS)
    addr = by_key(recs, "address")["M0q1"]
    assert addr["address"] == "q1" and addr["distribution"] == "balanced"
    assert addr["deliveriesIngress"] == 100 and addr["d_deliveriesIngress"] is None


def test_first_sample_against_an_empty_baseline_counts_everything():
    """``{}``: the counters were zero interval_s ago (a freshly started router)."""
    recs = snapshot_records(FIRST, "R1", 10.0, 10.0, {})
    rtr = by_key(recs, "router")["R1"]
    assert all(rtr["d_" + c] == rtr[c] for c in ROUTER_COUNTERS)
    assert rtr["d_deliveriesIngress"] == 100
    assert by_key(recs, "address")["M0q1"]["d_deliveriesIngress"] == 100


def test_deltas_against_previous_snapshot():
    recs = snapshot_records(SECOND, "R1", 20.0, 10.0, FIRST)
    rtr = by_key(recs, "router")["R1"]
    assert rtr["d_deliveriesIngress"] == 50
    assert rtr["d_deliveriesEgress"] == 40
    assert rtr["d_acceptedDeliveries"] == 40
    assert rtr["d_rejectedDeliveries"] == 0
    addrs = by_key(recs, "address")
    assert addrs["M0q1"]["d_deliveriesIngress"] == 50
    assert addrs["M0q1"]["d_deliveriesEgress"] == 40
    assert addrs["Ltemp"]["d_deliveriesIngress"] == 7      # new address: all of it is new
    assert addrs["Ltemp"]["address"] == "Ltemp"            # not mobile: the key as it is
    links = by_key(recs, "link")
    assert links["5"]["d_deliveryCount"] == 50 and links["5"]["d_acceptedCount"] == 40
    assert links["5"]["linkDir"] == "in" and links["5"]["owningAddr"] == "M0q1"
    assert links["5"]["address"] == "q1"
    assert links["6"]["d_deliveryCount"] == 40             # went down: counter reset
    assert links["7"]["d_deliveryCount"] == 3 and links["7"]["address"] is None


def test_bytes_fields_only_when_present():
    plain = snapshot_records(SECOND, "R1", 2.0, 1.0, FIRST)
    assert not any(k.startswith(("bytes", "d_bytes")) for r in plain for k in r)
    first = snap(router(bytesIngress=1000), [address("M0q1", bytesIngress=1000)],
                 [link(5, "in", "M0q1", bytesCount=1000)])
    second = snap(router(bytesIngress=4000), [address("M0q1", bytesIngress=4000)],
                  [link(5, "in", "M0q1", bytesCount=4000)])
    recs = snapshot_records(second, "R1", 2.0, 1.0, first)
    assert by_key(recs, "router")["R1"]["d_bytesIngress"] == 3000
    assert by_key(recs, "address")["M0q1"]["bytesIngress"] == 4000
    assert by_key(recs, "link")["5"]["d_bytesCount"] == 3000
    assert "bytesEgress" not in by_key(recs, "router")["R1"]


def test_records_from_a_real_core_snapshot():
    """The attribute names the records read are the ones the core's snapshot has."""
    from test_core import Harness

    h = Harness(RouterCore)
    h.conn(1).sender(10, 1, "q1").receiver(11, 1, "q1", credit=10)
    before = h.snap()
    h.send(10)
    h.send(10)
    h.effects()
    recs = snapshot_records(h.snap(), "R1", 5.0, 1.0, before)
    for r in recs:
        counters, gauges, _, _ = KINDS[r["kind"]]
        missing = [k for k in counters + gauges if r[k] is None]
        assert not missing, (r["kind"], missing)
    assert by_key(recs, "address")["M0q1"]["d_deliveriesIngress"] == 2
    assert by_key(recs, "router")["R1"]["d_deliveriesEgress"] == 2
    assert by_key(recs, "link")["10"]["d_deliveryCount"] == 2


# Prometheus ----------------------------------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({_NAME})(\{{(?:{_LABEL}(?:,{_LABEL})*)?\}})? "
                    r"(-?[0-9.eE+-]+|NaN|[+-]Inf)$")
HELP = re.compile(rf"^# HELP ({_NAME}) (.*)$")
TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$")
LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class _Samples(dict):
    """{(name, labels): value}; the order of the labels does not matter (it has no meaning in
    the text format)."""

    def __setitem__(self, key, value):
        super().__setitem__((key[0], frozenset(key[1])), value)

    def __getitem__(self, key):
        return super().__getitem__((key[0], frozenset(key[1])))

    def __contains__(self, key):
        return super().__contains__((key[0], frozenset(key[1])))


def parse_prometheus(text):
    """A strict little parser of the text format: {(name, labels): value}, {name: type}."""
    assert text.endswith("\n")
    samples, types, seen_family, current = _Samples(), {}, set(), None
    for line in text[:-1].split("\n"):
        if m := HELP.match(line):
            assert m.group(1) not in seen_family, f"family {m.group(1)} split"
            seen_family.add(m.group(1))
            current = m.group(1)
            continue
        if m := TYPE.match(line):
            assert m.group(1) == current, "TYPE must follow its HELP"
            types[current] = m.group(2)
            continue
        m = SAMPLE.match(line)
        assert m, f"bad line: {line!r}"
        assert m.group(1) == current, f"sample {m.group(1)} outside its family"
        labels = tuple((k, re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e[1], e[1]), v))
                       for k, v in LABEL_PAIR.findall(m.group(2) or ""))
        key = (m.group(1), labels)
        assert key not in samples, f"duplicate sample {key}"
        samples[key] = float(m.group(3))
    return samples, types


def test_prometheus_router_families():
    text = prometheus_text(SECOND, "R1", 12.5)
    samples, types = parse_prometheus(text)
    r = (("router", "R1"),)
    assert samples[("qdr_deliveries_total", r + (("outcome", "accepted"),))] == 120
    assert samples[("qdr_deliveries_total", r + (("outcome", "rejected"),))] == 0
    # 1.19's names are 1.19's families, unlabelled as 1.19 writes them
    assert samples[("qdr_deliveries_ingress_total", ())] == 150
    assert samples[("qdr_deliveries_egress_total", ())] == 130
    assert samples[("qdr_deliveries_transit_total", ())] == 0
    assert samples[("qdr_accepted_deliveries_total", ())] == 120
    assert samples[("qdr_links_total", ())] == 2
    assert types["qdr_links_total"] == "gauge" and types["qdr_deliveries_stuck_total"] == "gauge"
    assert samples[("qdr_deliveries_presettled_total", r)] == 0
    assert samples[("qdr_deliveries_dropped_presettled_total", r)] == 0
    assert samples[("qdr_connections", r)] == 1
    assert samples[("qdr_links", r)] == 2
    assert samples[("qdr_addresses", r)] == 1
    assert samples[("qdr_uptime_seconds", r)] == 12.5
    assert types["qdr_deliveries_total"] == "counter" and types["qdr_links"] == "gauge"
    assert all(name.endswith("_total") for name, t in types.items() if t == "counter")


def test_prometheus_address_and_link_families():
    samples, _ = parse_prometheus(prometheus_text(SECOND, "R1", 1))
    assert samples[("qdr_address_deliveries_ingress_total",
                    (("router", "R1"), ("address", "M0q1")))] == 150
    assert samples[("qdr_address_deliveries_egress_total",
                    (("router", "R1"), ("address", "Ltemp")))] == 0
    ll = (("router", "R1"), ("link", "5"), ("address", "M0q1"), ("dir", "in"))
    assert samples[("qdr_link_deliveries_total", ll)] == 150
    assert samples[("qdr_link_outcomes_total", ll + (("outcome", "accepted"),))] == 120
    assert samples[("qdr_link_deliveries_total",
                    (("router", "R1"), ("link", "7"), ("address", ""), ("dir", "out")))] == 3


def test_prometheus_escapes_label_values():
    nasty = 'a"b\\c\nd'
    text = prometheus_text(snap(router(), [address(nasty, deliveriesIngress=3)]), 'R"1', 0)
    assert 'address="a\\"b\\\\c\\nd"' in text and 'router="R\\"1"' in text
    samples, _ = parse_prometheus(text)
    assert samples[("qdr_address_deliveries_ingress_total",
                    (("router", 'R"1'), ("address", nasty)))] == 3


def test_prometheus_of_a_real_core_snapshot_parses():
    from test_core import Harness

    h = Harness(RouterCore)
    h.conn(1).sender(10, 1, "q1").receiver(11, 1, "q1", credit=10)
    h.send(10)
    samples, _ = parse_prometheus(prometheus_text(h.snap(), "R1", 3.0))
    assert samples[("qdr_deliveries_ingress_total", ())] == 1
    assert samples[("qdr_allocator_qdr_link_t:total_alloc_from_heap_bytes", ())] == 2


# sink ----------------------------------------------------------------------------------

def rec(i, pad=0):
    return {"schema": SCHEMA, "ts": float(i), "router_id": "R1", "kind": "router", "key": "R1",
            "pad": "x" * pad}


def test_sink_appends_json_lines(tmp_path):
    sink = MetricsSink(tmp_path, "R1")
    assert sink.write([rec(1), rec(2)]) > 0
    sink.write([rec(3)])
    sink.write([])
    path = tmp_path / "router-metrics-R1.jsonl"
    assert sink.files() == [path]
    lines = path.read_text().splitlines()
    assert [json.loads(line)["ts"] for line in lines] == [1.0, 2.0, 3.0]


def test_sink_rotation_is_bounded(tmp_path):
    sink = MetricsSink(tmp_path, "R1", max_bytes=1000, keep_files=3)
    line_len = len(json.dumps(rec(0, pad=100), separators=(",", ":"))) + 1
    for i in range(200):
        sink.write([rec(i, pad=100)])
        assert all(p.stat().st_size <= 1000 for p in sink.files())
        assert len(sink.files()) <= 4
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 4 and "router-metrics-R1.jsonl" in names
    numbers = sink.rotated_numbers()
    assert numbers == list(range(numbers[0], numbers[0] + 3))   # newest kept, never renamed
    per_file = 1000 // line_len
    assert numbers[-1] == -(-200 // per_file) - 1
    # everything still on disk is the newest records, in order, none twice
    ts = [json.loads(line)["ts"] for p in sink.files() for line in p.read_text().splitlines()]
    assert ts == [float(i) for i in range(200 - len(ts), 200)]


def test_sink_numbering_continues_after_restart(tmp_path):
    sink = MetricsSink(tmp_path, "R1", max_bytes=200, keep_files=10)
    for i in range(10):
        sink.write([rec(i, pad=120)])
    before = sink.rotated_numbers()
    again = MetricsSink(tmp_path, "R1", max_bytes=200, keep_files=10)
    again.write([rec(99, pad=120)])
    assert again.rotated_numbers() == before + [before[-1] + 1]


def test_sink_keep_zero_and_oversized_write(tmp_path):
    sink = MetricsSink(tmp_path, "R/1", max_bytes=100, keep_files=0)
    sink.write([rec(1, pad=300)])                 # bigger than max_bytes: a file of its own
    sink.write([rec(2)])
    assert [p.name for p in sink.files()] == ["router-metrics-R_1.jsonl"]
    assert json.loads(sink.path.read_text())["ts"] == 2.0


def test_sink_explicit_rotate(tmp_path):
    sink = MetricsSink(tmp_path, "R1", keep_files=2)
    sink.rotate()                                  # nothing to close yet
    assert sink.files() == []
    sink.write([rec(1)])
    sink.rotate()
    assert [p.name for p in sink.files()] == ["router-metrics-R1.jsonl.1"]


def test_sink_close_leaves_no_active_file(tmp_path):
    """The router stopped: its records are all in closed files (the streaming job reads
    those), numbered on after the rotated ones; without history the file stays."""
    sink = MetricsSink(tmp_path, "R1", keep_files=5)
    sink.write([rec(1)])
    sink.rotate()
    sink.write([rec(2)])
    sink.close()
    assert [p.name for p in sink.files()] == ["router-metrics-R1.jsonl.1",
                                              "router-metrics-R1.jsonl.2"]
    assert json.loads((tmp_path / "router-metrics-R1.jsonl.2").read_text())["ts"] == 2.0
    keep_none = MetricsSink(tmp_path / "none", "R1", keep_files=0)
    keep_none.write([rec(3)])
    keep_none.close()
    assert [p.name for p in keep_none.files()] == ["router-metrics-R1.jsonl"]


@pytest.mark.parametrize("kwargs", [{"max_bytes": 0}, {"keep_files": -1}])
def test_sink_rejects_bad_bounds(tmp_path, kwargs):
    with pytest.raises(ValueError):
        MetricsSink(tmp_path, "R1", **kwargs)
