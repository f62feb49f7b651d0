"""System tests of exchanges and bindings on one router (issue 31 items 1, 2, 5): real proton
clients and management against a launched router.

* routing by subject: ``amqp`` and ``mqtt`` keys, one copy per distinct next hop, next-hop
  phases, the alternate address, unmatched messages RELEASED (pre-settled: dropped), matched ones
  ACCEPTED at once, the counters 1.19 keeps;
* management: CREATE/READ/QUERY/DELETE with 1.19's texts, deleting an exchange deletes its
  bindings, qdmanage query;
* the configuration file: refused bindings stop the start with ``FILE:LINE:``; SIGHUP reload
  adds and removes exchanges and bindings.

Every wait is bounded; every router is stopped by the fixture; every connection is closed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection, SyncRequestResponse

from clients import collect, pump_until
from conftest import RouterProcess, free_port

TIMEOUT = 10
T = "org.apache.qpid.dispatch."
EX = T + "router.config.exchange"
BD = T + "router.config.binding"

EXCHANGE_CONF = """\
exchange {
    address: Address1
    name: Exchange1
    alternateAddress: altNextHop
}
binding {
    name: binding1
    exchangeName: Exchange1
    bindingKey: a.*.b
    nextHopAddress: nextHop1
}
binding {
    name: binding2
    exchangeName: Exchange1
    bindingKey: a.#
    nextHopAddress: nextHop2
}
binding {
    name: binding3
    exchangeName: Exchange1
    bindingKey: #.b
    nextHopAddress: nextHop1
}
"""


class Mgmt:
    def __init__(self, url: str) -> None:
        self.conn = BlockingConnection(url, timeout=TIMEOUT)
        self.rr = SyncRequestResponse(self.conn, "$management")

    def call(self, props: dict, body=None) -> tuple:
        reply = self.rr.call(Message(properties=props, body=body))
        return reply.properties["statusCode"], reply.properties["statusDescription"], reply.body

    def query(self, etype: str) -> list:
        status, _, body = self.call({"operation": "QUERY", "type": "org.amqp.management",
                                     "entityType": etype}, {"attributeNames": []})
        assert status == 200
        names = body["attributeNames"]
        return [dict(zip(names, row)) for row in body["results"]]

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def opened():
    conns: list = []
    yield conns
    for c in conns:
        try:
            c.close()
        except Exception:
            pass


def connect(router, opened) -> BlockingConnection:
    c = BlockingConnection(router.url, timeout=TIMEOUT)
    opened.append(c)
    return c


def send_all(conn, snd, messages: list) -> list:
    """Send unsettled messages; the remote outcome of each (bounded wait)."""
    deliveries = [snd.link.send(m) for m in messages]
    pump_until([conn], lambda: all(d.remote_state for d in deliveries), what="outcomes")
    return [d.remote_state for d in deliveries]


def test_subjects_route_to_matching_next_hops_once_each(router_factory, opened):
    router = router_factory(extra=EXCHANGE_CONF)
    rconn = connect(router, opened)
    r1 = rconn.create_receiver("nextHop1", credit=50)
    r2 = rconn.create_receiver("nextHop2", credit=50)
    alt = rconn.create_receiver("altNextHop", credit=50)
    sconn = connect(router, opened)
    snd = sconn.create_sender("Address1")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0, what="credit on the exchange")
    subjects = ["a.x.b", "a", "a.x.y", "c.b", "z", None]
    outcomes = send_all(sconn, snd, [Message(subject=s, body=i) for i, s in enumerate(subjects)])
    # z and no subject match nothing: the alternate address takes them (still ACCEPTED)
    assert outcomes == [Delivery.ACCEPTED] * 6
    got = collect([rconn, sconn], [r1, r2, alt], expect=8)
    # a.x.b matches all three keys: nextHop1 (twice bound) gets it once, nextHop2 once
    assert sorted(got[0]) == [0, 3] and sorted(got[1]) == [0, 1, 2] and sorted(got[2]) == [4, 5]
    mgmt = Mgmt(router.url)
    try:
        ex = mgmt.query(EX)[0]
        assert (ex["name"], ex["bindingCount"], ex["receivedCount"], ex["forwardedCount"],
                ex["divertedCount"], ex["droppedCount"]) == ("Exchange1", 3, 6, 6, 2, 0)
        matched = {b["name"]: b["matchedCount"] for b in mgmt.query(BD)}
        assert matched == {"binding1": 1, "binding2": 3, "binding3": 2}
    finally:
        mgmt.close()


def test_unmatched_is_released_and_dropped_presettled(router_factory, opened):
    router = router_factory(extra="""\
        exchange {
            address: Xq
            name: X
        }
        binding {
            exchangeName: X
            bindingKey: a
            nextHopAddress: gotA
        }
        """)
    rconn = connect(router, opened)
    rcv = rconn.create_receiver("gotA", credit=10)
    sconn = connect(router, opened)
    snd = sconn.create_sender("Xq")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0, what="credit")
    assert send_all(sconn, snd, [Message(subject="b", body=1), Message(subject="a", body=2)]) \
        == [Delivery.RELEASED, Delivery.ACCEPTED]
    presettled = snd.link.send(Message(subject="b", body=3))
    presettled.settle()
    assert collect([rconn, sconn], [rcv], expect=1) == [[2]]
    mgmt = Mgmt(router.url)
    try:
        ex = mgmt.query(EX)[0]
        assert (ex["receivedCount"], ex["droppedCount"], ex["forwardedCount"]) == (3, 2, 1)
    finally:
        mgmt.close()
    # the sender was never stalled: its exchange has bindings
    assert snd.link.credit > 0


def test_mqtt_keys_and_next_hop_phase(router_factory, opened):
    router = router_factory(extra="""\
        exchange {
            address: sensors
            name: S
            matchMethod: mqtt
        }
        binding {
            exchangeName: S
            bindingKey: home/+/temp
            nextHopAddress: temps
        }
        binding {
            exchangeName: S
            bindingKey: home/#
            nextHopAddress: everything
            nextHopPhase: 1
        }
        address {
            prefix: everything
            ingressPhase: 1
            egressPhase: 1
        }
        """)
    rconn = connect(router, opened)
    temps = rconn.create_receiver("temps", credit=10)
    everything = rconn.create_receiver("everything", credit=10)  # consumes phase 1
    sconn = connect(router, opened)
    snd = sconn.create_sender("sensors")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0, what="credit")
    outcomes = send_all(sconn, snd, [Message(subject="home/kitchen/temp", body=1),
                                     Message(subject="home/kitchen", body=2),
                                     Message(subject="home.kitchen.temp", body=3)])
    assert outcomes == [Delivery.ACCEPTED, Delivery.ACCEPTED, Delivery.RELEASED]
    got = collect([rconn, sconn], [temps, everything], expect=3)
    assert got == [[1], [1, 2]]


def test_management_create_read_delete_with_1x_texts(router_factory, opened):
    router = router_factory()
    mgmt = Mgmt(router.url)
    try:
        status, _, body = mgmt.call({"operation": "CREATE", "type": EX, "name": "Exchange1"},
                                    {"address": "Address1"})
        assert status == 201 and body["identity"] == "exchange/0" and body["bindingCount"] == 0
        refusals = [
            (EX, "E2", {"address": "Address1"}, "duplicate exchange address"),
            (EX, "Exchange1", {"address": "Other"}, "duplicate exchange name"),
            (EX, "E3", {"address": "A3", "phase": 10}, "phase must be in the range 0-9"),
            (EX, "E4", {"address": "A4", "matchMethod": "foo"},
             "Exchange matchMethod must be either 'amqp' or 'mqtt'"),
            (BD, "b0", {"exchangeName": "nope", "nextHopAddress": "x"},
             "Named exchange does not exist"),
            (BD, "b0", {"exchangeName": "Exchange1"}, "No next hop specified"),
            (BD, "b0", {"exchangeName": "Exchange1", "nextHopAddress": "x", "bindingKey": "..."},
             "The binding key pattern is invalid"),
        ]
        for etype, name, attrs, text in refusals:
            status, description, _ = mgmt.call({"operation": "CREATE", "type": etype,
                                                "name": name}, attrs)
            assert (status, description) == (400, text), (attrs, status, description)
        status, _, body = mgmt.call({"operation": "CREATE", "type": BD, "name": "b1"},
                                    {"exchangeName": "Exchange1", "nextHopAddress": "x",
                                     "bindingKey": "a.b"})
        assert status == 201 and body["matchedCount"] == 0 and body["identity"] == "binding/0"
        for name, attrs, text in [
                ("b1", {"exchangeName": "Exchange1", "nextHopAddress": "y"},
                 "Duplicate next hop name"),
                ("b2", {"exchangeName": "Exchange1", "nextHopAddress": "x", "bindingKey": "a.b"},
                 "Next hop for key already exists")]:
            assert mgmt.call({"operation": "CREATE", "type": BD, "name": name}, attrs)[:2] == \
                (400, text)
        status, _, body = mgmt.call({"operation": "READ", "type": EX, "name": "Exchange1"})
        assert status == 200 and body["bindingCount"] == 1 and body["address"] == "Address1"
        assert mgmt.call({"operation": "DELETE", "type": EX, "name": "Exchange1"})[0] == 204
        assert mgmt.query(EX) == [] and mgmt.query(BD) == []
        assert mgmt.call({"operation": "READ", "type": BD, "name": "b1"})[0] == 404
        # the address is free again for a new exchange
        assert mgmt.call({"operation": "CREATE", "type": EX, "name": "Again"},
                         {"address": "Address1"})[0] == 201
    finally:
        mgmt.close()


def test_exchange_created_by_management_routes_and_credits_waiting_sender(router_factory,
                                                                          opened):
    router = router_factory()
    rconn = connect(router, opened)
    rcv = rconn.create_receiver("hop", credit=10)
    sconn = connect(router, opened)
    snd = sconn.create_sender("late")  # no destination yet: no credit
    mgmt = Mgmt(router.url)
    try:
        assert mgmt.call({"operation": "CREATE", "type": EX, "name": "L"},
                         {"address": "late"})[0] == 201
        assert snd.link.credit == 0  # an exchange without bindings is no destination
        assert mgmt.call({"operation": "CREATE", "type": BD, "name": "lb"},
                         {"exchangeName": "L", "nextHopAddress": "hop"})[0] == 201
        pump_until([sconn, rconn], lambda: snd.link.credit > 0, what="credit after binding")
        assert send_all(sconn, snd, [Message(subject="anything", body=7)]) == [Delivery.ACCEPTED]
        assert collect([rconn, sconn], [rcv], expect=1) == [[7]]
    finally:
        mgmt.close()


def test_qdmanage_query_shows_exchanges_and_bindings(router_factory):
    router = router_factory(extra=EXCHANGE_CONF)
    out = subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b",
                          f"127.0.0.1:{router.port}", "-t", "5", "query", "--type",
                          "router.config.binding"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["name"], r["identity"], r["bindingKey"], r["nextHopAddress"]) for r in rows] == [
        ("binding1", "binding/0", "a.*.b", "nextHop1"),
        ("binding2", "binding/1", "a.#", "nextHop2"),
        ("binding3", "binding/2", "#.b", "nextHop1")]


def _conf(tmp_path, port: int, body: str, name: str = "ex.conf"):
    conf = tmp_path / name
    conf.write_text(textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Router.Ex
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """) + textwrap.dedent(body))
    return conf


