"""Details of edge mode as 1.19 has them, each checked the same way on our routers and on
real Qpid Dispatch 1.19 routers (``QDROUTERD_1X``, see test_mixed_1x.py; the 1.19 cases
are skipped without it).

``E ==> I``: edge router E with its uplink to interior router I's ``role: edge`` listener;
``kind`` says whose both routers are (``ours`` or ``1x``).
"""
from __future__ import annotations

import time

import pytest

from conftest import free_port
from test_edge import TIMEOUT
from test_edge_mixed_1x import MixedEdges, edge_connector, edge_listener
from test_link_routes import Mgmt
from test_mixed_1x import ONE_X

KINDS = ["ours", pytest.param("1x", marks=pytest.mark.skipif(
    not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare"))]


@pytest.fixture
def routers(router_factory, tmp_path):
    net = MixedEdges(router_factory, tmp_path)
    yield net
    net.stop()


def start(routers, kind: str, router_id: str, mode: str, extra: str = ""):
    if kind == "ours":
        return routers.ours(router_id, mode, extra)
    return routers.one_x(router_id, mode, extra)


def edge_pair(routers, kind: str, interior_extra: str = "", edge_extra: str = "") -> tuple:
    """E ==> I, both of ``kind``; (edge, interior) once I lists E's connection."""
    port = free_port()
    interior = start(routers, kind, "Router.I", "interior", edge_listener(port) + interior_extra)
    edge = start(routers, kind, "Edge.E", "edge", edge_connector(port) + edge_extra)
    wait_edge_connection(interior)
    return edge, interior


def query(router, entity: str, names: list) -> list:
    client = Mgmt(router.url)
    try:
        return client.query(entity, names)
    finally:
        client.close()


def wait_edge_connection(interior) -> int:
    """The identity of the interior's (only) edge connection, once it is there."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        rows = [r for r in query(interior, "connection", ["role", "identity"])
                if r["role"] == "edge"]
        if rows:
            return rows[0]["identity"]
        assert time.monotonic() < deadline, "no edge connection"
        time.sleep(0.2)


@pytest.mark.parametrize("kind", KINDS)
def test_the_interiors_downlink_is_an_edge_downlink(routers, kind):
    """router.link on I: the link down to E (its downlink, outgoing) is ``edge-downlink``;
    the other links on the edge connection stay ``endpoint``."""
    _, interior = edge_pair(routers, kind)
    conn_id = str(wait_edge_connection(interior))
    deadline = time.monotonic() + TIMEOUT
    while True:
        rows = [r for r in query(interior, "router.link",
                                 ["linkType", "linkDir", "connectionId", "owningAddr"])
                if str(r["connectionId"]) == conn_id]
        downlinks = [(r["linkType"], r["linkDir"]) for r in rows
                     if r["linkType"] == "edge-downlink"]
        if downlinks or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert downlinks == [("edge-downlink", "out")], rows
    assert {r["linkType"] for r in rows} == {"edge-downlink", "endpoint"}, rows


HEARTBEAT = "_$qd.edge_heartbeat"


@pytest.mark.parametrize("mode", ["standalone", "edge"])
@pytest.mark.parametrize("kind", KINDS)
def test_heartbeat_address_served_in_every_mode(routers, kind, mode):
    """1.19's heartbeat server on a client connection, whatever the router's mode: a receiver
    is refused, a sender gets a window of 2 and its heartbeat is accepted, the address is
    listed (mobile, balanced); a connection whose heartbeat sender falls silent is closed."""
    from proton import Message
    from proton import ConnectionException
    from proton.utils import BlockingConnection, LinkDetached
    router = start(routers, kind, "Router.H", mode)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        with pytest.raises(LinkDetached):
            conn.create_receiver(HEARTBEAT)
    finally:
        conn.close()
    rows = {r["key"]: r["distribution"]
            for r in query(router, "router.address", ["key", "distribution"])}
    assert rows.get("M0" + HEARTBEAT) == "balanced", rows
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        snd = conn.create_sender(HEARTBEAT)
        conn.wait(lambda: snd.link.credit > 0, timeout=TIMEOUT)
        assert snd.link.credit == 2
        dlv = snd.send(Message(body="beat"))
        assert dlv.remote_state == dlv.ACCEPTED
        # then silence: the router closes the connection (8 s without a heartbeat)
        # (1.19 drops the socket, ours closes the connection: the client raises for either;
        # a Timeout would be a failure)
        with pytest.raises(ConnectionException):
            conn.wait(lambda: conn.conn.state & conn.conn.REMOTE_CLOSED, timeout=TIMEOUT)
    finally:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closed by the router already
            pass


def answering_routers(router, rounds: int = 6, count: int = 8) -> list:
    """The router id in each answer to router QUERYs sent on one ``$management`` sender of
    one client connection, ``count`` at a time (paced over a few seconds: long enough for an
    edge's proxy of the address, if it made one, to be attached on its uplink)."""
    from proton import Message
    from proton.utils import BlockingConnection
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        reply = conn.create_receiver(None, dynamic=True, credit=count)
        snd = conn.create_sender("$management")
        ids = []
        for _ in range(rounds):
            for _ in range(count):
                snd.send(Message(reply_to=reply.remote_source.address,
                                 properties={"operation": "QUERY", "type": "org.amqp.management",
                                             "entityType": "org.apache.qpid.dispatch.router"},
                                 body={"attributeNames": ["id"]}))
            for _ in range(count):
                answer = reply.receive(timeout=TIMEOUT)
                assert answer.properties["statusCode"] == 200
                ids.append(answer.body["results"][0][0])
            time.sleep(0.5)
        return ids
    finally:
        conn.close()


@pytest.mark.parametrize("kind", KINDS)
def test_management_requests_on_an_edge_reach_the_edge(routers, kind):
    """E ==> I, a client of E sends management requests to ``$management``: every one is
    answered by E's own agent (the address its agent serves is not proxied to I)."""
    edge, _ = edge_pair(routers, kind)
    assert answering_routers(edge) == ["Edge.E"] * 48


@pytest.mark.parametrize("kind", KINDS)
def test_an_edge_proxies_no_sender_of_its_agents_address(routers, kind):
    """E ==> I, a client of E holds senders to ``$management`` and to a plain address: E
    attaches a proxy sender on its uplink for the plain address only (1.19 proxies no
    address that its own agent serves), so I lists no new link for ``$management``."""
    from proton.utils import BlockingConnection
    edge, interior = edge_pair(routers, kind)
    conn_id = str(wait_edge_connection(interior))

    def uplink_senders() -> list:
        return sorted(r["owningAddr"] for r in query(interior, "router.link",
                                                      ["linkDir", "owningAddr", "connectionId"])
                      if str(r["connectionId"]) == conn_id and r["linkDir"] == "in"
                      and r["owningAddr"] in ("M0$management", "M0plain.addr"))

    before = uplink_senders()
    client = BlockingConnection(edge.url, timeout=TIMEOUT)
    try:
        client.create_sender("$management")
        client.create_sender("plain.addr")
        deadline = time.monotonic() + TIMEOUT
        while "M0plain.addr" not in uplink_senders():  # the plain address's proxy comes
            assert time.monotonic() < deadline, uplink_senders()
            time.sleep(0.2)
        assert uplink_senders() == sorted(before + ["M0plain.addr"])
        assert answering_routers(edge, rounds=2) == ["Edge.E"] * 16
    finally:
        client.close()


def settle_all(taken: list) -> list:
    for _msg, dlv in taken:
        dlv.settle()
    return taken


@pytest.mark.parametrize("kind", KINDS)
def test_anonymous_multicast_on_an_edge_goes_up_too(routers, kind):
    """E ==> I, receivers of ``multicast.both`` on E and on I, an anonymous sender on E: each
    message reaches both receivers (1.19 sends a copy up the uplink as well as the local
    one)."""
    from proton import Message
    from clients import collect, take
    from test_edge import clients
    edge, interior = edge_pair(routers, kind)
    with clients(edge, interior) as (ce, ci):
        rcv_e = ce.create_receiver("multicast.both", credit=100)
        rcv_i = ci.create_receiver("multicast.both", credit=100)
        anon = ce.create_sender(None)
        deadline = time.monotonic() + TIMEOUT
        up = False  # probes until one reached I (the uplink's sender is attached)
        while not up:
            assert time.monotonic() < deadline, "no probe reached the interior"
            if anon.link.credit > 0:
                anon.link.send(Message(address="multicast.both", body="probe")).settle()
            for _ in range(20):
                for c in (ce, ci):
                    c.container.timeout = 0.01
                    c.container.process()
            up = bool(settle_all(take(rcv_i)))
        time.sleep(0.5)
        settle_all(take(rcv_e) + take(rcv_i))
        for i in range(3):
            anon.link.send(Message(address="multicast.both", body=f"m{i}")).settle()
        got = collect([ce, ci], [rcv_e, rcv_i], expect=None, idle=2.0, timeout=TIMEOUT)
        got = [[b for b in bodies if b != "probe"] for bodies in got]
        assert got == [["m0", "m1", "m2"]] * 2, got
