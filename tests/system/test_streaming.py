"""Cut-through forwarding (issue 15) against launched routers, with real proton clients.

A message larger than the worker's streaming threshold is routed on its first bytes and its body
follows in chunks; the router holds a bounded window of it, whatever its size. Checked here by
behaviour: bytes and CRC arrive intact, the sender's abort reaches every receiver as an aborted
transfer, router RSS stays bounded (a bound far below the message size, not a timing), a small
message on another link is not stuck behind a large one, and a slow receiver still gets it all.
"""
from __future__ import annotations

import textwrap

import proton
import pytest

import bigmsg
from conftest import free_port
from test_network import remote_seen, valid_origin

TIMEOUT = 120.0
MB = 1000 * 1000


def _open(router, *receivers):
    rp = bigmsg.Peer(router.port, "receivers")
    rcvs = [bigmsg.BigReceiver(rp, addr, name=f"r{i}") for i, addr in enumerate(receivers)]
    bigmsg.pump([rp], lambda: all(r.link.state & proton.Endpoint.REMOTE_ACTIVE for r in rcvs),
                10)
    return rp, rcvs


def _send(router, peers, receivers, size, address="big", abort_at=None, sample=None,
          settled=False, expect=1):
    sp = bigmsg.Peer(router.port, "sender")
    snd = bigmsg.BigSender(sp, address, size, abort_at=abort_at, settled=settled)
    rounds = [0]

    def on_round():
        rounds[0] += 1
        if sample is not None and rounds[0] % 20 == 0:
            sample()

    bigmsg.pump(peers + [sp], lambda: all(len(r.messages) >= expect for r in receivers),
                TIMEOUT, [snd] + receivers, on_round)
    return sp, snd


class Rss:
    """Peak RSS growth of a router's process tree (kB) while a test runs."""

    def __init__(self, *routers) -> None:
        self.pids = [r.proc.proc.pid for r in routers]
        self.base = [bigmsg.tree_rss_kb(p) for p in self.pids]
        self.peak = list(self.base)

    def sample(self) -> None:
        for i, pid in enumerate(self.pids):
            self.peak[i] = max(self.peak[i], bigmsg.tree_rss_kb(pid))

    def growth_mb(self) -> list:
        self.sample()
        return [(p - b) / 1024 for p, b in zip(self.peak, self.base)]


@pytest.mark.parametrize("size", [1 * MB, 100 * MB])
def test_large_message_one_router(router, size):
    rp, (rcv,) = _open(router, "big")
    rss = Rss(router)
    sp, snd = _send(router, [rp], [rcv], size, sample=rss.sample)
    length, crc, aborted, _ = rcv.messages[0]
    assert (length, crc, aborted) == (size, bigmsg.body_crc(size), False)
    bigmsg.pump([rp, sp], lambda: snd.outcome() != 0, 10, [snd, rcv])
    assert snd.outcome() == proton.Delivery.ACCEPTED
    # the whole message never sits in the router: a few windows at most (the bound is far
    # below the size; a router holding it whole grows by several times 100 MB)
    assert rss.growth_mb()[0] < 60
    rp.close()
    sp.close()


def _answer_attach(peer, others=(), timeout: float = 10.0):
    """The link the router attached on ``peer``'s connection, answered (opened) with the
    router's own terminus addresses, as a broker answers (``others``: peers pumped too)."""
    found = []

    def attached():
        link = peer.conn.link_head(proton.Endpoint.LOCAL_UNINIT)
        if link is not None:
            found.append(link)
        return bool(found)

    bigmsg.pump([peer, *others], attached, timeout)
    link = found[0]
    if link.session.state & proton.Endpoint.LOCAL_UNINIT:
        link.session.open()
    link.source.address = link.remote_source.address
    link.target.address = link.remote_target.address
    link.open()
    return link


ROUTER_ATTACHED = {
    # an auto-link in (phase 0: the receiver's phase, no waypoint rule)
    "auto-link": ("big", """
        autoLink {
            address: big
            direction: in
            phase: 0
            connection: brk
        }
        """),
    # the far side of a link route for receivers
    "link-route": ("lr.big", """
        linkRoute {
            prefix: lr
            direction: out
            connection: brk
        }
        """),
}


