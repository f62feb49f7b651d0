"""Edge routers mixed with Qpid Dispatch 1.x: our edges on a 1.x interior router, a 1.x edge
on our interior router. Runs only when ``QDROUTERD_1X`` names a 1.x install prefix (see
test_mixed_1x.py); otherwise every test is skipped, saying why.

``E ==> I``: edge router E with its uplink to interior router I's ``role: edge`` listener;
``X``/``XE`` are 1.x routers, the others ours.
"""
from __future__ import annotations

import textwrap
import time

import pytest
from proton import Delivery, Message

from clients import pump_until
from conftest import START_TIMEOUT, free_port
from test_edge import ADDRESS_RULES, TIMEOUT, clients, transfer, wait_local
from test_mixed_1x import OneXProcess, OneXRouter, pytestmark  # noqa: F401 - skips without 1.x


class MixedEdges:
    def __init__(self, router_factory, tmp_path) -> None:
        self.factory = router_factory
        self.tmp_path = tmp_path
        self.procs: list = []
        self.nets: list = []  # test_mixed_1x.MixedNet interiors

    def one_x(self, router_id: str, mode: str, extra: str = "") -> OneXRouter:
        port = free_port()
        conf = textwrap.dedent(f"""\
            router {{
                mode: {mode}
                id: {router_id}
            }}
            listener {{
                host: 127.0.0.1
                port: {port}
                role: normal
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
            }}
            log {{
                module: DEFAULT
                enable: info+
            }}
            """) + textwrap.dedent(ADDRESS_RULES) + textwrap.dedent(extra)
        path = self.tmp_path / f"qdrouterd-1x-{router_id}.conf"
        path.write_text(conf)
        proc = OneXProcess(path)
        self.procs.append(proc)
        proc.wait_for_line("Operational", timeout=START_TIMEOUT)
        return OneXRouter(proc, port, router_id)

    def ours(self, router_id: str, mode: str, extra: str = ""):
        return self.factory(router_id=router_id, mode=mode, extra=ADDRESS_RULES + extra)

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()
        for net in self.nets:
            net.stop_all()


def edge_listener(port: int) -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            role: edge
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """


def edge_connector(port: int) -> str:
    return f"""
        connector {{
            name: uplink
            host: 127.0.0.1
            port: {port}
            role: edge
        }}
        """


@pytest.fixture
def mixed(router_factory, tmp_path):
    net = MixedEdges(router_factory, tmp_path)
    yield net
    net.stop()


def _anycast_and_reply(sender_router, receiver_router, interior) -> None:
    """A sender on one edge, a receiver on the other (dispositions end to end); then a
    request from the sender's side with a dynamic reply address, answered anonymously."""
    with clients(sender_router, receiver_router) as (sc, rc):
        rcv = rc.create_receiver("closest.orders", credit=50)
        snd = sc.create_sender("closest.orders")
        got, outcomes = transfer([sc, rc], snd, [f"m{i}" for i in range(20)], [rcv])
        assert got == [[f"m{i}" for i in range(20)]]
        assert outcomes == [Delivery.ACCEPTED] * 20
        # request / reply: the client's reply address is on its edge
        requests = rc.create_receiver("svc", credit=10)
        replies = rc.create_sender(None)
        reply_rcv = sc.create_receiver(None, dynamic=True, credit=10)
        reply_to = reply_rcv.remote_source.address
        assert "/_edge/" in reply_to, reply_to
        sc.create_sender("svc").link.send(Message(body="ping", reply_to=reply_to))
        pump_until([sc, rc], lambda: requests.fetcher.incoming, what="request",
                   timeout=TIMEOUT)
        request = requests.receive(timeout=TIMEOUT)
        requests.accept()
        out = replies.link.send(Message(address=request.reply_to, body="pong"))
        pump_until([sc, rc], lambda: reply_rcv.fetcher.incoming, what="reply", timeout=TIMEOUT)
        assert reply_rcv.receive(timeout=TIMEOUT).body == "pong"
        reply_rcv.accept()
        pump_until([sc, rc], lambda: out.remote_state, what="reply outcome", timeout=TIMEOUT)
        assert out.remote_state == Delivery.ACCEPTED


def test_our_edges_on_a_1x_interior(mixed):
    """E1 ==> X <== E2 (X is 1.x)."""
    port = free_port()
    x = mixed.one_x("Router.X", "interior", edge_listener(port))
    e1 = mixed.ours("Edge.1", "edge", edge_connector(port))
    e2 = mixed.ours("Edge.2", "edge", edge_connector(port))
    _anycast_and_reply(e1, e2, x)


def test_1x_edge_and_our_edge_on_our_interior(mixed, router_factory):
    """XE ==> I <== E2 (XE is a 1.x edge): both ways."""
    port = free_port()
    interior = mixed.ours("Router.I", "interior", edge_listener(port))
    xe = mixed.one_x("Edge.X", "edge", edge_connector(port))
    e2 = mixed.ours("Edge.2", "edge", edge_connector(port))
    _anycast_and_reply(xe, e2, interior)
    _anycast_and_reply(e2, xe, interior)


