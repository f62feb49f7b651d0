"""Delivery outcomes keep their fields from the receiver back to the sender, and a sender's own
state reaches the receiver, through one router, across an inter-router hop of ours and through a
link route (the mixed networks with 1.x: test_mixed_1x.py). What 1.19 does was measured on one
1.19 router and on two in a line: the same answers as here."""
from __future__ import annotations

import pytest
from proton import Condition, Delivery, Message, symbol
from proton.utils import BlockingConnection

from clients import pump_until
from test_link_routes import wait_active
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


def _two_ends(first, last, address: str, ready=None):
    """A receiver on ``last``, a sender on ``first`` (once ``ready()`` returned: by default,
    once ``first`` knows the receiver's address), and a function giving the next message's two
    deliveries: (the sender's, the receiver's)."""
    rc = BlockingConnection(last.url, timeout=TIMEOUT)
    sc = BlockingConnection(first.url, timeout=TIMEOUT)
    rcv = rc.create_receiver(address, credit=10)
    if ready is not None:
        ready()
    elif first is not last:
        remote_seen(first, address)
    snd = sc.create_sender(address)

    def next_pair(body):
        dlv = snd.link.send(Message(body=body))
        pump_until([rc, sc], lambda: rcv.fetcher.incoming, timeout=TIMEOUT, what="message")
        return dlv, rcv.fetcher.incoming.popleft()[1]
    return [rc, sc], next_pair


def _sender_and_receiver_states(conns, next_pair) -> None:
    """The sender gives its unsettled delivery a state with data, the receiver sees it; the
    receiver answers with its own, the sender sees that (1.19: both ways, as given)."""
    dlv, in_dlv = next_pair("extension")
    dlv.local.data = ["from-sender", 1]
    dlv.update(999)
    pump_until(conns, lambda: in_dlv.remote_state, timeout=TIMEOUT, what="sender's state")
    assert in_dlv.remote_state == 999
    assert list(in_dlv.remote.data or []) == ["from-sender", 1]
    in_dlv.local.data = ["from-receiver", 2]
    in_dlv.update(999)
    pump_until(conns, lambda: dlv.remote_state, timeout=TIMEOUT, what="receiver's state")
    assert list(dlv.remote.data or []) == ["from-receiver", 2]
    in_dlv.update(Delivery.ACCEPTED)
    in_dlv.settle()
    pump_until(conns, lambda: dlv.remote_state == Delivery.ACCEPTED, timeout=TIMEOUT,
               what="accepted")
    dlv, in_dlv = next_pair("received")
    dlv.local.section_number = 4
    dlv.local.section_offset = 5
    dlv.update(Delivery.RECEIVED)
    pump_until(conns, lambda: in_dlv.remote_state, timeout=TIMEOUT, what="sender's received")
    assert in_dlv.remote_state == Delivery.RECEIVED
    assert (in_dlv.remote.section_number, in_dlv.remote.section_offset) == (4, 5)
    in_dlv.update(Delivery.ACCEPTED)
    in_dlv.settle()
    dlv, in_dlv = next_pair("on the transfer")
    # given before the transfer went out: on the transfer or just after it
    dlv.local.data = ["early", 3]
    dlv.update(998)
    pump_until(conns, lambda: in_dlv.remote_state, timeout=TIMEOUT, what="early state")
    assert in_dlv.remote_state == 998 and list(in_dlv.remote.data or []) == ["early", 3]
    in_dlv.update(Delivery.ACCEPTED)
    in_dlv.settle()


def _rejected_info_and_modified(conns, next_pair) -> None:
    """A rejection's info map reaches the sender; MODIFIED reaches it with delivery-failed
    set although the receiver said false (1.19 forces it), settled or not."""
    dlv, in_dlv = next_pair("rejected")
    in_dlv.local.condition = Condition("amqp:precondition-failed", "no way",
                                       {symbol("reason"): "tested", symbol("n"): 3})
    in_dlv.update(Delivery.REJECTED)
    in_dlv.settle()
    pump_until(conns, lambda: dlv.remote_state, timeout=TIMEOUT, what="rejected back")
    assert dlv.remote_state == Delivery.REJECTED
    cond = dlv.remote.condition
    assert (cond.name, cond.description) == ("amqp:precondition-failed", "no way")
    assert {str(k): v for k, v in (cond.info or {}).items()} == {"reason": "tested", "n": 3}
    for settle in (True, False):
        dlv, in_dlv = next_pair(f"modified {settle}")
        in_dlv.local.failed = False
        in_dlv.local.undeliverable = settle
        in_dlv.update(Delivery.MODIFIED)
        if settle:
            in_dlv.settle()
        pump_until(conns, lambda: dlv.remote_state, timeout=TIMEOUT, what="modified back")
        assert dlv.remote_state == Delivery.MODIFIED
        assert (dlv.remote.failed, dlv.remote.undeliverable) == (True, settle)
        if not settle:
            in_dlv.settle()
            pump_until(conns, lambda: dlv.settled, timeout=TIMEOUT, what="settled")
            assert dlv.remote.failed is True


def test_sender_state_reaches_the_receiver_and_its_answer_the_sender(ends):
    first, last = ends
    conns, next_pair = _two_ends(first, last, "states.q")
    try:
        _sender_and_receiver_states(conns, next_pair)
    finally:
        for c in conns:
            c.close()


def test_rejected_info_and_modified_delivery_failed_reach_the_sender(ends):
    first, last = ends
    conns, next_pair = _two_ends(first, last, "outcomes.q")
    try:
        _rejected_info_and_modified(conns, next_pair)
    finally:
        for c in conns:
            c.close()


def test_states_both_ways_through_a_link_route(router_factory):
    """client -- R1 (linkRoute lr in/out) -- route-container -- R2 -- consumer: the routed
    delivery's states pass both ways, a rejection's info map and MODIFIED as 1.19 gives them."""
    r2 = router_factory(router_id="R2")
    r1 = router_factory(f"""
        connector {{
            name: r2
            host: 127.0.0.1
            port: {r2.port}
            role: route-container
        }}
        linkRoute {{
            prefix: lr
            direction: in
            connection: r2
        }}
        linkRoute {{
            prefix: lr
            direction: out
            connection: r2
        }}
        """, router_id="R1")
    wait_active(r1)
    conns, next_pair = _two_ends(r1, r2, "lr.states", ready=lambda: None)
    try:
        _sender_and_receiver_states(conns, next_pair)
        _rejected_info_and_modified(conns, next_pair)
    finally:
        for c in conns:
            c.close()