@pytest.mark.parametrize("kind", sorted(ROUTER_ATTACHED))
def test_large_message_from_a_broker_on_a_link_the_router_attached_is_streamed(router_factory,
                                                                                kind):
    """What a broker sends on a link the router attached (an auto-link in, a link route's far
    side) is passed on from its first bytes, as a client's message is: the receiver has
    megabytes of it while the broker is still sending, and the router holds a window of it,
    not all of it."""
    address, section = ROUTER_ATTACHED[kind]
    port = free_port()
    router = router_factory(textwrap.dedent(f"""
        listener {{
            name: brk
            host: 127.0.0.1
            port: {port}
            role: route-container
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """) + textwrap.dedent(section))
    broker = bigmsg.Peer(port, "broker")
    if kind == "link-route":  # a receiver's attach is routed once the broker is connected
        bigmsg.pump([broker], lambda: broker.conn.state & proton.Endpoint.REMOTE_ACTIVE, 10)
        router.proc.wait_for_line("Link Route Activated", timeout=10)
    rp = bigmsg.Peer(router.port, "receivers")
    rcv = bigmsg.BigReceiver(rp, address)
    link = _answer_attach(broker, [rp])
    assert link.is_sender and link.remote_source.address == address
    size = 100 * MB
    snd = bigmsg.BigSender(broker, address, size, link=link)
    rss = Rss(router)
    bigmsg.pump([rp, broker], lambda: rcv.partial > 2 * MB or rcv.messages, TIMEOUT,
                [snd, rcv], rss.sample)
    assert not snd.done, "the receiver got nothing before the broker had sent it all"
    bigmsg.pump([rp, broker], lambda: rcv.messages, TIMEOUT, [snd, rcv], rss.sample)
    assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    bigmsg.pump([rp, broker], lambda: snd.outcome() != 0, 10, [snd, rcv])
    assert snd.outcome() == proton.Delivery.ACCEPTED
    assert rss.growth_mb()[0] < 60
    rp.close()
    broker.close()


def test_sender_abort_half_way(router):
    rp, (rcv,) = _open(router, "big")
    sp, snd = _send(router, [rp], [rcv], 20 * MB, abort_at=10 * MB)
    assert snd.aborted
    assert rcv.messages[0][2] is True  # an aborted transfer, not a truncated message
    # the link goes on: a whole message after it arrives intact
    snd2 = bigmsg.BigSender(sp, "big", 1000, name="after")
    bigmsg.pump([rp, sp], lambda: len(rcv.messages) >= 2, 20, [snd2, rcv])
    assert rcv.messages[1][:3] == (1000, bigmsg.body_crc(1000), False)
    rp.close()
    sp.close()


def test_sender_abort_multicast(router_factory):
    router = router_factory(textwrap.dedent("""
        address {
            prefix: mc
            distribution: multicast
        }
        """))
    rp, rcvs = _open(router, "mc.big", "mc.big", "mc.big")
    sp, snd = _send(router, [rp], rcvs, 20 * MB, address="mc.big", abort_at=10 * MB,
                    settled=True)
    assert all(r.messages[0][2] is True for r in rcvs)
    rp.close()
    sp.close()


def test_multicast_large_message(router_factory):
    router = router_factory(textwrap.dedent("""
        address {
            prefix: mc
            distribution: multicast
        }
        """))
    rp, rcvs = _open(router, "mc.big", "mc.big")
    size = 5 * MB
    sp, snd = _send(router, [rp], rcvs, size, address="mc.big", settled=True)
    for r in rcvs:
        assert r.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    rp.close()
    sp.close()


def test_slow_receiver_bounded(router):
    """A receiver that reads slowly gets the whole message; the router holds a window of it,
    not what the sender could push (the sender is held back instead)."""
    rp, (rcv,) = _open(router, "big")
    rp.read_limit = 256 * 1024  # bytes per pump round
    rss = Rss(router)
    size = 30 * MB
    sp, snd = _send(router, [rp], [rcv], size, sample=rss.sample)
    assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    assert rss.growth_mb()[0] < 40
    rp.close()
    sp.close()


