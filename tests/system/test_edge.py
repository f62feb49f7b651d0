"""Edge routers (1.19's edge mode) on loopback: an interior router with edge routers attached
through ``edge`` connectors, messages between clients on different edges and the interior.

Topologies are drawn in each test: ``E1 ==> I`` is edge router E1 with its uplink to interior
router I's ``role: edge`` listener. Every router is a real ``qdrouterd``; clients are real
proton clients.
"""
from __future__ import annotations

import contextlib
import csv
import io
import subprocess
import sys
import textwrap
import time

import pytest
from proton import Delivery, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from clients import collect, pump_until
from conftest import free_port

TIMEOUT = 30
IDLE = 5.0
ADDRESS_RULES = """
    address {
        prefix: multicast
        distribution: multicast
    }
    address {
        prefix: closest
        distribution: closest
    }
    """


class EdgeNet:
    """An interior router ``I`` with a ``role: edge`` listener, and edge routers on it."""

    def __init__(self, router_factory) -> None:
        self.factory = router_factory
        self.edge_port = free_port()
        self.routers: dict = {}
        self.routers["I"] = router_factory(router_id="Router.I", mode="interior", extra=f"""
            listener {{
                host: 127.0.0.1
                port: {self.edge_port}
                role: edge
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
            }}
            """ + ADDRESS_RULES)

    def edge(self, name: str, ports: tuple = ()) -> object:
        """Start edge router ``name`` (id Edge.<name>) with an edge connector to I (and to
        each of ``ports``, other interiors' edge listeners)."""
        conf = ADDRESS_RULES
        for i, port in enumerate((self.edge_port,) + tuple(ports)):
            conf += f"""
            connector {{
                name: uplink{i}
                host: 127.0.0.1
                port: {port}
                role: edge
            }}
            """
        r = self.factory(router_id=f"Edge.{name}", mode="edge", extra=conf)
        self.routers[name] = r
        return r

    def __getitem__(self, name: str):
        return self.routers[name]


def qdstat(port: int, *args: str) -> list:
    """qdstat's table as rows, its column header first."""
    out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b", f"127.0.0.1:{port}",
                          *args, "--csv"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [row for row in csv.reader(io.StringIO(out.stdout)) if len(row) > 1]


def local_count(r, address: str) -> int:
    """How many consumers of ``address`` router ``r`` has (its ``local`` column: on an edge
    its proxy toward the interior counts once the interior has a destination beyond it; on
    an interior each edge with a receiver counts)."""
    rows = qdstat(r.port, "-a")
    head = rows[0]
    for row in rows[1:]:
        if row[head.index("addr")] == address:
            return int(row[head.index("local")] or 0)
    return 0


