"""Exchanges in a network (issue 31 item 3): a sender on another router reaches the exchange,
next hops may be on any router (the one the message came from included), and the same with
Qpid Dispatch 1.19 routers in the network (``QDROUTERD_1X``; those tests are skipped without
it).

Topologies as in test_network.py (``--cost->`` is a connector); ``X`` is a 1.x router, ``A`` and
``B`` ours. Every router is a real process on loopback, every client a real proton client,
every wait bounded.
"""
from __future__ import annotations

import os

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from clients import collect, pump_until
from test_mixed_1x import ONE_X, MixedNet, converged, line_ready, remote_seen
from test_network import Net

TIMEOUT = 30

EXCHANGE = """
    exchange {
        address: Address1
        name: Exchange1
    }
    binding {
        name: toFar
        exchangeName: Exchange1
        bindingKey: far.#
        nextHopAddress: farHop
    }
    binding {
        name: toNear
        exchangeName: Exchange1
        bindingKey: near.*
        nextHopAddress: nearHop
    }
    """

needs_1x = pytest.mark.skipif(
    not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK),
    reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to run the mixed tests")


def _exchange_across(sender_router, exchange_router, far_router, ready) -> None:
    """A sender on ``sender_router`` sends to the exchange on ``exchange_router``; ``far.*``
    subjects go to a receiver on ``far_router``, ``near.*`` to one on the exchange's router."""
    conns = [BlockingConnection(r.url, timeout=TIMEOUT)
             for r in (sender_router, exchange_router, far_router)]
    try:
        far = conns[2].create_receiver("farHop", credit=50)
        near = conns[1].create_receiver("nearHop", credit=50)
        ready()
        snd = conns[0].create_sender("Address1")
        pump_until(conns, lambda: snd.link.credit > 0, timeout=TIMEOUT,
                   what="credit toward the remote exchange")
        messages = [Message(subject=s, body=i) for i, s in enumerate(
            ["far.a", "near.b", "far", "nowhere", "near.b.c"])]
        sent = [snd.link.send(m) for m in messages]
        got = collect(conns, [far, near], expect=3, idle=1.0)
        pump_until(conns, lambda: all(d.remote_state for d in sent), timeout=TIMEOUT,
                   what="outcomes back")
        assert got == [[0, 2], [1]]
        assert [d.remote_state for d in sent] == [Delivery.ACCEPTED] * 3 + \
            [Delivery.RELEASED] * 2
    finally:
        for c in conns:
            c.close()


def test_exchange_reached_from_another_router_and_copies_go_back(router_factory):
    """B --1-> A; the exchange on A, the sender and the far receiver on B."""
    net = Net(router_factory)
    net.add("A", extra=EXCHANGE)
    net.add("B", connect_to=(("A", 1),))
    converged(net, "AB")

    def ready():
        remote_seen(net["B"], "Address1")
        remote_seen(net["A"], "farHop")

    _exchange_across(net["B"], net["A"], net["B"], ready)


@pytest.fixture
def mixed(router_factory, tmp_path):
    net = MixedNet(router_factory, tmp_path)
    yield net
    net.stop_all()


@needs_1x
def test_1x_sender_and_receiver_with_our_exchange(mixed):
    """X(1.x) --1-> A; the exchange on A, the sender and the far receiver on X."""
    mixed.add("A", extra=EXCHANGE)
    mixed.add_1x("X", connect_to=(("A", 1),))
    converged(mixed, "AX")
    line_ready(mixed, "AX")

    def ready():
        remote_seen(mixed["X"], "Address1")
        remote_seen(mixed["A"], "farHop")

    _exchange_across(mixed["X"], mixed["A"], mixed["X"], ready)


@needs_1x
def test_our_sender_and_receiver_with_a_1x_exchange(mixed):
    """A --1-> X(1.x); the exchange on X (1.19's), the sender and the far receiver on A."""
    mixed.add_1x("X", extra=EXCHANGE)
    mixed.add("A", connect_to=(("X", 1),))
    converged(mixed, "AX")
    line_ready(mixed, "AX")

    def ready():
        remote_seen(mixed["A"], "Address1")
        remote_seen(mixed["X"], "farHop")

    _exchange_across(mixed["A"], mixed["X"], mixed["A"], ready)


def test_copy_goes_back_through_the_routers_it_came_through(router_factory):
    """C --1-> B --1-> A; the exchange on A, sender and far receiver on C. The copy must
    travel back over B toward C: its trace starts again at A (1.19 resets it), else B would
    refuse to send it toward C, which the message's old trace names."""
    net = Net(router_factory)
    net.add("A", extra=EXCHANGE)
    net.add("B", connect_to=(("A", 1),))
    net.add("C", connect_to=(("B", 1),))
    converged(net, "ABC")
    line_ready(net, "ABC")

    def ready():
        remote_seen(net["C"], "Address1")
        remote_seen(net["A"], "farHop")
        remote_seen(net["B"], "farHop")

    _exchange_across(net["C"], net["A"], net["C"], ready)