def test_small_message_not_stuck_behind_large(router):
    """While a large message streams to one receiver, a small one sent after it on the same
    connection to another receiver on the same connection arrives after a bounded part of the
    large one (the router's windows and socket buffers), not after all of it."""
    rp, (big_rcv, small_rcv) = _open(router, "big", "small")
    rp.read_limit = 256 * 1024  # the large message takes many rounds
    sp = bigmsg.Peer(router.port, "sender")
    size = 100 * MB
    big = bigmsg.BigSender(sp, "big", size)
    bigmsg.pump([rp, sp], lambda: big_rcv.partial > 2 * MB, TIMEOUT, [big, big_rcv])
    small = bigmsg.BigSender(sp, "small", 100, name="small-sender")
    sent_at = big_rcv.partial
    got_at = []

    def small_in():
        if small_rcv.messages and not got_at:
            got_at.append(big_rcv.partial if not big_rcv.messages else size)
        return bool(got_at)

    bigmsg.pump([rp, sp], small_in, TIMEOUT, [big, small, big_rcv, small_rcv])
    assert small_rcv.messages[0][:3] == (100, bigmsg.body_crc(100), False)
    assert got_at[0] - sent_at < 40 * MB, (sent_at, got_at)
    bigmsg.pump([rp, sp], lambda: len(big_rcv.messages) >= 1, TIMEOUT,
                [big, small, big_rcv, small_rcv])
    assert big_rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    rp.close()
    sp.close()


def test_large_message_held_until_credit(router):
    """A receiver with no credit: the streaming delivery is held in the core (a window of it;
    the sender stalls) and arrives whole once the receiver grants credit."""
    rp = bigmsg.Peer(router.port, "receivers")
    rcv = bigmsg.BigReceiver(rp, "big", credit=0)
    bigmsg.pump([rp], lambda: rcv.link.state & proton.Endpoint.REMOTE_ACTIVE, 10)
    sp = bigmsg.Peer(router.port, "sender")
    size = 20 * MB
    snd = bigmsg.BigSender(sp, "big", size)
    rss = Rss(router)
    # the sender gets credit (a consumer exists) and pushes until the window stops it
    bigmsg.pump([rp, sp], lambda: snd.sent > 4 * MB, 30, [snd, rcv], rss.sample)
    stalled_at = snd.sent
    deadline = bigmsg.time.monotonic() + 1.0
    bigmsg.pump([rp, sp], lambda: bigmsg.time.monotonic() > deadline, 5, [snd, rcv],
                rss.sample)
    assert snd.sent < size  # held back: the router does not take it all while it waits
    assert not rcv.messages and rcv.partial == 0
    rcv.link.flow(1)
    bigmsg.pump([rp, sp], lambda: len(rcv.messages) >= 1, TIMEOUT, [snd, rcv], rss.sample)
    assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    assert stalled_at < size
    assert rss.growth_mb()[0] < 40
    rp.close()
    sp.close()


