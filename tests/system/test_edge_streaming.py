"""Streaming links on edge connections (1.19's ``qd.streaming-links`` between an edge and its
interior router), against launched routers with real proton clients.

``E ==> I``: edge router E with its uplink to interior router I's ``role: edge`` listener;
``kinds`` says whose E and I are (ours, or 1.19 with ``QDROUTERD_1X``: the 1.19 pair is where
the expected behaviour comes from). ``up``: the sender on E, the receivers on I; ``down``: the
other way round.

A message still arriving when it is routed over the edge connection travels on a link of its
own (an anonymous sender the router attaches on that connection), so the small messages sent
behind it to the same address, over the same connection, are not stuck behind it: the sender
holds the large message's last bytes back, small messages get through, then the large one
completes intact. Both ends list the streaming link as 1.19 does (an ``endpoint`` link with no
address), and a delivery in flight when the edge connection drops is not lost silently.

Every wait is bounded; nothing here asserts a timing.
"""
from __future__ import annotations

import proton
import pytest

import bigmsg
from conftest import free_port
from test_edge import qdstat
from test_edge_fidelity import query, wait_edge_connection
from test_edge_mixed_1x import MixedEdges, edge_connector, edge_listener
from test_mixed_1x import ONE_X

MB = 1000 * 1000
TIMEOUT = 90.0
ADDRESS = "stream.q"   # balanced (the default): a busy receiver is not chosen again
SIZE = 12 * MB
HOLD_AT = 3 * MB       # beyond the streaming threshold and a window: the message streams


def _needs_1x(*kinds):
    if "1x" in kinds:
        return [pytest.mark.skipif(not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x "
                                                     "install prefix to compare")]
    return []


KINDS = [pytest.param(k, id=f"{k[0]}-edge-{k[1]}-interior", marks=_needs_1x(*k))
         for k in (("ours", "ours"), ("ours", "1x"), ("1x", "ours"), ("1x", "1x"))]


@pytest.fixture
def routers(router_factory, tmp_path):
    net = MixedEdges(router_factory, tmp_path)
    yield net
    net.stop()


def _start(routers, kind: str, router_id: str, mode: str, extra: str):
    if kind == "ours":
        return routers.ours(router_id, mode, extra)
    return routers.one_x(router_id, mode, extra)


def _pair(routers, kinds: tuple) -> tuple:
    """E ==> I of ``kinds`` (edge's, interior's); (edge, interior) once I lists E."""
    port = free_port()
    interior = _start(routers, kinds[1], "Router.I", "interior", edge_listener(port))
    edge = _start(routers, kinds[0], "Edge.E", "edge", edge_connector(port))
    wait_edge_connection(interior)
    return edge, interior


def _ends(edge, interior, direction: str) -> tuple:
    """(sending router, receiving router)."""
    return (edge, interior) if direction == "up" else (interior, edge)


def _setup(edge, interior, direction: str) -> tuple:
    """Two receivers of ADDRESS on the receiving router, a sender connection on the other
    once its router gives a sender to ADDRESS credit: (peers, receivers, sender peer)."""
    sending, receiving = _ends(edge, interior, direction)
    rp = bigmsg.Peer(receiving.port, "receivers")
    rcvs = [bigmsg.BigReceiver(rp, ADDRESS, name=f"r{i}") for i in range(2)]
    sp = bigmsg.Peer(sending.port, "sender")
    probe = sp.session.sender("probe")
    probe.target.address = ADDRESS
    probe.open()
    bigmsg.pump([rp, sp], lambda: probe.credit > 0, TIMEOUT)
    return [rp, sp], rcvs, sp


def _partial(rcvs) -> int:
    return max(r.partial for r in rcvs)


def _complete(rcvs) -> list:
    return [m for r in rcvs for m in r.messages]


LINK_COLUMNS = ["linkType", "linkDir", "owningAddr", "connectionId", "linkName", "priority",
                "capacity", "peer", "undeliveredCount", "unsettledCount", "deliveryCount"]


def _edge_links(router) -> dict:
    """router.link rows on the router's edge connection (the edge's uplink, the interior's
    connection from the edge), by link name."""
    rows = query(router, "router.link", LINK_COLUMNS)
    conns = {str(r["identity"]) for r in query(router, "connection", ["role", "identity"])
             if r["role"] == "edge"}
    return {r["linkName"]: r for r in rows if str(r["connectionId"]) in conns}


def _qdstat_link(router, name: str) -> tuple:
    """(type, dir, addr, pri) of link ``name`` in ``qdstat -l -v`` (ours, on either kind)."""
    rows = qdstat(router.port, "-l", "-v")
    head = rows[0]
    for row in rows[1:]:
        if row[head.index("name")] == name:
            return tuple(row[head.index(c)] for c in ("type", "dir", "addr", "pri"))
    return ()


def _counts(row) -> tuple:
    return row["undeliveredCount"], row["unsettledCount"], row["deliveryCount"]


