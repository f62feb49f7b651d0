"""A targeted sender whose address has no destination is drained, as Qpid Dispatch 1.19 does.

What 1.19 does (observed frame by frame on a real 1.19 router, and what these tests check on
ours; ``QDROUTERD_1X`` runs the single-router cases against the 1.x router too):

* the last consumer going away changes nothing for the sender at once;
* the first delivery that then finds no destination is RELEASED (a pre-settled one dropped),
  and the router sends a flow with ``drain=true``, keeping the sender's remaining credit (it
  does not give the released delivery's credit back), and gives no credit back for any
  further delivery while the address has no destination;
* when a consumer comes back (here or on another router), a flow with ``drain=false`` brings
  the sender's credit back to the window (250), also when the sender had drained it to 0.

Every router and client is real (loopback); every wait is bounded.
"""
from __future__ import annotations

import os

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection, SendException

from proton.reactor import AtMostOnce

from clients import pump_for, pump_until
from conftest import free_port
from test_network import ADDRESS_RULES, Net, remote_seen, wait_for, _remote_count

TIMEOUT = 10.0
WINDOW = 250  # linkCapacity's default: the credit a sender gets
ONE_X = os.environ.get("QDROUTERD_1X", "")
ADDRESSES = ADDRESS_RULES


def _one_x_router(tmp_path, mode: str = "standalone", extra: str = ADDRESSES):
    """(process, router): a 1.x router with ``extra`` sections (or a skip)."""
    if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
        pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")
    from test_autolinks_1x import start_1x
    router = start_1x(tmp_path, f"X{free_port()}", extra, mode)
    return router.proc, router


@pytest.fixture(params=["ours", "1.x"])
def standalone(request, router_factory, tmp_path):
    if request.param == "ours":
        yield router_factory(extra=ADDRESSES)
        return
    proc, router = _one_x_router(tmp_path)
    try:
        yield router
    finally:
        proc.stop()


class Clients:
    """A sender's and a receiver's connection (to the same router or to two routers)."""

    def __init__(self, snd_url: str, rcv_url: str) -> None:
        self.sc = BlockingConnection(snd_url, timeout=TIMEOUT)
        self.rc = BlockingConnection(rcv_url, timeout=TIMEOUT)
        self.snd = None  # the sender, when made (shown when a wait fails)

    def pump(self, condition, what: str) -> None:
        try:
            pump_until([self.sc, self.rc], condition, TIMEOUT, what)
        except AssertionError:
            link = self.snd.link if self.snd is not None else None
            raise AssertionError(f"{what} not met within {TIMEOUT}s; sender: credit "
                                 f"{link and link.credit}, drain {link and link.drain_mode}")

    def close(self) -> None:
        self.sc.close()
        self.rc.close()


def released(snd, body: str) -> None:
    with pytest.raises(SendException) as info:
        snd.send(Message(body=body), timeout=TIMEOUT)
    assert info.value.state == Delivery.RELEASED


def stall_and_restore(c: Clients, address: str, consumer_back) -> None:
    """The scenario of the module docstring; ``consumer_back()`` attaches a consumer again
    and returns its receiver once the sender's router knows it."""
    snd = c.snd = c.sc.create_sender(address)
    rcv = c.rc.create_receiver(address, credit=10)
    c.pump(lambda: snd.link.credit == WINDOW, "the sender gets its window")
    rcv.close()
    pump_for([c.sc, c.rc], 0.3)
    assert snd.link.credit == WINDOW and not snd.link.drain_mode

    released(snd, "m1")
    c.pump(lambda: snd.link.drain_mode, "a flow with drain=true")
    assert snd.link.credit == WINDOW - 1  # the released delivery's credit is not given back
    released(snd, "m2")
    assert snd.link.drain_mode and snd.link.credit == WINDOW - 2

    rcv = consumer_back()
    c.pump(lambda: not snd.link.drain_mode and snd.link.credit == WINDOW,
           "drain cleared and the window back")
    delivered(c, snd, rcv, "m3")


def delivered(c: Clients, snd, rcv, body: str) -> None:
    """``body`` reaches ``rcv`` and its acceptance comes back to ``snd``."""
    dlv = snd.link.send(Message(body=body))
    c.pump(lambda: rcv.fetcher.incoming, f"{body} arrives")
    assert rcv.receive(timeout=TIMEOUT).body == body
    rcv.accept()
    c.pump(lambda: dlv.remote_state == Delivery.ACCEPTED, f"{body} accepted")


@pytest.mark.parametrize("address", ["queue.a", "closest.a", "multicast.a"])
def test_sender_drained_while_its_address_has_no_consumer(standalone, address):
    c = Clients(standalone.url, standalone.url)
    try:
        stall_and_restore(c, address,
                          lambda: c.rc.create_receiver(address, credit=10))
    finally:
        c.close()


def test_presettled_sender_drained_too(router_factory):
    r = router_factory()
    c = Clients(r.url, r.url)
    try:
        snd = c.sc.create_sender("queue.p", options=AtMostOnce())
        rcv = c.rc.create_receiver("queue.p", credit=10)
        c.pump(lambda: snd.link.credit == WINDOW, "the sender gets its window")
        rcv.close()
        snd.send(Message(body="dropped"), timeout=TIMEOUT)
        c.pump(lambda: snd.link.drain_mode, "a flow with drain=true after a dropped message")
        assert snd.link.credit == WINDOW - 1
        rcv = c.rc.create_receiver("queue.p", credit=10)
        c.pump(lambda: not snd.link.drain_mode and snd.link.credit == WINDOW, "window back")
    finally:
        c.close()


def test_sender_drained_when_the_remote_consumer_goes(router_factory):
    """A -1-> B: the sender on A, the consumer on B."""
    net = Net(router_factory)
    net.line("B", "A")
    c = Clients(net["A"].url, net["B"].url)
    try:
        def consumer_back():
            rcv = c.rc.create_receiver("queue.r", credit=10)
            remote_seen(net["A"], "queue.r")
            return rcv

        snd = c.sc.create_sender("queue.r")
        rcv = c.rc.create_receiver("queue.r", credit=10)
        remote_seen(net["A"], "queue.r")
        c.pump(lambda: snd.link.credit == WINDOW, "the sender gets its window")
        rcv.close()
        wait_for(lambda: _remote_count(net["A"], "queue.r") == 0, TIMEOUT,
                 "A forgets B's consumer")
        released(snd, "m1")
        c.pump(lambda: snd.link.drain_mode, "a flow with drain=true")
        assert snd.link.credit == WINDOW - 1
        rcv = consumer_back()
        c.pump(lambda: not snd.link.drain_mode and snd.link.credit == WINDOW,
               "drain cleared and the window back")
        delivered(c, snd, rcv, "m2")
    finally:
        c.close()
