"""A sender's delivery state given on the transfer itself (a non-terminal extension state, set
before the message goes out, so that the transfer frame carries it) reaches every receiver
of the message, as 1.19 passes it: across two routers and on each multicast copy. Checked on
our routers and on real 1.19 routers (``QDROUTERD_1X``, see test_mixed_1x.py; skipped
without it).

``A ──> B``: router A (the sender's) connects to router B (the receivers').
"""
from __future__ import annotations

import pytest
from proton import Message
from proton.utils import BlockingConnection

from clients import pump_until
from test_mixed_1x import ONE_X, converged, line_ready, mixed, remote_seen  # noqa: F401

TIMEOUT = 30
KINDS = ["ours", pytest.param("1x", marks=pytest.mark.skipif(
    not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare"))]


def line(mixed, kind: str) -> tuple:
    """A ──> B of ``kind``, converged: (A, B)."""
    if kind == "ours":
        mixed.add("B")
        mixed.add("A", connect_to=(("B", 1),))
    else:
        mixed.add_1x("B")
        mixed.add_1x("A", connect_to=(("B", 1),))
    converged(mixed, ["A", "B"])
    line_ready(mixed, ["A", "B"])
    return mixed["A"], mixed["B"]


def states_seen(first, last, address: str, receivers: int) -> list:
    """``receivers`` receivers of ``address`` on ``last``, a sender on ``first`` that gives
    its one delivery state 666 (with a value) before sending it: (state, value) as each
    receiver sees its delivery."""
    rc = BlockingConnection(last.url, timeout=TIMEOUT)
    sc = BlockingConnection(first.url, timeout=TIMEOUT)
    try:
        rcvs = [rc.create_receiver(address, credit=5, name=f"{address}-{i}")
                for i in range(receivers)]
        if first is not last:
            remote_seen(first, address)
        snd = sc.create_sender(address)
        pump_until([rc, sc], lambda: snd.link.credit > 0, timeout=TIMEOUT, what="credit")
        dlv = snd.link.delivery(b"on-transfer")
        dlv.local.data = ["on the transfer", 7]
        dlv.update(666)
        snd.link.send(Message(body="stateful").encode())
        snd.link.advance()
        pump_until([rc, sc], lambda: all(r.fetcher.incoming for r in rcvs), timeout=TIMEOUT,
                   what="the message at every receiver")
        ins = [r.fetcher.incoming[0][1] for r in rcvs]
        # the state may come with the transfer or in a disposition right after it
        try:
            pump_until([rc, sc], lambda: all(d.remote_state for d in ins), timeout=5,
                       what="the sender's state")
        except AssertionError:  # (compared below: which receivers have it)
            pass
        return [(d.remote_state, list(d.remote.data or [])) for d in ins]
    finally:
        sc.close()
        rc.close()


EXPECTED = (666, ["on the transfer", 7])


@pytest.mark.parametrize("kind", KINDS)
def test_state_on_the_transfer_crosses_two_routers(mixed, kind):
    first, last = line(mixed, kind)
    assert states_seen(first, last, "closest.state", 1) == [EXPECTED]
    assert states_seen(first, last, "balanced.state", 1) == [EXPECTED]


def every_copy_has_the_state(seen: list) -> None:
    """Every copy has the state; the value, on the first copy at least (1.19 gives the
    value to one copy, the others get the state alone; ours gives it to every copy)."""
    assert [state for state, _ in seen] == [EXPECTED[0]] * len(seen), seen
    values = [value for _, value in seen]
    assert EXPECTED[1] in values and all(v in (EXPECTED[1], []) for v in values), seen


@pytest.mark.parametrize("kind", KINDS)
def test_state_on_the_transfer_reaches_every_multicast_copy(mixed, kind):
    """Multicast copies on one router, and on the far router of two."""
    first, last = line(mixed, kind)
    every_copy_has_the_state(states_seen(first, first, "multicast.state", 2))
    every_copy_has_the_state(states_seen(first, last, "multicast.far", 2))
