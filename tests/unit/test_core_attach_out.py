"""The core's links it attaches itself (linkends.open_link: auto-links, link routes), both builds.

Attaching until the peer's LinkAttached; then, by default, a consumer or producer of its address
like a client's link; refused, detached or lost with its connection without leaving anything
behind.
"""
import pytest

from common import ipc
from common.ipc import (
    DIR_IN, DIR_OUT, AttachOut, ConnClosed, Deliver, LinkAttached, LinkCredit, LinkDetach,
    LinkFlow)
from test_core import BUILDS, Harness

SETTLE = [0, 0]


@pytest.fixture(params=BUILDS)
def h(request):
    return Harness(request.param)


def _container(h, conn_id=1):
    return h.conn(conn_id, role="route-container")


def test_attach_out_emits_attach_out_and_waits(h):
    _container(h)
    target = ipc.terminus(ipc.TERMINUS_TARGET, "queue.ext")
    link_id = h.core.attach_out(1, DIR_OUT, "auto.1", "q", None, target, SETTLE)
    assert link_id >= ipc.CORE_ID_BASE
    [fx] = h.flat()
    assert fx == AttachOut(link_id, 1, DIR_OUT, "auto.1", None, target, SETTLE, 250)
    # attaching: not a consumer yet, a sender to q gets no credit
    h.conn(2).sender(10, 2, "q")
    assert not [e for e in h.flat() if type(e) is LinkCredit]
    assert h.link(link_id)["linkDir"] == "out"


def test_out_link_becomes_a_consumer_once_attached(h):
    _container(h)
    link_id = h.core.attach_out(1, DIR_OUT, "auto.1", "q", None,
                                ipc.terminus(ipc.TERMINUS_TARGET, "q"), SETTLE)
    h.conn(2).sender(10, 2, "q")
    h.effects()
    h.do(LinkAttached(link_id, None, ipc.terminus(ipc.TERMINUS_TARGET, "q"), SETTLE),
         LinkFlow(link_id, 5, False))
    assert LinkCredit(10, 10) in h.flat()   # the sender waited for a consumer: credit now
    h.send(10, payload=b"to the broker")
    [deliver] = [e for e in h.flat() if type(e) is Deliver]
    assert deliver.link_id == link_id and bytes(deliver.payload) == b"to the broker"


def test_in_link_is_a_producer_once_attached(h):
    _container(h)
    h.conn(2).receiver(20, 2, "q", credit=5)
    link_id = h.core.attach_out(1, DIR_IN, "auto.2", "q",
                                ipc.terminus(ipc.TERMINUS_SOURCE, "q"), None, SETTLE)
    h.effects()
    h.do(LinkAttached(link_id, ipc.terminus(ipc.TERMINUS_SOURCE, "q"), None, SETTLE))
    credit = [e for e in h.flat() if type(e) is LinkCredit]
    assert credit == [LinkCredit(link_id, 250)]
    h.send(link_id, payload=b"from the broker")
    [deliver] = [e for e in h.flat() if type(e) is Deliver]
    assert deliver.link_id == 20


@pytest.mark.parametrize("how", ["detach", "connection"])
def test_refused_or_lost_while_attaching_leaves_nothing(h, how):
    _container(h)
    link_id = h.core.attach_out(1, DIR_OUT, "auto.3", "q", None,
                                ipc.terminus(ipc.TERMINUS_TARGET, "q"), SETTLE)
    h.effects()
    if how == "detach":
        h.do(LinkAttached(link_id, None, None, SETTLE), LinkDetach(link_id, True, "amqp:not-found"))
    else:
        h.do(ConnClosed(1, "gone"))
    assert not h.core.take_errors()
    assert h.snap()["router"]["linkCount"] == 0
    assert h.addr("M0q") is None
    # a late answer for a link the core no longer has is ignored
    h.do(LinkAttached(link_id, None, None, SETTLE))
    assert not h.core.take_errors()


def test_attach_out_on_unknown_connection(h):
    assert h.core.attach_out(99, DIR_IN, "x", "q", None, None, SETTLE) is None
    assert not h.flat()


def test_client_termini_are_kept_on_the_link(h):
    h.conn(1)
    source = ipc.terminus(ipc.TERMINUS_SOURCE, "me")
    target = dict(ipc.terminus(ipc.TERMINUS_TARGET, "q"), durable=2)
    h.do(ipc.LinkAttach(10, 1, DIR_IN, "s", "q", False, False, 10, "endpoint", source, target,
                        [1, 0]))
    link = h.core.links[10]
    assert (link.source, link.target, link.settle) == (source, target, [1, 0])
