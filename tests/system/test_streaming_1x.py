"""Streaming (issue 15) across a mixed network: our routers and Qpid Dispatch 1.19 in a line.

A large message and a sender's abort half way cross a 1.x router between two of ours, and one
of ours between two 1.x routers: the bytes arrive intact, the abort arrives as an aborted
transfer, and our routers' RSS stays bounded. Runs only with ``QDROUTERD_1X`` (see
test_mixed_1x.py).
"""
from __future__ import annotations

import proton
import pytest

import bigmsg
from test_mixed_1x import TOPOLOGIES, mixed, pytestmark, remote_seen  # noqa: F401 - fixture
from test_streaming import MB, TIMEOUT, Rss, _open, small_passes_large


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_large_message_and_abort_mixed_line(mixed, topology):  # noqa: F811 - the fixture
    first, last = TOPOLOGIES[topology](mixed)
    rp, (rcv,) = _open(last, "big")
    for r in mixed.routers.values():  # every router on the way knows the receiver
        if r is not last:
            remote_seen(r, "big")
    ours = [r for r in mixed.routers.values() if not getattr(r, "one_x", False)]
    rss = Rss(*ours)
    size = 50 * MB
    sp = bigmsg.Peer(first.port, "sender")
    snd = bigmsg.BigSender(sp, "big", size)
    peers = [rp, sp]
    rounds = [0]

    def sample():
        rounds[0] += 1
        if rounds[0] % 20 == 0:
            rss.sample()

    bigmsg.pump(peers, lambda: len(rcv.messages) >= 1, TIMEOUT, [snd, rcv], sample)
    assert rcv.messages[0][:3] == (size, bigmsg.body_crc(size), False)
    bigmsg.pump(peers, lambda: snd.outcome() != 0, 20, [snd, rcv])
    assert snd.outcome() == proton.Delivery.ACCEPTED
    assert max(rss.growth_mb()) < 60
    snd2 = bigmsg.BigSender(sp, "big", 20 * MB, abort_at=10 * MB, name="aborting")
    bigmsg.pump(peers, lambda: len(rcv.messages) >= 2, TIMEOUT, [snd2, rcv])
    assert rcv.messages[1][2] is True
    for p in peers:
        p.close()


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_small_message_passes_large_one_mixed_line(mixed, topology):  # noqa: F811 - the fixture
    """Both kinds take streaming links toward each other (each offers qd.streaming-links): a
    small message passes a 100 MB one on the way through a 1.x router and through ours."""
    first, last = TOPOLOGIES[topology](mixed)

    def wait_known():
        for r in mixed.routers.values():
            if r is not last:
                remote_seen(r, "big")
                remote_seen(r, "small")

    small_passes_large(first, last, wait_known)