def wait_local(r, address: str, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while local_count(r, address) < count:
        assert time.monotonic() < deadline, f"{r.id}: {count} consumers of {address}"
        time.sleep(0.25)


def transfer(conns, snd, bodies, receivers, expect=None):
    """Send ``bodies`` on ``snd`` (they wait in proton until the router gives credit), collect
    what ``receivers`` get (accepting it), then wait for every outcome; (got, outcomes)."""
    sent = [snd.link.send(Message(body=body)) for body in bodies]
    got = collect(conns, receivers, expect=len(bodies) if expect is None else expect,
                  idle=IDLE, timeout=TIMEOUT)
    pump_until(conns, lambda: all(d.remote_state for d in sent), what="outcomes back",
               timeout=TIMEOUT)
    return got, [d.remote_state for d in sent]


@pytest.fixture
def net(router_factory):
    return EdgeNet(router_factory)


@contextlib.contextmanager
def clients(*routers):
    """A BlockingConnection to each of ``routers``, all closed at the end."""
    with contextlib.ExitStack() as stack:
        conns = []
        for r in routers:
            conn = BlockingConnection(r.url, timeout=TIMEOUT)
            stack.callback(conn.close)
            conns.append(conn)
        yield conns


def test_anycast_edge_to_edge_through_the_interior(net):
    """E1 ==> I <== E2: a sender on E1, a receiver on E2, dispositions end to end."""
    e1, e2 = net.edge("1"), net.edge("2")
    with clients(e1, e2) as (sc, rc):
        rcv = rc.create_receiver("closest.orders", credit=50)
        snd = sc.create_sender("closest.orders")
        got, outcomes = transfer([sc, rc], snd, [f"m{i}" for i in range(30)], [rcv])
        assert got == [[f"m{i}" for i in range(30)]]
        assert outcomes == [Delivery.ACCEPTED] * 30
        # pre-settled too
        snd = sc.create_sender("closest.orders", name="presettled", options=AtMostOnce())
        for i in range(10):
            snd.link.send(Message(body=f"p{i}")).settle()
        assert collect([sc, rc], [rcv], expect=10, idle=IDLE) == [[f"p{i}" for i in range(10)]]


def test_balanced_edge_to_interior_and_back(net):
    """E1 ==> I: a sender on E1, a receiver on I; then a sender on I, a receiver on E1."""
    e1 = net.edge("1")
    with clients(e1, net["I"]) as (ec, ic):
        rcv = ic.create_receiver("work", credit=50)
        snd = ec.create_sender("work")
        got, outcomes = transfer([ec, ic], snd, list(range(20)), [rcv])
        assert got == [list(range(20))] and outcomes == [Delivery.ACCEPTED] * 20
        rcv2 = ec.create_receiver("jobs", credit=50)
        snd2 = ic.create_sender("jobs")
        got, outcomes = transfer([ec, ic], snd2, list(range(20)), [rcv2])
        assert got == [list(range(20))] and outcomes == [Delivery.ACCEPTED] * 20


def test_rejected_outcome_travels_back_to_the_edge_sender(net):
    e1, e2 = net.edge("1"), net.edge("2")
    with clients(e1, e2) as (sc, rc):
        rcv = rc.create_receiver("closest.rej", credit=10)
        snd = sc.create_sender("closest.rej")
        dlv = snd.link.send(Message(body="x"))
        pump_until([sc, rc], lambda: rcv.fetcher.incoming, what="delivery", timeout=TIMEOUT)
        rcv.receive(timeout=TIMEOUT)
        rcv.reject()
        pump_until([sc, rc], lambda: dlv.remote_state, what="outcome", timeout=TIMEOUT)
        assert dlv.remote_state == Delivery.REJECTED


def test_multicast_across_edges_and_the_interior(net):
    """E1 ==> I <== E2: receivers on E1 (beside the sender), E2 and I, one copy each."""
    e1, e2 = net.edge("1"), net.edge("2")
    with clients(e1, e2, net["I"]) as (c1, c2, ci):
        rcvs = [c.create_receiver("multicast.news", credit=50) for c in (c1, c2, ci)]
        snd = c1.create_sender("multicast.news")
        # the sender has credit at once (a receiver beside it); the copies beyond E1 go once
        # I has both edges' proxies and has told E1 (E1's proxy sender is then a consumer)
        wait_local(net["I"], "multicast.news", 3)
        wait_local(e1, "multicast.news", 2)
        got, outcomes = transfer([c1, c2, ci], snd, [f"n{i}" for i in range(5)], rcvs,
                                 expect=15)
        assert got == [[f"n{i}" for i in range(5)]] * 3, got
        assert outcomes == [Delivery.ACCEPTED] * 5


def test_request_reply_through_a_dynamic_address_on_an_edge(net):
    """E1 ==> I <== E2: the client on E1 has a dynamic reply address, the service on E2
    answers with an anonymous sender."""
    e1, e2 = net.edge("1"), net.edge("2")
    with clients(e1, e2) as (client, service):
        requests = service.create_receiver("svc", credit=10)
        replies_out = service.create_sender(None)
        reply_rcv = client.create_receiver(None, dynamic=True, credit=10)
        reply_to = reply_rcv.remote_source.address
        assert reply_to.startswith("amqp:/_edge/Edge.1/temp.")
        client.create_sender("svc").link.send(Message(body="ping", reply_to=reply_to))
        pump_until([client, service], lambda: requests.fetcher.incoming, what="request",
                   timeout=TIMEOUT)
        request = requests.receive(timeout=TIMEOUT)
        requests.accept()
        out = replies_out.link.send(Message(address=request.reply_to, body="pong"))
        pump_until([client, service], lambda: reply_rcv.fetcher.incoming, what="reply",
                   timeout=TIMEOUT)
        assert reply_rcv.receive(timeout=TIMEOUT).body == "pong"
        reply_rcv.accept()
        pump_until([client, service], lambda: out.remote_state, what="reply outcome",
                   timeout=TIMEOUT)
        assert out.remote_state == Delivery.ACCEPTED


def test_anonymous_sender_on_an_edge(net):
    """E1 ==> I <== E2: an anonymous sender on E1, receivers on E2 and on I."""
    e1, e2 = net.edge("1"), net.edge("2")
    with clients(e1, e2, net["I"]) as (c1, c2, ci):
        r2 = c2.create_receiver("closest.anon", credit=20)
        ri = ci.create_receiver("interior.anon", credit=20)
        snd = c1.create_sender(None)
        # anonymous: E1 has no idea where closest.anon is, so it goes up to I, which must
        # have E2's proxy receiver by then (else it is released)
        wait_local(net["I"], "closest.anon", 1)
        sent = [snd.link.send(Message(address="closest.anon", body=f"a{i}")) for i in range(5)]
        sent += [snd.link.send(Message(address="interior.anon", body=f"b{i}")) for i in range(5)]
        got = collect([c1, c2, ci], [r2, ri], expect=10, idle=IDLE)
        assert got == [[f"a{i}" for i in range(5)], [f"b{i}" for i in range(5)]]
        pump_until([c1, c2, ci], lambda: all(d.remote_state for d in sent), what="outcomes",
                   timeout=TIMEOUT)
        assert [d.remote_state for d in sent] == [Delivery.ACCEPTED] * 10


def _interior(router_factory, name: str, edge_port: int, ir_port: int, connect_to=None):
    conf = f"""
        listener {{
            host: 127.0.0.1
            port: {edge_port}
            role: edge
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        listener {{
            host: 127.0.0.1
            port: {ir_port}
            role: inter-router
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """
    if connect_to is not None:
        conf += f"""
        connector {{
            name: to-peer
            host: 127.0.0.1
            port: {connect_to}
            role: inter-router
        }}
        """
    return router_factory(router_id=f"Router.{name}", mode="interior",
                          extra=conf + ADDRESS_RULES)


def _edge(router_factory, name: str, *ports: int):
    conf = ADDRESS_RULES
    for i, port in enumerate(ports):
        conf += f"""
        connector {{
            name: uplink{i}
            host: 127.0.0.1
            port: {port}
            role: edge
        }}
        """
    return router_factory(router_id=f"Edge.{name}", mode="edge", extra=conf)


def test_edge_to_edge_across_an_interior_mesh(router_factory):
    """E1 ==> I1 --- I2 <== E2: anycast, then a reply to E1's dynamic address from E2."""
    p1, p2, ir1, ir2 = (free_port() for _ in range(4))
    i1 = _interior(router_factory, "I1", p1, ir1)
    _interior(router_factory, "I2", p2, ir2, connect_to=ir1)
    e1, e2 = _edge(router_factory, "1", p1), _edge(router_factory, "2", p2)
    with clients(e1, e2) as (c1, c2):
        rcv = c2.create_receiver("closest.far", credit=50)
        snd = c1.create_sender("closest.far")
        got, outcomes = transfer([c1, c2], snd, [f"f{i}" for i in range(20)], [rcv])
        assert got == [[f"f{i}" for i in range(20)]]
        assert outcomes == [Delivery.ACCEPTED] * 20
        # a reply to an edge's dynamic address crosses the mesh (H<edge id> in MAUs)
        reply_rcv = c1.create_receiver(None, dynamic=True, credit=10)
        reply_to = reply_rcv.remote_source.address
        anon = c2.create_sender(None)
        deadline = time.monotonic() + TIMEOUT
        while True:  # until I2 has learned H<Edge.1> from I1 (else released)
            out = anon.link.send(Message(address=reply_to, body="back"))
            pump_until([c1, c2], lambda: out.remote_state or reply_rcv.fetcher.incoming,
                       what="reply or its outcome", timeout=TIMEOUT)
            if reply_rcv.fetcher.incoming or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert reply_rcv.receive(timeout=TIMEOUT).body == "back"
        reply_rcv.accept()
        pump_until([c1, c2], lambda: out.remote_state, what="reply outcome", timeout=TIMEOUT)
        assert out.remote_state == Delivery.ACCEPTED


def test_uplink_fails_over_to_the_other_interior(router_factory):
    """E1 ==> I1 --- I2 <== E2, E1 also connects to I2: I1 stops, E1's uplink moves to I2
    and its sender carries on."""
    p1, p2, ir1, ir2 = (free_port() for _ in range(4))
    i1 = _interior(router_factory, "I1", p1, ir1)
    _interior(router_factory, "I2", p2, ir2, connect_to=ir1)
    e1, e2 = _edge(router_factory, "1", p1, p2), _edge(router_factory, "2", p2)
    with clients(e1, e2) as (c1, c2):
        rcv = c2.create_receiver("closest.fo", credit=100)
        snd = c1.create_sender("closest.fo")
        got, outcomes = transfer([c1, c2], snd, [f"a{i}" for i in range(10)], [rcv])
        assert got == [[f"a{i}" for i in range(10)]]
        i1.proc.stop()
        # messages sent during the move are never lost silently: each is delivered or
        # comes back with an outcome; with a retry loop all arrive
        delivered: list = []
        pending = [f"b{i}" for i in range(10)]
        deadline = time.monotonic() + TIMEOUT
        while pending and time.monotonic() < deadline:
            sent = [(body, snd.link.send(Message(body=body))) for body in pending]
            delivered += collect([c1, c2], [rcv], expect=len(pending), idle=2.0)[0]
            pump_until([c1, c2], lambda: all(d.remote_state for _, d in sent),
                       what="outcomes", timeout=TIMEOUT)
            pending = [body for body, d in sent if d.remote_state != Delivery.ACCEPTED]
        assert sorted(set(delivered)) == sorted(f"b{i}" for i in range(10))


def test_management_of_an_edge_through_its_interior(net):
    """E1 ==> I: qdstat -e on I lists E1's connection, qdstat/qdmanage -d Edge.1 on I query
    E1's agent, qdstat -n on I lists I alone."""
    e1 = net.edge("1")
    interior = net["I"]
    deadline = time.monotonic() + TIMEOUT
    while True:
        rows = qdstat(interior.port, "-e")
        if len(rows) > 1 or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    head = rows[0]
    assert [r[head.index("container")] for r in rows[1:]] == ["Edge.1"]
    assert [r[head.index("role")] for r in rows[1:]] == ["edge"]
    general = dict((row[0], row[1]) for row in qdstat(interior.port, "-g", "-d", "Edge.1"))
    assert general.get("Router Id") == "Edge.1" and general.get("Mode") == "edge", general
    assert [r[0] for r in qdstat(interior.port, "-n")[1:]] == ["Router.I"]
    out = subprocess.run([sys.executable, "-m", "tools.qdmanage", "-b",
                          f"127.0.0.1:{interior.port}", "-d", "Edge.1", "query", "--type",
                          "router"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert '"id": "Edge.1"' in out.stdout
    # and E1's own view: the uplink is its active edge connection
    rows = qdstat(e1.port, "-e")
    head = rows[0]
    assert [r[head.index("role")] for r in rows[1:]] == ["edge"]


def test_receiver_credit_sent_with_its_attach_on_an_edge(net):
    """I <== E2: a receiver on E2 that grants credit in the same frames as its attach (as
    proton-C and JMS clients do) while E2 asks I whether the address is link-routed: that
    credit counts once the attach completes, and a message from I reaches it. (It was lost:
    the core did not know the link yet, and the worker did not report the credit again.)"""
    import proton

    import bigmsg
    e2 = net.edge("2")
    with clients(e2, net["I"]) as (warm, ci):
        # a message from I down the uplink: I answered the attaches of E2's lookup client
        # before, so E2 asks I about every attach from now on
        rcv = warm.create_receiver("closest.warm", credit=1)
        wait_local(net["I"], "closest.warm", 1)
        ci.create_sender("closest.warm").send(Message(body="warm"), timeout=TIMEOUT)
        assert rcv.receive(timeout=TIMEOUT).body == "warm"
        rcv.accept()
    rp = bigmsg.Peer(e2.port, "receivers")
    rcv = bigmsg.BigReceiver(rp, "closest.early", credit=10)
    bigmsg.pump([rp], lambda: rcv.link.state & proton.Endpoint.REMOTE_ACTIVE, TIMEOUT)
    wait_local(net["I"], "closest.early", 1)
    sp = bigmsg.Peer(net["I"].port, "sender")
    snd = bigmsg.BigSender(sp, "closest.early", 100)
    bigmsg.pump([rp, sp], lambda: snd.outcome() != 0, TIMEOUT, [snd, rcv])
    assert snd.outcome() == proton.Delivery.ACCEPTED
    assert [m[:3] for m in rcv.messages] == [(100, bigmsg.body_crc(100), False)]
    rp.close()
    sp.close()


def test_large_and_aborted_messages_edge_to_edge(net):
    """E1 ==> I <== E2: an 8 MB message streams through three routers intact; one aborted
    half way reaches the receiver as aborted. (Kept moderate: on a loaded shared box a
    message held back by the window for longer than the idle timeout, 16 s, costs the
    uplink, as it would between 1.19 routers.)"""
    import proton

    import bigmsg
    from test_streaming import Rss
    e1, e2 = net.edge("1"), net.edge("2")
    rp = bigmsg.Peer(e2.port, "receivers")
    rcv = bigmsg.BigReceiver(rp, "closest.big", name="r0")
    bigmsg.pump([rp], lambda: rcv.link.state & proton.Endpoint.REMOTE_ACTIVE, 10)
    wait_local(net["I"], "closest.big", 1)
    rss = Rss(net["I"])
    size = 8 * 1000 * 1000
    sp = bigmsg.Peer(e1.port, "sender")
    snd = bigmsg.BigSender(sp, "closest.big", size)
    bigmsg.pump([rp, sp], lambda: len(rcv.messages) >= 1, 120, [snd, rcv], rss.sample)
    length, crc, aborted, _ = rcv.messages[0]
    assert (length, crc, aborted) == (size, bigmsg.body_crc(size), False)
    bigmsg.pump([rp, sp], lambda: snd.outcome() != 0, 30, [snd, rcv])
    assert snd.outcome() == proton.Delivery.ACCEPTED
    assert rss.growth_mb()[0] < 40  # the interior streams it: never the whole message
    snd2 = bigmsg.BigSender(sp, "closest.big", size, abort_at=size // 2, name="aborter")
    bigmsg.pump([rp, sp], lambda: len(rcv.messages) >= 2, 120, [snd2, rcv])
    assert snd2.aborted and rcv.messages[1][2] is True
    rp.close()
    sp.close()


def test_auto_link_on_an_edge_serves_the_network(net, c_broker):
    """broker <-- E1 ==> I <== E2: an out auto-link on E1 to its broker's queue consumes the
    address; a sender on E2 reaches the queue through I (E1 proxies the address)."""
    from test_autolinks import auto_link, connector, drain_broker, send
    broker = c_broker("broker.edge")
    conf = ADDRESS_RULES + connector("broker", broker) + auto_link(
        "queue.e", "out", connection="broker", name="to-broker") + f"""
        connector {{
            name: uplink
            host: 127.0.0.1
            port: {net.edge_port}
            role: edge
        }}
        """
    net.factory(router_id="Edge.1", mode="edge", extra=conf)
    e2 = net.edge("2")
    wait_local(net["I"], "queue.e", 1)
    assert send(e2.url, "queue.e", [f"q{i}" for i in range(5)]) == [Delivery.ACCEPTED] * 5
    assert sorted(drain_broker(broker, "queue.e")) == [f"q{i}" for i in range(5)]


def test_link_route_of_the_interior_used_from_an_edge(router_factory, c_broker):
    """client -- E1 ==> I -- broker (I has linkRoute lr in/out to the broker): E1 asks I
    whether lr.q is link-routed (1.19's address lookup) and forwards the attaches up; the
    client talks to the broker's queue through both routers."""
    broker = c_broker("broker.lr")
    edge_port = free_port()
    router_factory(router_id="Router.I", mode="interior", extra=edge_link_routes(broker) + f"""
        listener {{
            host: 127.0.0.1
            port: {edge_port}
            role: edge
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """)
    e1 = _edge(router_factory, "1", edge_port)
    link_routed_round_trip(e1, "lr.q", [f"l{i}" for i in range(5)])


def link_routed_round_trip(router, address: str, bodies: list) -> None:
    """Through ``router``: send ``bodies`` to ``address`` on a link-routed sender, every one
    ACCEPTED by the broker; then a link-routed receiver gets them back, in order. The sender
    is attached again until the route has reached this router: before, the attach is
    refused (no-route), or on an edge whose uplink cannot answer address lookups yet it
    attaches as an ordinary link, which gets no credit (as 1.19's edge)."""
    with clients(router) as (conn,):
        deadline = time.monotonic() + TIMEOUT
        while True:
            snd = None
            try:
                snd = conn.create_sender(address)
                conn.wait(lambda: snd.link.credit > 0, timeout=2, msg="credit")
                break
            except Exception:  # LinkDetached (no route), or Timeout (no credit)
                assert time.monotonic() < deadline, f"{router.id}: no route to {address}"
                if snd is not None:
                    try:
                        snd.close()
                    except Exception:  # noqa: BLE001 - detached already
                        pass
                time.sleep(0.5)
        outcomes = [snd.send(Message(body=body)).remote_state for body in bodies]
        assert outcomes == [Delivery.ACCEPTED] * len(bodies)
        snd.close()
        rcv = conn.create_receiver(address, credit=len(bodies) + 5)
        assert collect([conn], [rcv], expect=len(bodies), idle=IDLE) == [bodies]


def wait_route(r, prefix: str = "lr") -> None:
    """Router ``r`` knows link route ``prefix`` both ways (its link-in and link-out
    addresses): before that an attach to it is an ordinary one, which has no consumer."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        rows = qdstat(r.port, "-a")
        head = rows[0]
        known = {row[head.index("class")] for row in rows[1:]
                 if row[head.index("addr")] == prefix}
        if {"link-in", "link-out"} <= known:
            return
        assert time.monotonic() < deadline, f"{r.id} does not know link route {prefix}"
        time.sleep(0.25)


def edge_link_routes(broker) -> str:
    """A route-container connector to ``broker`` and linkRoute ``lr`` in and out to it."""
    from test_autolinks import connector
    return connector("broker", broker) + """
        linkRoute {
            prefix: lr
            direction: in
            connection: broker
        }
        linkRoute {
            prefix: lr
            direction: out
            connection: broker
        }
        """


def test_link_route_to_a_broker_on_an_edge(router_factory, c_broker):
    """broker -- E1 ==> I1 --- I2 <== E2, linkRoute lr on E1 only: E1 creates its routes on
    I1 (1.19's link-route proxy: connection-scoped routes of its uplink), I1 advertises them,
    so clients on I1, I2 and E2 reach the broker's queues through E1; E1's own clients too."""
    broker = c_broker("broker.edge")
    p1, p2, ir1, ir2 = (free_port() for _ in range(4))
    i1 = _interior(router_factory, "I1", p1, ir1)
    i2 = _interior(router_factory, "I2", p2, ir2, connect_to=ir1)
    e1 = router_factory(router_id="Edge.1", mode="edge", extra=ADDRESS_RULES
                        + edge_link_routes(broker) + f"""
        connector {{
            name: uplink
            host: 127.0.0.1
            port: {p1}
            role: edge
        }}
        """)
    e2 = _edge(router_factory, "2", p2)
    wait_route(i1)
    wait_route(i2)  # (E2 asks I2)
    for n, r in enumerate((i1, i2, e2, e1)):
        link_routed_round_trip(r, f"lr.q{n}", [f"{r.id}-{i}" for i in range(3)])


# a vhost policy that lets everyone in and everything through, maxMessageSize 10000 (1.19 gives
# an accepted edge connection the vhost policy's settings, as any connection but an
# inter-router one); and the router-level setting alone, which 1.19 applies to nothing
SIZE_VHOST_POLICY = """
policy {
    enableVhostPolicy: true
    maxMessageSize: 10000
    defaultVhost: $default
}
vhost {
    hostname: $default
    allowUnknownUser: true
    groups: {
        "$default": {
            "users": "*",
            "remoteHosts": "*",
            "sources": "*",
            "targets": "*",
            "allowDynamicSource": true,
            "allowAnonymousSender": true
        }
    }
}
"""
SIZE_POLICY_ONLY = """
policy {
    maxMessageSize: 10000
}
"""


def oversize_from_an_edge(edge, interior) -> tuple:
    """A receiver on ``interior``, a sender on ``edge``: a small message, then one of 50,000
    bytes. (small outcome, big outcome, big's condition name, bodies' sizes received)."""
    with clients(interior, edge) as (rc, sc):
        rcv = rc.create_receiver("size.q", credit=10)
        snd = sc.create_sender("size.q")
        small = snd.link.send(Message(body="s" * 100))
        got = collect([sc, rc], [rcv], expect=1, idle=IDLE, timeout=TIMEOUT)[0]
        big = snd.link.send(Message(body="b" * 50000))
        got += collect([sc, rc], [rcv], idle=2.0, timeout=TIMEOUT)[0]  # (accepted if it came)
        pump_until([sc, rc], lambda: small.remote_state and big.remote_state,
                   what="outcomes back", timeout=TIMEOUT)
        condition = big.remote.condition
        return (small.remote_state, big.remote_state,
                condition.name if condition is not None else None, [len(b) for b in got])


def uplink_works(edge, interior) -> None:
    """A message from ``edge`` reaches ``interior`` and is ACCEPTED there (sent again while
    the uplink is down: its sender has no credit, or the message is released)."""
    with clients(interior, edge) as (rc, sc):
        rcv = rc.create_receiver("size.after", credit=10)
        snd = sc.create_sender("size.after")
        deadline = time.monotonic() + TIMEOUT
        while True:
            dlv = snd.link.send(Message(body="again"))
            try:
                pump_until([sc, rc], lambda: dlv.remote_state or rcv.fetcher.incoming,
                           what="the message through the uplink", timeout=3)
            except AssertionError:
                pass
            got = collect([sc, rc], [rcv], idle=0.5, timeout=TIMEOUT)[0]
            if got:
                assert got[-1] == "again"
                pump_until([sc, rc], lambda: dlv.remote_state, what="outcome",
                           timeout=TIMEOUT)
                assert dlv.remote_state == Delivery.ACCEPTED
                return
            assert time.monotonic() < deadline, "the uplink did not come back"


@pytest.mark.parametrize("policy, limited", [(SIZE_VHOST_POLICY, True),
                                             (SIZE_POLICY_ONLY, False)],
                         ids=["vhost-policy", "router-setting-only"])
def test_max_message_size_on_the_edge_uplink(router_factory, policy, limited):
    """E1 ==> I, I with maxMessageSize 10000: with a vhost policy the message over it from a
    client on E1 is REJECTED (amqp:link:message-size-exceeded) by I, which closes the
    uplink, as 1.19 does; E1 connects again and the client keeps its connection. The
    router-level setting alone limits nothing (1.19's limits are the vhost policy's)."""
    edge_port = free_port()
    interior = router_factory(router_id="Router.I", mode="interior", extra=f"""
        listener {{
            host: 127.0.0.1
            port: {edge_port}
            role: edge
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """ + textwrap.dedent(policy))
    e1 = _edge(router_factory, "1", edge_port)
    small, big, condition, sizes = oversize_from_an_edge(e1, interior)
    assert small == Delivery.ACCEPTED
    if limited:
        assert (big, condition) == (Delivery.REJECTED, "amqp:link:message-size-exceeded")
        assert sizes == [100]
        interior.proc.wait_for_line("DENY AMQP Transfer maxMessageSize exceeded", timeout=10)
        e1.proc.wait_for_line("to interior lost", timeout=10)
    else:
        assert (big, condition, sizes) == (Delivery.ACCEPTED, None, [100, 50000])
    uplink_works(e1, interior)
