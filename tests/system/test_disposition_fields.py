"""Delivery outcomes keep their fields from the receiver back to the sender, through one router
and across an inter-router hop of ours (the mixed networks with 1.x: test_mixed_1x.py)."""
from __future__ import annotations

import pytest
from proton import Delivery, Message, symbol
from proton.utils import BlockingConnection

from clients import pump_until
from test_network import Net, remote_seen

TIMEOUT = 30


def _settle_at_receiver(first, last, address: str, apply):
    rc = BlockingConnection(last.url, timeout=TIMEOUT)
    sc = BlockingConnection(first.url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver(address, credit=5)
        if first is not last:
            remote_seen(first, address)
        snd = sc.create_sender(address)
        dlv = snd.link.send(Message(body="state"))
        pump_until([rc, sc], lambda: rcv.fetcher.incoming, timeout=TIMEOUT, what="message")
        _msg, in_dlv = rcv.fetcher.incoming.popleft()
        apply(in_dlv)
        pump_until([rc, sc], lambda: dlv.remote_state, timeout=TIMEOUT, what="outcome back")
        return dlv
    finally:
        sc.close()
        rc.close()


def _modified(dlv) -> None:
    dlv.local.failed = True
    dlv.local.undeliverable = True
    dlv.local.annotations = {symbol("x-opt-why"): "tested", symbol("x-opt-n"): 7}
    dlv.update(Delivery.MODIFIED)
    dlv.settle()


@pytest.fixture(params=["one router", "two routers"])
def ends(request, router_factory):
    if request.param == "one router":
        r = router_factory()
        return r, r
    net = Net(router_factory)
    net.line("B", "A")
    return net["A"], net["B"]


def test_modified_keeps_delivery_failed_undeliverable_and_annotations(ends):
    first, last = ends
    dlv = _settle_at_receiver(first, last, "mod.q", _modified)
    assert dlv.remote_state == Delivery.MODIFIED
    assert dlv.remote.failed is True and dlv.remote.undeliverable is True
    assert {str(k): v for k, v in (dlv.remote.annotations or {}).items()} == {
        "x-opt-why": "tested", "x-opt-n": 7}


def _extension(dlv) -> None:
    dlv.local.data = ["progress", 42]
    dlv.update(999)  # a delivery state of no AMQP type (an extension), left unsettled


def _received(dlv) -> None:
    dlv.local.section_number = 3
    dlv.local.section_offset = 1024
    dlv.update(Delivery.RECEIVED)


def test_extension_state_and_its_value_reach_the_sender(ends):
    """Non-terminal states travel back as 1.19 moves them (the mixed-network form of this
    test, against a 1.x router: test_mixed_1x.py)."""
    first, last = ends
    dlv = _settle_at_receiver(first, last, "ext.q", _extension)
    assert dlv.remote_state == 999
    assert list(dlv.remote.data or []) == ["progress", 42]


def test_received_state_reaches_the_sender(ends):
    first, last = ends
    dlv = _settle_at_receiver(first, last, "rcvd.q", _received)
    assert dlv.remote_state == Delivery.RECEIVED
    assert (dlv.remote.section_number, dlv.remote.section_offset) == (3, 1024)