def test_config_file_refuses_a_binding_1x_refuses(tmp_path):
    conf = _conf(tmp_path, free_port(), """\
        exchange {
            address: A
            name: E
        }
        binding {
            exchangeName: Missing
            nextHopAddress: x
        }
        """)
    proc = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"{conf}:15: section 'binding': Named exchange does not exist" in proc.stderr


def test_reload_adds_and_removes_exchanges_and_bindings(tmp_path, opened):
    port = free_port()
    conf = _conf(tmp_path, port, EXCHANGE_CONF)
    proc = RouterProcess(conf)
    try:
        proc.wait_for_line("Operational")
        conf.write_text(conf.read_text().replace("bindingKey: a.#", "bindingKey: q.#")
                        + textwrap.dedent("""\
                        exchange {
                            address: Address2
                            name: Exchange2
                        }
                        binding {
                            name: only
                            exchangeName: Exchange2
                            nextHopAddress: nextHop9
                        }
                        """))
        proc.proc.send_signal(signal.SIGHUP)
        mgmt = Mgmt(f"amqp://127.0.0.1:{port}")
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:
                keys = {(b["exchangeName"], b["name"], b["bindingKey"]) for b in mgmt.query(BD)}
                if ("Exchange2", "only", None) in keys or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert keys == {("Exchange1", "binding1", "a.*.b"), ("Exchange1", "binding2", "q.#"),
                            ("Exchange1", "binding3", "#.b"), ("Exchange2", "only", None)}
            assert sorted(e["name"] for e in mgmt.query(EX)) == ["Exchange1", "Exchange2"]
        finally:
            mgmt.close()
    finally:
        proc.stop()