def test_max_message_size_while_streaming(router_factory):
    """maxMessageSize counts the bytes as they stream: past it the copy is aborted, the
    delivery rejected (amqp:link:message-size-exceeded) and the connection closed."""
    port = free_port()
    router = router_factory(textwrap.dedent(f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            role: normal
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            maxMessageSize: 3000000
        }}
        """))
    rp, (rcv,) = _open(router, "big")
    sp = bigmsg.Peer(port, "sender")
    snd = bigmsg.BigSender(sp, "big", 10 * MB)
    bigmsg.pump([rp, sp], lambda: bool(sp.conn.state & proton.Endpoint.REMOTE_CLOSED),
                TIMEOUT, [snd, rcv])
    assert sp.conn.remote_condition is not None
    assert sp.conn.remote_condition.name == "amqp:connection:forced"
    bigmsg.pump([rp], lambda: len(rcv.messages) >= 1 or rcv.partial == 0, 10, [rcv])
    # what the receiver got of it (if anything) ends aborted, never as a complete message
    assert all(m[2] for m in rcv.messages)
    rp.close()
    sp.close()


def _line(router_factory, n: int) -> list:
    """``n`` interior routers in a line (each connects to the previous one)."""
    ports = [free_port() for _ in range(n)]
    routers = []
    for i in range(n):
        extra = textwrap.dedent(f"""
            listener {{
                host: 127.0.0.1
                port: {ports[i]}
                role: inter-router
            }}
            """)
        if i:
            extra += textwrap.dedent(f"""
                connector {{
                    host: 127.0.0.1
                    port: {ports[i - 1]}
                    role: inter-router
                }}
                """)
        routers.append(router_factory(extra, router_id=f"R{i}", mode="interior"))
    return routers


def _wait_route(first, last, address: str) -> tuple:
    """A receiver on ``last``; wait until ``first`` can route to it (credit at a sender)."""
    rp, (rcv,) = _open(last, address)
    sp = bigmsg.Peer(first.port, "probe")
    probe = sp.session.sender("probe")
    probe.target.address = address
    probe.open()
    bigmsg.pump([rp, sp], lambda: probe.credit > 0, 60)
    return rp, rcv, sp


def small_passes_large(first, last, wait_known=None) -> None:
    """While a 100 MB message crosses from ``first`` to ``last`` (routers apart), a small one
    sent after it by the same client, at the same priority, arrives before the large one is
    complete: the large one travels on a streaming link of its own (1.19's
    qd.streaming-links), not on the data link of its priority. ``wait_known()`` waits until
    every router on the way knows both receivers (else ``first`` gives a sender credit)."""
    rp, (big_rcv, small_rcv) = _open(last, "big", "small")
    rp.read_limit = 256 * 1024  # the large message takes many rounds
    sp = bigmsg.Peer(first.port, "sender")
    peers = [rp, sp]
    if wait_known is not None:
        wait_known()
    else:
        probes = [sp.session.sender(f"probe-{a}") for a in ("big", "small")]
        for probe, address in zip(probes, ("big", "small")):
            probe.target.address = address
            probe.open()
        bigmsg.pump(peers, lambda: all(p.credit > 0 for p in probes), 60)
    size = 100 * MB
    big = bigmsg.BigSender(sp, "big", size)
    bigmsg.pump(peers, lambda: big_rcv.partial > 2 * MB, TIMEOUT, [big, big_rcv])
    small = bigmsg.BigSender(sp, "small", 100, name="small-sender")
    workers = [big, small, big_rcv, small_rcv]
    bigmsg.pump(peers, lambda: bool(small_rcv.messages or big_rcv.messages), TIMEOUT, workers)
    assert small_rcv.messages, "the large message completed before the small one arrived"
    assert small_rcv.messages[0][:3] == (100, bigmsg.body_crc(100), False)
    assert not big_rcv.messages and big_rcv.partial < size
    bigmsg.pump(peers, lambda: len(big_rcv.messages) >= 1, TIMEOUT, workers)
    assert big_rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    bigmsg.pump(peers, lambda: big.outcome() != 0 and small.outcome() != 0, 20, workers)
    assert (big.outcome(), small.outcome()) == (proton.Delivery.ACCEPTED,) * 2
    for p in peers:
        p.close()


def test_small_message_passes_large_one_between_routers(router_factory):
    routers = _line(router_factory, 2)
    small_passes_large(routers[0], routers[1])


def test_large_message_and_abort_router_line(router_factory):
    routers = _line(router_factory, 3)
    rp, rcv, probe = _wait_route(routers[0], routers[2], "big")
    # credit at R0 says R0 knows the receiver; R1, which forwards the message, must know it
    # too (R0's agent can take the flooded MAU before R1's does; R1 releases until then)
    remote_seen(routers[1], "big")
    valid_origin(routers[1], "R0", "R2")  # and R1's core takes R0's deliveries toward R2
    rss = Rss(*routers)
    size = 100 * MB
    sp, snd = _send(routers[0], [rp, probe], [rcv], size, sample=rss.sample)
    assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    bigmsg.pump([rp, sp, probe], lambda: snd.outcome() != 0, 20, [snd, rcv])
    assert snd.outcome() == proton.Delivery.ACCEPTED
    assert max(rss.growth_mb()) < 60
    # an abort half way reaches the receiver two routers away as an aborted transfer
    sp2, snd2 = _send(routers[0], [rp, probe], [rcv], 20 * MB, abort_at=10 * MB, expect=2)
    assert rcv.messages[1][2] is True
    for p in (rp, sp, sp2, probe):
        p.close()