def test_our_edge_and_a_1x_edge_on_a_1x_interior(mixed):
    """E1 ==> X <== XE (X and XE are 1.x): both ways."""
    port = free_port()
    x = mixed.one_x("Router.X", "interior", edge_listener(port))
    xe = mixed.one_x("Edge.X", "edge", edge_connector(port))
    e1 = mixed.ours("Edge.1", "edge", edge_connector(port))
    _anycast_and_reply(e1, xe, x)
    _anycast_and_reply(xe, e1, x)


def test_multicast_from_a_1x_edge_through_our_interior(mixed):
    """XE ==> I <== E2: multicast from the 1.x edge to receivers on I and E2."""
    port = free_port()
    interior = mixed.ours("Router.I", "interior", edge_listener(port))
    xe = mixed.one_x("Edge.X", "edge", edge_connector(port))
    e2 = mixed.ours("Edge.2", "edge", edge_connector(port))
    with clients(xe, e2, interior) as (cx, c2, ci):
        rcvs = [c.create_receiver("multicast.news", credit=50) for c in (c2, ci)]
        snd = cx.create_sender("multicast.news")
        wait_local(interior, "multicast.news", 2)
        pump_until([cx, c2, ci], lambda: snd.link.credit > 0, what="credit", timeout=TIMEOUT)
        got, outcomes = transfer([cx, c2, ci], snd, [f"n{i}" for i in range(5)], rcvs,
                                 expect=10)
        assert got == [[f"n{i}" for i in range(5)]] * 2, got
        assert outcomes == [Delivery.ACCEPTED] * 5


@pytest.mark.parametrize("interior_kind", ["1x", "ours"])
def test_link_route_from_an_edge_mixed(mixed, c_broker, interior_kind):
    """client -- E ==> I -- broker, linkRoute lr on I: our edge on a 1.x interior, and a
    1.x edge on ours (each asks the interior's address lookup, as 1.19 does)."""
    from test_edge import edge_link_routes, link_routed_round_trip
    broker = c_broker("broker.lr")
    port = free_port()
    routes = edge_link_routes(broker) + edge_listener(port)
    if interior_kind == "1x":
        mixed.one_x("Router.X", "interior", routes)
        edge = mixed.ours("Edge.1", "edge", edge_connector(port))
    else:
        mixed.ours("Router.I", "interior", routes)
        edge = mixed.one_x("Edge.X", "edge", edge_connector(port))
    link_routed_round_trip(edge, "lr.q", [f"l{i}" for i in range(5)])


@pytest.mark.parametrize("edge_kind", ["ours", "1x"])
def test_link_route_to_a_broker_on_an_edge_mixed(mixed, c_broker, edge_kind):
    """broker -- E ==> I <== E2, linkRoute lr on E only (1.19's link-route proxy: E creates
    its routes on I over management): our edge on a 1.x interior (E2 a 1.x edge), and a 1.x
    edge on our interior (E2 ours); clients on I, E2 and E reach the broker."""
    from test_edge import edge_link_routes, link_routed_round_trip, wait_route
    broker = c_broker("broker.edge")
    port = free_port()
    routes = edge_link_routes(broker) + edge_connector(port)
    if edge_kind == "ours":
        interior = mixed.one_x("Router.X", "interior", edge_listener(port))
        edge = mixed.ours("Edge.1", "edge", routes)
        other = mixed.one_x("Edge.X", "edge", edge_connector(port))
    else:
        interior = mixed.ours("Router.I", "interior", edge_listener(port))
        edge = mixed.one_x("Edge.X", "edge", routes)
        other = mixed.ours("Edge.2", "edge", edge_connector(port))
    wait_route(interior)  # (an attach before it is an ordinary one, without a consumer)
    for n, r in enumerate((interior, other, edge)):
        link_routed_round_trip(r, f"lr.q{n}", [f"{r.id}-{i}" for i in range(3)])



@pytest.mark.parametrize("interior_kind", ["1x", "ours"])
def test_max_message_size_on_the_edge_uplink_mixed(mixed, interior_kind):
    """E ==> I with a vhost policy's maxMessageSize 10000 on I: our edge on a 1.x interior,
    and a 1.x edge on ours; the larger message is REJECTED with 1.19's condition, the uplink
    closed by I and opened again by E."""
    from test_edge import SIZE_VHOST_POLICY, oversize_from_an_edge, uplink_works
    port = free_port()
    conf = edge_listener(port) + textwrap.dedent(SIZE_VHOST_POLICY)
    if interior_kind == "1x":
        interior = mixed.one_x("Router.X", "interior", conf)
        edge = mixed.ours("Edge.1", "edge", edge_connector(port))
    else:
        interior = mixed.ours("Router.I", "interior", conf)
        edge = mixed.one_x("Edge.X", "edge", edge_connector(port))
    small, big, condition, sizes = oversize_from_an_edge(edge, interior)
    assert (small, big, condition, sizes) == (
        Delivery.ACCEPTED, Delivery.REJECTED, "amqp:link:message-size-exceeded", [100])
    uplink_works(edge, interior)