# --- 1.19's own qdmanage, against ours and against 1.19 ------------------------------------
ONE_X = os.environ.get("QDROUTERD_1X", "")
needs_1x = pytest.mark.skipif(
    not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK),
    reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare with 1.x")
COUNTERS = {"bindingCount", "receivedCount", "droppedCount", "forwardedCount", "divertedCount",
            "matchedCount"}


def qdmanage_1x(port: int, *args: str) -> list:
    from test_mixed_1x import one_x_env
    out = subprocess.run([sys.executable, os.path.join(ONE_X, "bin", "qdmanage"), "-b",
                          f"127.0.0.1:{port}", "-t", "10", *args], capture_output=True,
                         text=True, timeout=60, env=one_x_env())
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout) if out.stdout.strip() else []


@needs_1x
def test_1x_qdmanage_sees_the_same_exchanges_on_ours_and_on_1x(router_factory, tmp_path):
    from test_mixed_1x import OneXProcess
    port_1x = free_port()
    conf = _conf(tmp_path, port_1x, EXCHANGE_CONF, "1x.conf")
    one_x = OneXProcess(conf)
    try:
        one_x.wait_for_line("Operational")
        ours = router_factory(extra=EXCHANGE_CONF)
        for port in (ours.port, port_1x):  # a management CREATE of each, by 1.19's client
            qdmanage_1x(port, "create", "--type", "router.config.exchange", "--name",
                        "Exchange2", "address=Address2", "matchMethod=mqtt")
            qdmanage_1x(port, "create", "--type", "router.config.binding", "--name", "b9",
                        "exchangeName=Exchange2", "bindingKey=x/+", "nextHopAddress=n9")
        for etype in ("router.config.exchange", "router.config.binding"):
            rows = [qdmanage_1x(port, "query", "--type", etype)
                    for port in (ours.port, port_1x)]
            assert [{k: v for k, v in r.items() if k not in COUNTERS} for r in rows[0]] == \
                rows[1], etype
            read = [qdmanage_1x(port, "read", "--type", etype, "--name", rows[1][0]["name"])
                    for port in (ours.port, port_1x)]
            assert {k: v for k, v in read[0].items() if k not in COUNTERS} == read[1]
    finally:
        one_x.stop()


