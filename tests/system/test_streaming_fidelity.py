"""Streamed deliveries as Qpid Dispatch 1.19 passes them (issue 28, items 8 and 10), against
launched routers with real proton clients; with ``QDROUTERD_1X`` every check runs against 1.19
routers too (the "1.x" cases), which is where the expected behaviour comes from.

Bytes that are no AMQP sections (item 8): 1.19 checks only optional sections before routing a
message (a section that does not match its descriptor counts as absent), so it forwards such
bytes untouched, whole or streamed; streamed and then aborted, the receiver gets the delivery
started and then aborted, and the link goes on. Checked on one router, across two, to multicast
receivers and over a link route.

Several large deliveries at once toward one receiver across two routers (item 10): the ones
behind the first fill their windows while it streams; 1.19's window (Q2) holds the delivery,
not the connection, so every one arrives. 2, 3 and 5 of them, from senders on one connection or
each on its own, unsettled and pre-settled.

Every wait is bounded; nothing here asserts a timing.
"""
from __future__ import annotations

import os
import textwrap

import proton
import pytest

import bigmsg
from conftest import free_port
from test_streaming import TIMEOUT, _answer_attach, _line

MB = 1000 * 1000
ONE_X = os.environ.get("QDROUTERD_1X", "")


def _need_1x() -> None:
    if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
        pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")


IDLE = 2  # idleTimeoutSeconds of the listener at One.idle_port