@pytest.mark.parametrize("kind", [pytest.param(k, marks=_needs_1x(k)) for k in ("ours", "1x")])
def test_receiver_link_counts_a_message_still_arriving_as_undelivered(routers, kind):
    """One router, a receiver with credit, a sender streaming a large message and holding its
    last bytes back: the receiver's link counts it undelivered (not yet a delivery, not
    unsettled) until its last frame has gone out, then one delivery, unsettled until the
    receiver settles it (1.19's counts)."""
    router = _start(routers, kind, "Router.S", "standalone", "")
    rp = bigmsg.Peer(router.port, "receiver")
    rcv = bigmsg.BigReceiver(rp, ADDRESS, name="r0")
    sp = bigmsg.Peer(router.port, "sender")
    probe = sp.session.sender("probe")
    probe.target.address = ADDRESS
    probe.open()
    bigmsg.pump([rp, sp], lambda: probe.credit > 0, TIMEOUT)
    big = bigmsg.BigSender(sp, ADDRESS, SIZE, name="big", hold_at=HOLD_AT)
    bigmsg.pump([rp, sp], lambda: rcv.partial > MB, TIMEOUT, [big, rcv])

    def out_row() -> dict:
        rows = [r for r in query(router, "router.link", LINK_COLUMNS)
                if r["linkDir"] == "out" and r["owningAddr"] == "M0" + ADDRESS]
        assert len(rows) == 1, rows
        return rows[0]

    assert not big.done and not rcv.messages
    assert _counts(out_row()) == (1, 0, 0)
    big.hold_at = None
    bigmsg.pump([rp, sp], lambda: big.outcome() != 0, TIMEOUT, [big, rcv])
    assert big.outcome() == proton.Delivery.ACCEPTED
    assert [m[:3] for m in rcv.messages] == [(SIZE, bigmsg.body_crc(SIZE), False)]
    assert _counts(out_row()) == (0, 0, 1)
    for p in (rp, sp):
        p.close()


@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize("kinds", KINDS)
def test_small_messages_pass_a_large_one_held_half_way(routers, kinds, direction):
    """A large message to ADDRESS streams over the edge connection with its last bytes held
    back by its sender; small messages sent after it to the same address, on the same client
    connection, arrive meanwhile (each accepted); then the large one completes intact and is
    accepted."""
    edge, interior = _pair(routers, kinds)
    peers, rcvs, sp = _setup(edge, interior, direction)
    before = set(_edge_links(_ends(edge, interior, direction)[0]))
    big = bigmsg.BigSender(sp, ADDRESS, SIZE, name="big", hold_at=HOLD_AT)
    bigmsg.pump(peers, lambda: _partial(rcvs) > MB, TIMEOUT, [big] + rcvs)
    assert not big.done and not _complete(rcvs)
    for i in range(3):
        small = bigmsg.BigSender(sp, ADDRESS, 100, name=f"small-{i}")
        try:
            bigmsg.pump(peers, lambda: small.outcome() != 0, 30, [big, small] + rcvs)
        except AssertionError:
            pytest.fail(f"small message {i} is stuck behind the large one")
        assert small.outcome() == proton.Delivery.ACCEPTED
    got = _complete(rcvs)
    assert [m[:3] for m in got] == [(100, bigmsg.body_crc(100), False)] * 3
    assert not big.done and _partial(rcvs) < SIZE  # the large one is still in flight
    # both routers list the streaming link it travels on: an anonymous endpoint link
    sending, receiving = _ends(edge, interior, direction)
    now = _edge_links(sending)
    new = [name for name in set(now) - before
           if now[name]["undeliveredCount"] + now[name]["unsettledCount"] >= 1]
    assert len(new) == 1, repr([now[n] for n in new])
    out_row = now[new[0]]
    in_row = _edge_links(receiving).get(new[0])
    assert (out_row["linkType"], out_row["linkDir"], out_row["owningAddr"]) == (
        "endpoint", "out", None), out_row
    assert in_row is not None, new[0]
    assert (in_row["linkType"], in_row["linkDir"], in_row["owningAddr"]) == (
        "endpoint", "in", None), in_row
    assert (out_row["priority"], in_row["priority"]) == (4, 4)
    # as in 1.19, the message whose last frame has not gone out yet is undelivered there
    assert _counts(out_row) == (1, 0, 0), out_row
    # and so does qdstat -l
    assert _qdstat_link(sending, new[0]) == ("endpoint", "out", "", "4")
    assert _qdstat_link(receiving, new[0]) == ("endpoint", "in", "", "4")
    big.hold_at = None
    bigmsg.pump(peers, lambda: len(_complete(rcvs)) >= 4, TIMEOUT, [big] + rcvs)
    assert (SIZE, bigmsg.body_crc(SIZE), False) in [m[:3] for m in _complete(rcvs)]
    bigmsg.pump(peers, lambda: big.outcome() != 0, 30, [big] + rcvs)
    assert big.outcome() == proton.Delivery.ACCEPTED
    # once gone whole (and settled) it is one delivery of the streaming link
    assert _counts(_edge_links(sending)[new[0]]) == (0, 0, 1)
    for p in peers:
        p.close()


@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize("kinds", KINDS)
def test_edge_connection_lost_mid_stream(routers, kinds, direction):
    """The router beyond the edge connection stops while a large unsettled message is half
    way across it: the sender is told (an outcome on the delivery, or its connection
    closes); the delivery is not left hanging."""
    edge, interior = _pair(routers, kinds)
    peers, rcvs, sp = _setup(edge, interior, direction)
    big = bigmsg.BigSender(sp, ADDRESS, SIZE, name="big", hold_at=HOLD_AT)
    bigmsg.pump(peers, lambda: _partial(rcvs) > MB, TIMEOUT, [big] + rcvs)
    _, receiving = _ends(edge, interior, direction)
    receiving.proc.stop()
    peers[0].close()

    def told() -> bool:
        return bool(big.outcome() or sp.closed
                    or sp.conn.state & proton.Endpoint.REMOTE_CLOSED
                    or big.link.state & proton.Endpoint.REMOTE_CLOSED)

    bigmsg.pump([sp], told, TIMEOUT, [big])
    if big.outcome():
        assert big.outcome() in (proton.Delivery.MODIFIED, proton.Delivery.RELEASED,
                                 proton.Delivery.REJECTED), big.outcome()
    sp.close()