def test_large_message_streams_through_an_exchange(router_factory, opened):
    """A message large enough to be streamed (cut-through) is routed by its subject too."""
    router = router_factory(extra=EXCHANGE_CONF)
    rconn = connect(router, opened)
    r2 = rconn.create_receiver("nextHop2", credit=5)
    sconn = connect(router, opened)
    snd = sconn.create_sender("Address1")
    pump_until([sconn, rconn], lambda: snd.link.credit > 0, what="credit")
    body = bytes(range(256)) * 8192  # 2 MB
    assert send_all(sconn, snd, [Message(subject="a.big", body=body)]) == [Delivery.ACCEPTED]
    # idle=30: the 2 MB may take longer than collect's default half second to arrive whole
    got = collect([rconn, sconn], [r2], expect=1, idle=30, timeout=30)
    assert got == [[body]]


@pytest.mark.parametrize("kind", ["ours", pytest.param("1x", marks=needs_1x)])
def test_receivers_of_the_exchange_address_get_a_copy(kind, router_factory, tmp_path, opened):
    """As 1.19: a receiver attached to the exchange's own address gets every message, and
    then nothing goes to the alternate (the message was forwarded)."""
    one_x = None
    if kind == "ours":
        router = router_factory(extra=EXCHANGE_CONF)
    else:
        from test_mixed_1x import OneXProcess
        port = free_port()
        one_x = OneXProcess(_conf(tmp_path, port, EXCHANGE_CONF, "1x.conf"))
        one_x.wait_for_line("Operational")

        class _R:
            url = f"amqp://127.0.0.1:{port}"
        router = _R()
    try:
        rconn = connect(router, opened)
        own = rconn.create_receiver("Address1", credit=10)
        r1 = rconn.create_receiver("nextHop1", credit=10)
        alt = rconn.create_receiver("altNextHop", credit=10)
        sconn = connect(router, opened)
        snd = sconn.create_sender("Address1")
        pump_until([sconn, rconn], lambda: snd.link.credit > 0, what="credit")
        assert send_all(sconn, snd, [Message(subject="z", body=1),
                                     Message(subject="c.b", body=2)]) == [Delivery.ACCEPTED] * 2
        assert collect([rconn, sconn], [own, r1, alt], expect=3) == [[1, 2], [2], []]
    finally:
        if one_x is not None:
            one_x.stop()