def _config(broker_port: int, idle_port: int) -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {idle_port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            idleTimeoutSeconds: {IDLE}
        }}
        address {{
            prefix: mc
            distribution: multicast
        }}
        listener {{
            name: brk
            host: 127.0.0.1
            port: {broker_port}
            role: route-container
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        linkRoute {{
            prefix: lr
            direction: out
            connection: brk
        }}
        """


class One:
    """One router (ours or 1.19) with a multicast prefix ``mc``, a link route ``lr`` to a
    broker on the listener at ``broker_port`` and a listener with an idle time-out of IDLE
    seconds at ``idle_port``."""

    def __init__(self, router, broker_port: int, idle_port: int, one_x: bool) -> None:
        self.router = router
        self.port = router.port
        self.broker_port = broker_port
        self.idle_port = idle_port
        self.one_x = one_x


@pytest.fixture(params=["ours", "1.x"])
def one(request, router_factory, tmp_path):
    broker_port, idle_port = free_port(), free_port()
    config = _config(broker_port, idle_port)
    if request.param == "ours":
        yield One(router_factory(textwrap.dedent(config)), broker_port, idle_port, False)
        return
    _need_1x()
    from test_autolinks_1x import start_1x
    router = start_1x(tmp_path, f"X{free_port()}", config)
    try:
        yield One(router, broker_port, idle_port, True)
    finally:
        router.proc.stop()


@pytest.fixture(params=["ours", "1.x"])
def two(request, router_factory, tmp_path):
    """Two interior routers, the second connected to the first: (first, last)."""
    if request.param == "ours":
        yield tuple(_line(router_factory, 2))
        return
    _need_1x()
    from test_mixed_1x import MixedNet
    net = MixedNet(router_factory, tmp_path)
    try:
        first = net.add_1x("A")
        last = net.add_1x("B", connect_to=(("A", 1),))
        yield first, last
    finally:
        net.stop_all()


def _receivers(port: int, *addresses: str, raw: bool = True, credit: int = 10) -> tuple:
    rp = bigmsg.Peer(port, "receivers")
    rcvs = [bigmsg.BigReceiver(rp, a, name=f"r{i}", raw=raw, credit=credit)
            for i, a in enumerate(addresses)]
    bigmsg.pump([rp], lambda: all(r.link.state & proton.Endpoint.REMOTE_ACTIVE for r in rcvs),
                10)
    return rp, rcvs


def _routable(first, address: str, peers: list) -> bigmsg.Peer:
    """Wait until ``first`` gives a sender to ``address`` credit (it knows a receiver)."""
    sp = bigmsg.Peer(first.port, "probe")
    probe = sp.session.sender(f"probe-{address}")
    probe.target.address = address
    probe.open()
    bigmsg.pump(peers + [sp], lambda: probe.credit > 0, 60)
    return sp


def _close(*peers) -> None:
    for p in peers:
        p.close()


# ---- item 8: bytes that are no AMQP sections -------------------------------------------------

RAW_SIZES = [3, 100_000, 5 * MB]  # whole, still whole (< the streaming threshold), streamed


@pytest.mark.parametrize("size", RAW_SIZES)
def test_raw_bytes_arrive_as_sent(one, size):
    rp, (rcv,) = _receivers(one.port, "raw")
    sp = bigmsg.Peer(one.port, "sender")
    snd = bigmsg.BigSender(sp, "raw", size, raw=True)
    bigmsg.pump([rp, sp], lambda: bool(rcv.messages), TIMEOUT, [snd, rcv])
    assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    bigmsg.pump([rp, sp], lambda: snd.outcome() != 0, 20, [snd, rcv])
    assert snd.outcome() == proton.Delivery.ACCEPTED
    _close(rp, sp)


def _abort_then_next(peers: list, receivers: list, snd: bigmsg.BigSender, raw_next: bool,
                     ) -> None:
    """``snd`` aborts half way: every receiver gets an aborted delivery; then a whole message
    on the same sender link arrives at every receiver (the link goes on)."""
    bigmsg.pump(peers, lambda: all(r.messages for r in receivers), TIMEOUT,
                [snd] + receivers)
    assert snd.aborted
    assert [r.messages[0][2] for r in receivers] == [True] * len(receivers)
    nxt = bigmsg.BigSender(snd.peer, "", 1000, link=snd.link, raw=raw_next,
                           settled=snd.settled)
    bigmsg.pump(peers, lambda: all(len(r.messages) >= 2 for r in receivers), TIMEOUT,
                [nxt] + receivers)
    for r in receivers:
        assert r.messages[1][:3] == (1000, bigmsg.body_crc(1000), False)


def test_raw_bytes_streamed_then_aborted(one):
    rp, (rcv,) = _receivers(one.port, "raw")
    sp = bigmsg.Peer(one.port, "sender")
    snd = bigmsg.BigSender(sp, "raw", 20 * MB, raw=True, abort_at=5 * MB)
    _abort_then_next([rp, sp], [rcv], snd, raw_next=True)
    _close(rp, sp)


def test_raw_bytes_streamed_then_aborted_to_multicast_receivers(one):
    rp, rcvs = _receivers(one.port, "mc.raw", "mc.raw", "mc.raw")
    sp = bigmsg.Peer(one.port, "sender")
    snd = bigmsg.BigSender(sp, "mc.raw", 20 * MB, raw=True, abort_at=5 * MB, settled=True)
    _abort_then_next([rp, sp], rcvs, snd, raw_next=True)
    _close(rp, sp)


def test_raw_bytes_over_a_link_route_streamed_then_aborted(one):
    """A broker sends raw bytes on the far side of a link route, aborts half way, then sends
    a whole delivery on the same link: the client gets the aborted one, then the next."""
    broker = bigmsg.Peer(one.broker_port, "broker")
    bigmsg.pump([broker], lambda: broker.conn.state & proton.Endpoint.REMOTE_ACTIVE, 10)
    if not one.one_x:
        one.router.proc.wait_for_line("Link Route Activated", timeout=10)
    rp = bigmsg.Peer(one.port, "receivers")
    rcv = bigmsg.BigReceiver(rp, "lr.raw", raw=True)
    link = _answer_attach(broker, [rp])
    snd = bigmsg.BigSender(broker, "lr.raw", 20 * MB, link=link, raw=True, abort_at=5 * MB)
    _abort_then_next([rp, broker], [rcv], snd, raw_next=True)
    _close(rp, broker)


@pytest.mark.parametrize("size,abort_at", [(5 * MB, None), (20 * MB, 5 * MB)])
def test_raw_bytes_across_two_routers(two, size, abort_at):
    first, last = two
    rp, (rcv,) = _receivers(last.port, "raw")
    probe = _routable(first, "raw", [rp])
    sp = bigmsg.Peer(first.port, "sender")
    snd = bigmsg.BigSender(sp, "raw", size, raw=True, abort_at=abort_at)
    if abort_at is not None:
        _abort_then_next([rp, sp, probe], [rcv], snd, raw_next=True)
    else:
        bigmsg.pump([rp, sp, probe], lambda: bool(rcv.messages), TIMEOUT, [snd, rcv])
        assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
        bigmsg.pump([rp, sp, probe], lambda: snd.outcome() != 0, 20, [snd, rcv])
        assert snd.outcome() == proton.Delivery.ACCEPTED
    _close(rp, sp, probe)


# ---- item 10: several large deliveries at once toward one receiver ---------------------------

@pytest.mark.parametrize("settled", [False, True], ids=["unsettled", "presettled"])
def test_two_large_deliveries_from_one_sender_across_two_routers(two, settled):
    """Two deliveries of 3 MB (each beyond a window), one after the other on one sender link
    at router A, to one receiver on router B: both arrive intact."""
    first, last = two
    rp, (rcv,) = _receivers(last.port, "big", raw=False)
    probe = _routable(first, "big", [rp])
    size = 3 * MB
    sp = bigmsg.Peer(first.port, "sender")
    one = bigmsg.BigSender(sp, "big", size, settled=settled)
    every = [rp, probe, sp]
    bigmsg.pump(every, lambda: one.done, TIMEOUT, [one, rcv])
    two_ = bigmsg.BigSender(sp, "big", size, settled=settled, link=one.link)
    bigmsg.pump(every, lambda: len(rcv.messages) >= 2, TIMEOUT, [two_, rcv])
    assert [m[:3] for m in rcv.messages] == [(size, bigmsg.body_crc(size), False)] * 2
    if not settled:
        bigmsg.pump(every, lambda: one.outcome() != 0 and two_.outcome() != 0, 20, [rcv])
        assert (one.outcome(), two_.outcome()) == (proton.Delivery.ACCEPTED,) * 2
    _close(*every)


@pytest.mark.parametrize("settled", [False, True], ids=["unsettled", "presettled"])
@pytest.mark.parametrize("connections", ["one", "each"])
@pytest.mark.parametrize("count", [2, 3, 5])
def test_concurrent_large_deliveries_to_one_receiver_across_two_routers(two, count,
                                                                        connections, settled):
    """``count`` deliveries of 3 MB (each beyond a window) sent at once from router A to one
    receiver on router B: all arrive intact (the deliveries queued behind the first one at B
    must not stop B reading the connection the first one's bytes come on)."""
    first, last = two
    rp, (rcv,) = _receivers(last.port, "big", raw=False)
    probe = _routable(first, "big", [rp])
    size = 3 * MB
    if connections == "one":
        peers = [bigmsg.Peer(first.port, "senders")] * count
    else:
        peers = [bigmsg.Peer(first.port, f"sender-{i}") for i in range(count)]
    senders = [bigmsg.BigSender(p, "big", size, settled=settled, name=f"big-{i}")
               for i, p in enumerate(peers)]
    every = [rp, probe] + list(dict.fromkeys(peers))
    bigmsg.pump(every, lambda: len(rcv.messages) >= count, TIMEOUT, senders + [rcv])
    assert [m[:3] for m in rcv.messages] == [(size, bigmsg.body_crc(size), False)] * count
    if not settled:
        bigmsg.pump(every, lambda: all(s.outcome() != 0 for s in senders), 20, senders + [rcv])
        assert [s.outcome() for s in senders] == [proton.Delivery.ACCEPTED] * count
    _close(*every)


def test_a_delivery_held_longer_than_the_idle_timeout_keeps_its_connection(one):
    """A receiver without credit holds a large message (its window full, the sender's
    connection not read on) for longer than the sender's idle time-out: the sender's
    heartbeats still count, so its connection stays and the message arrives once the receiver
    grants credit (1.19 reads a connection whose delivery its Q2 holds)."""
    rp, (rcv,) = _receivers(one.port, "held", raw=False, credit=0)
    sp = bigmsg.Peer(one.idle_port, "sender")
    size = 20 * MB
    snd = bigmsg.BigSender(sp, "held", size)
    bigmsg.pump([rp, sp], lambda: snd.sent > 2 * MB, 30, [snd, rcv])
    deadline = bigmsg.time.monotonic() + 3 * IDLE
    bigmsg.pump([rp, sp], lambda: bigmsg.time.monotonic() > deadline, 6 * IDLE, [snd, rcv])
    assert not sp.closed and not (sp.conn.state & proton.Endpoint.REMOTE_CLOSED), (
        sp.conn.remote_condition)
    assert not rcv.messages
    if not one.one_x:  # ours holds the sender back (1.19 takes it all into its sessions)
        assert snd.sent < size
    rcv.link.flow(1)
    bigmsg.pump([rp, sp], lambda: bool(rcv.messages), TIMEOUT, [snd, rcv])
    assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    _close(rp, sp)