# ---- a line of four: edge ==> interior --- interior <== edge, ours and 1.x mixed ---------------
# each letter one router of E1 ==> I1 --- I2 <== E2 (I2 connects to I1): o ours, x 1.x
LINES = ["ooxx", "xxoo", "oxox", "xoxo"]


def _edge_line(mixed, kinds: str) -> tuple:
    from test_mixed_1x import MixedNet, converged, line_ready
    net = MixedNet(mixed.factory, mixed.tmp_path)
    mixed.nets.append(net)
    p1, p2 = free_port(), free_port()
    for name, kind, port, connect_to in (("I1", kinds[1], p1, ()), ("I2", kinds[2], p2,
                                                                     (("I1", 1),))):
        if kind == "o":
            net.add(name, connect_to=connect_to, extra=edge_listener(port))
        else:
            net.add_1x(name, connect_to=connect_to, extra=edge_listener(port))
    converged(net, ["I1", "I2"])
    line_ready(net, ["I1", "I2"])
    edges = []
    for name, kind, port in (("Edge.1", kinds[0], p1), ("Edge.2", kinds[3], p2)):
        if kind == "o":
            edges.append(mixed.ours(name, "edge", edge_connector(port)))
        else:
            edges.append(mixed.one_x(name, "edge", edge_connector(port)))
    return edges[0], net["I1"], net["I2"], edges[1]


def _rejected_end_to_end(sender_router, receiver_router) -> None:
    with clients(sender_router, receiver_router) as (sc, rc):
        from clients import collect
        rcv = rc.create_receiver("closest.refuse", credit=10)
        snd = sc.create_sender("closest.refuse")
        sent = [snd.link.send(Message(body=f"r{i}")) for i in range(3)]
        got = collect([sc, rc], [rcv], expect=3, idle=5.0, timeout=TIMEOUT,
                      settle=Delivery.REJECTED)
        assert got == [["r0", "r1", "r2"]]
        pump_until([sc, rc], lambda: all(d.remote_state for d in sent), what="outcomes back",
                   timeout=TIMEOUT)
        assert [d.remote_state for d in sent] == [Delivery.REJECTED] * 3


def _multicast_everywhere(sender_router, receiver_routers) -> None:
    """A multicast sender on one router, a receiver on each of the others: probes go until
    every receiver has had one (the address has reached every router), then five messages
    reach every receiver once, each ACCEPTED at the sender."""
    from clients import collect, take
    with clients(sender_router, *receiver_routers) as conns:
        rcvs = [c.create_receiver("multicast.line", credit=100) for c in conns[1:]]
        snd = conns[0].create_sender("multicast.line")
        seen = [False] * len(rcvs)
        deadline = time.monotonic() + TIMEOUT
        while not all(seen):
            assert time.monotonic() < deadline, f"probes reached {seen}"
            if snd.link.credit > 0:
                snd.link.send(Message(body="probe")).settle()
            for _ in range(20):
                for c in conns:
                    c.container.timeout = 0.01
                    c.container.process()
            for i, rcv in enumerate(rcvs):
                for _msg, dlv in take(rcv):
                    dlv.update(Delivery.ACCEPTED)
                    dlv.settle()
                    seen[i] = True
        time.sleep(1.0)  # (probes still on the way are taken below and left out)
        pump_until(conns, lambda: snd.link.credit > 0, what="credit", timeout=TIMEOUT)
        sent = [snd.link.send(Message(body=f"n{i}")) for i in range(5)]
        got = collect(conns, rcvs, expect=None, idle=3.0, timeout=TIMEOUT)
        got = [[b for b in bodies if b != "probe"] for bodies in got]
        assert got == [[f"n{i}" for i in range(5)]] * len(rcvs), got
        pump_until(conns, lambda: all(d.remote_state for d in sent), what="outcomes back",
                   timeout=TIMEOUT)
        assert [d.remote_state for d in sent] == [Delivery.ACCEPTED] * 5


@pytest.mark.parametrize("kinds", LINES)
def test_line_of_edge_interior_interior_edge_mixed(mixed, kinds):
    """E1 ==> I1 --- I2 <== E2, ours (o) and 1.x (x) mixed as ``kinds`` spells them: anycast
    with a dynamic reply address both ways, a rejection travelling back across the four
    routers, and multicast from either edge to receivers on the three other routers."""
    e1, i1, i2, e2 = _edge_line(mixed, kinds)
    _anycast_and_reply(e1, e2, None)
    _anycast_and_reply(e2, e1, None)
    _rejected_end_to_end(e1, e2)
    _multicast_everywhere(e1, [i1, i2, e2])
    _multicast_everywhere(e2, [e1, i1, i2])
