"""Auto-links in the core (autolinks.py) and fallback destinations, both builds.

The auto-link table's transitions (inactive, attaching, active, failed and back), retries on
the core's clock, deletion, the address keys with phases, and fallback redirection and credit.
"""
import pytest

from common import ipc
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, AttachOut, ConnClosed, Deliver, DetachLink, Disposition,
    LinkAttached, LinkCredit, LinkDetach, LinkFlow, UpdateIn)
from test_core import BUILDS, Harness

SETTLE = [2, 0]


@pytest.fixture(params=BUILDS)
def h(request):
    return Harness(request.param)


def _view(h, name):
    return next(a for a in h.core.snapshot()["autoLinks"] if a["name"] == name)


def _attach_outs(effects):
    return [e for e in effects if type(e) is AttachOut]


def _answer(h, out, address="same", now=0.0):
    """The container answers the AttachOut ``out`` (echoing its terminus address)."""
    src, tgt = out.source, out.target
    if address != "same":
        src = None if src is None else {**src, "address": address}
        tgt = None if tgt is None else {**tgt, "address": address}
    h.core.handle_batch(0, [LinkAttached(out.link_id, src, tgt, SETTLE)], now)


def test_attaches_when_its_container_connects_and_serves_its_address(h):
    h.core.add_auto_link({"identity": "autoLink/1", "name": "a1", "address": "q",
                          "direction": "out", "containerId": "c1"})
    assert _view(h, "a1")["operStatus"] == "inactive" and _view(h, "a1")["key"] == "M0q"
    h.conn(1)  # a normal connection of that container: auto-links need a route container
    assert not _attach_outs(h.flat())
    h.conn(2, role="route-container")  # container c2: not ours
    assert not _attach_outs(h.flat())
    h.do(ipc.ConnOpened(3, "route-container", "out", "h:1", "c1", "broker", "", "", False, 250))
    [out] = _attach_outs(h.flat())
    assert out.conn_id == 3 and out.direction == DIR_OUT and out.target["address"] == "q"
    assert out.settle == SETTLE
    assert _view(h, "a1")["operStatus"] == "attaching"
    h.sender(10, 1, "q")
    assert not [e for e in h.flat() if type(e) is LinkCredit]  # no consumer yet
    _answer(h, out)
    assert _view(h, "a1")["operStatus"] == "active"
    assert _view(h, "a1")["linkRef"] == str(out.link_id)
    assert LinkCredit(10, 10) in h.flat()
    h.do(LinkFlow(out.link_id, 5, False))
    dlv = h.send(10)
    [deliver] = [e for e in h.flat() if type(e) is Deliver]
    assert deliver.link_id == out.link_id
    # the broker's outcome goes back to the sender
    h.do(Disposition(deliver.dlv_id, STATE_ACCEPTED, True, None))
    assert UpdateIn(dlv, STATE_ACCEPTED, True, None) in h.flat()


def test_by_connection_name_external_address_and_phases(h):
    h.core.add_auto_link({"identity": "autoLink/1", "name": "in", "address": "q",
                          "direction": "in", "connection": "broker",
                          "externalAddress": "broker.q"})
    h.core.add_auto_link({"identity": "autoLink/2", "name": "in3", "address": "q",
                          "direction": "in", "phase": 3, "connection": "broker"})
    assert _view(h, "in")["phase"] == 1 and _view(h, "in")["key"] == "M1q"  # 1.19's default
    assert _view(h, "in3")["key"] == "M3q"
    h.do(ipc.ConnOpened(3, "route-container", "out", "h:1", "cX", "broker", "", "", False, 250))
    outs = _attach_outs(h.flat())
    assert [(o.direction, o.source["address"]) for o in outs] == [(DIR_IN, "broker.q"),
                                                                  (DIR_IN, "q")]
    assert all(o.target is not None and o.target["address"] is None for o in outs)
    # the in auto-link is a producer of phase 1: credit once phase 1 has a consumer
    _answer(h, outs[0])
    assert not [e for e in h.flat() if type(e) is LinkCredit]
    h.receiver(20, 3, "q", credit=5)  # (a consumer of phase 0: not the one)
    assert not [e for e in h.flat() if type(e) is LinkCredit and e.link_id == outs[0].link_id]


@pytest.mark.parametrize("bad, text", [
    ({"phase": 10}, "autoLink phase must be between 0 and 9"),
    ({"connection": "a", "containerId": "b"}, "Both connection and containerId"),
    ({"direction": "sideways"}, "address and direction fields are mandatory"),
])
def test_invalid_configuration_is_refused(h, bad, text):
    attrs = {"identity": "autoLink/1", "address": "q", "direction": "in", **bad}
    with pytest.raises(ValueError, match=text):
        h.core.add_auto_link(attrs)
    assert h.core.snapshot()["autoLinks"] == []


def test_refused_then_retried_with_back_off(h):
    h.core.add_auto_link({"identity": "autoLink/1", "name": "a", "address": "q",
                          "direction": "out", "containerId": "c3"})
    h.conn(3, role="route-container")
    [out] = _attach_outs(h.flat())
    core = h.core
    core.handle_batch(0, [LinkAttached(out.link_id, None, None, SETTLE),
                          LinkDetach(out.link_id, True, "amqp:not-found: no such queue")],
                      100.0)
    assert _view(h, "a")["operStatus"] == "failed"
    assert _view(h, "a")["lastError"] == "no such queue"
    assert _view(h, "a")["linkRef"] is None
    assert core.al_logs == ["Auto Link Activated 'a' on connection l0",
                            "Auto Link Activation Failed. no such queue 'a' on connection l0"]
    core.al_logs = []
    core.tick(101.5)
    assert not _attach_outs(h.flat())
    core.tick(102.0)  # first retry after 2 s
    [out2] = _attach_outs(h.flat())
    assert out2.link_id != out.link_id and _view(h, "a")["operStatus"] == "attaching"
    core.handle_batch(0, [LinkDetach(out2.link_id, True, "amqp:not-found")], 103.0)
    assert _view(h, "a")["lastError"] is None  # a condition without description
    core.tick(107.9)
    assert not _attach_outs(h.flat())
    core.tick(108.0)  # then every 5 s
    [out3] = _attach_outs(h.flat())
    _answer(h, out3, now=108.5)
    assert _view(h, "a")["operStatus"] == "active"
    # lost with its connection: inactive, no retry; attached again when it reconnects
    core.handle_batch(0, [ConnClosed(3, "gone")], 110.0)
    assert _view(h, "a")["operStatus"] == "inactive" and _view(h, "a")["linkRef"] is None
    assert _view(h, "a")["lastError"] is None  # (1.19: the lost link had no error)
    assert core.al_logs[-1] == "Auto Link Deactivated 'a' on connection l0"
    core.tick(200.0)
    assert not _attach_outs(h.flat())
    h.conn(3, role="route-container")
    assert len(_attach_outs(h.flat())) == 1


def test_a_failed_auto_link_without_its_container_goes_inactive(h):
    h.core.add_auto_link({"identity": "autoLink/1", "name": "a", "address": "q",
                          "direction": "out", "containerId": "c3"})
    h.conn(3, role="route-container")
    [out] = _attach_outs(h.flat())
    h.core.handle_batch(0, [LinkDetach(out.link_id, True, "refused")], 0.0)
    h.core.handle_batch(0, [ConnClosed(3, "")], 0.5)
    h.core.tick(2.0)
    assert _view(h, "a")["operStatus"] == "inactive"
    assert not _attach_outs(h.flat())


def test_deleted_auto_link_is_detached_and_its_address_goes(h):
    h.core.add_auto_link({"identity": "autoLink/1", "name": "a", "address": "q",
                          "direction": "out", "containerId": "c3"})
    h.conn(3, role="route-container")
    [out] = _attach_outs(h.flat())
    _answer(h, out)
    assert "M0q" in h.core.addrs
    assert h.core.delete_auto_link("autoLink/1")
    assert DetachLink(out.link_id, "", "") in h.flat()
    assert out.link_id not in h.core.links and "M0q" not in h.core.addrs
    assert h.core.snapshot()["autoLinks"] == []
    assert not h.core.delete_auto_link("autoLink/1")
    h.do(LinkDetach(out.link_id, True, ""))  # the container's answer: nothing left to do
    assert h.flat() == []


def _fallback_core(h_cls):
    return Harness(h_cls, addresses=[{"prefix": "fb", "enableFallback": True}])


@pytest.fixture(params=BUILDS)
def fh(request):
    return _fallback_core(request.param)


def test_fallback_destination_takes_what_has_no_consumer(fh):
    h = fh
    h.core.add_auto_link({"identity": "autoLink/1", "name": "fo", "address": "fb.q",
                          "direction": "out", "fallback": True, "containerId": "c3"})
    h.core.add_auto_link({"identity": "autoLink/2", "name": "fi", "address": "fb.q",
                          "direction": "in", "fallback": True, "containerId": "c3"})
    assert _view(h, "fo")["key"] == "MFfb.q" and _view(h, "fi")["key"] == "M0fb.q"
    assert _view(h, "fi")["phase"] == 0
    h.conn(3, role="route-container")
    fo, fi = _attach_outs(h.flat())
    _answer(h, fo)
    _answer(h, fi)
    h.do(LinkFlow(fo.link_id, 10, False))
    assert not [e for e in h.flat() if type(e) is LinkCredit]  # the store waits for a consumer
    h.conn(1)
    h.sender(10, 1, "fb.q")
    assert LinkCredit(10, 10) in h.flat()  # the fallback is a destination
    h.send(10)
    [deliver] = [e for e in h.flat() if type(e) is Deliver]
    assert deliver.link_id == fo.link_id
    router = h.core.snapshot()["router"]
    assert router["deliveriesRedirectedToFallback"] == 1
    assert router["deliveriesEgress"] == 0  # (1.19: a fallback store is not egress)
    addr = next(a for a in h.core.snapshot()["addresses"] if a["key"] == "M0fb.q")
    assert addr["deliveriesRedirectedToFallback"] == 1
    # a consumer comes: the store's in auto-link gets credit, live traffic goes to the consumer
    h.receiver(20, 1, "fb.q", credit=5)
    assert LinkCredit(fi.link_id, 250) in h.flat()
    h.send(10)
    [deliver] = [e for e in h.flat() if type(e) is Deliver]
    assert deliver.link_id == 20
    # what comes back from the store goes to the consumer, never back to the store
    h.do(ipc.Transfer(5000, fi.link_id, None, True, 4, b"stored"))
    [deliver] = [e for e in h.flat() if type(e) is Deliver]
    assert deliver.link_id == 20 and bytes(deliver.payload) == b"stored"
    assert h.core.snapshot()["router"]["deliveriesRedirectedToFallback"] == 1


def test_fallback_without_any_destination_releases(fh):
    h = fh
    h.conn(1)
    h.do(ipc.LinkAttach(10, 1, DIR_IN, "s", None, False, False, 10))  # anonymous
    h.receiver(20, 1, "fb.other", credit=0)
    h.do(LinkDetach(20, True, ""))
    h.effects()
    h.receiver(21, 1, "fb.q", credit=5)
    h.do(LinkDetach(21, True, ""))
    h.sender(11, 1, "fb.q")
    h.effects()
    dlv = h.send(11)
    assert UpdateIn(dlv, ipc.STATE_RELEASED, True, None) in h.flat()
    assert h.core.snapshot()["router"]["deliveriesRedirectedToFallback"] == 0


def test_a_broker_lost_with_deliveries_in_flight(h):
    """What was sent to the broker comes back MODIFIED (delivery-failed), what waited for
    its credit RELEASED: the settlement rules of any lost receiver."""
    h.core.add_auto_link({"identity": "autoLink/1", "name": "a", "address": "q",
                          "direction": "out", "containerId": "c3"})
    h.conn(3, role="route-container")
    [out] = _attach_outs(h.flat())
    _answer(h, out)
    h.conn(1)
    h.sender(10, 1, "q")
    h.do(LinkFlow(out.link_id, 1, False))
    h.effects()
    sent, held = h.send(10), h.send(10)
    assert [e.link_id for e in h.flat() if type(e) is Deliver] == [out.link_id]
    h.do(ConnClosed(3, "broker gone"))
    updates = {e.dlv_id: e for e in h.flat() if type(e) is UpdateIn}
    assert updates[sent].state == ipc.STATE_MODIFIED and updates[sent].settled
    assert updates[held].state == ipc.STATE_RELEASED and updates[held].settled
    assert _view(h, "a")["operStatus"] == "inactive"


def test_sharded_auto_links_share_one_address(h):
    for n, container in ((1, "b1"), (2, "b2")):
        h.core.add_auto_link({"identity": f"autoLink/{n}", "name": f"s{n}", "address": "q",
                              "direction": "out", "containerId": container})
    h.do(ipc.ConnOpened(3, "route-container", "out", "h:1", "b1", "x", "", "", False, 250),
         ipc.ConnOpened(4, "route-container", "out", "h:2", "b2", "y", "", "", False, 250))
    outs = _attach_outs(h.flat())
    assert [o.conn_id for o in outs] == [3, 4]
    for out in outs:
        _answer(h, out)
        h.do(LinkFlow(out.link_id, 100, False))
    h.conn(1)
    h.sender(10, 1, "q")
    h.effects()
    for _ in range(10):
        h.send(10)
    links = [e.link_id for e in h.flat() if type(e) is Deliver]
    assert len(links) == 10 and {links.count(o.link_id) for o in outs} == {5}  # balanced
    addr = next(a for a in h.core.snapshot()["addresses"] if a["key"] == "M0q")
    assert addr["containerCount"] == 0 and addr["subscriberCount"] == 2  # (1.19)


FALLBACK_CAPS = bytes.fromhex("a30b71642e66616c6c6261636b")  # the symbol qd.fallback


def test_client_receiver_with_the_fallback_capability(fh):
    """1.19: a receiver whose source has the qd.fallback capability is a fallback destination
    (MF key); a sender with it is never redirected."""
    h = fh
    h.conn(1)
    source = {**ipc.terminus(ipc.TERMINUS_SOURCE, "fb.c"), "capabilities": FALLBACK_CAPS}
    h.do(ipc.LinkAttach(20, 1, DIR_OUT, "r", "fb.c", False, False, 10, "endpoint", source,
                        None, [0, 0]),
         LinkFlow(20, 10, False))
    assert "MFfb.c" in h.core.addrs
    h.sender(10, 1, "fb.c")
    assert LinkCredit(10, 10) in h.flat()
    h.send(10)
    [deliver] = [e for e in h.flat() if type(e) is Deliver]
    assert deliver.link_id == 20
    assert h.core.snapshot()["router"]["deliveriesRedirectedToFallback"] == 1
    target = {**ipc.terminus(ipc.TERMINUS_TARGET, "fb.c"), "capabilities": FALLBACK_CAPS}
    h.do(ipc.LinkAttach(11, 1, DIR_IN, "s", "fb.c", False, False, 10, "endpoint", None,
                        target, [0, 0]))
    h.effects()
    assert not [e for e in h.flat() if type(e) is LinkCredit]  # waits for a real consumer
    dlv = h.send(11)  # (a transfer without credit all the same)
    assert UpdateIn(dlv, ipc.STATE_RELEASED, True, None) in h.flat()  # not redirected


def _listener_conn(h, conn_id):
    h.do(ipc.ConnOpened(conn_id, "route-container", "in", f"h:{conn_id}", f"c{conn_id}",
                        "containers", "", "", False, 250))


def test_every_connection_of_its_listener_is_attached_and_one_takes_over(h):
    """1.19: each route-container connection through the named listener is offered the link;
    the first is the auto-link's own, the others are extra destinations; when the own link's
    connection closes, an extra link takes its place (no new attach), and the extras go with
    their connections and when the auto-link is deleted."""
    h.core.add_auto_link({"identity": "autoLink/1", "name": "a", "address": "q",
                          "direction": "out", "connection": "containers"})
    _listener_conn(h, 3)
    [own] = _attach_outs(h.flat())
    _listener_conn(h, 4)
    [extra] = _attach_outs(h.flat())
    assert (own.conn_id, extra.conn_id) == (3, 4)
    _answer(h, own)
    _answer(h, extra)
    assert _view(h, "a")["operStatus"] == "active"
    assert _view(h, "a")["linkRef"] == str(own.link_id)
    assert h.core.links[extra.link_id].addr is h.core.addrs["M0q"]  # a destination too
    # a third connection, then the own link's connection closes: the extra takes over
    _listener_conn(h, 5)
    [third] = _attach_outs(h.flat())
    h.core.handle_batch(0, [ConnClosed(3, "")], 1.0)
    assert not _attach_outs(h.flat())
    view = _view(h, "a")
    assert view["operStatus"] == "active" and view["linkRef"] in (str(extra.link_id),
                                                                   str(third.link_id))
    # deleting the auto-link detaches both remaining links
    assert h.core.delete_auto_link("autoLink/1")
    detached = {e.link_id for e in h.flat() if type(e) is DetachLink}
    assert detached == {extra.link_id, third.link_id}
    assert "M0q" not in h.core.addrs


def test_an_extra_link_refused_or_lost_is_forgotten_alone(h):
    h.core.add_auto_link({"identity": "autoLink/1", "name": "a", "address": "q",
                          "direction": "out", "connection": "containers"})
    _listener_conn(h, 3)
    [own] = _attach_outs(h.flat())
    _answer(h, own)
    _listener_conn(h, 4)
    [extra] = _attach_outs(h.flat())
    h.core.handle_batch(0, [LinkDetach(extra.link_id, True, "amqp:not-found: no queue")], 0.5)
    assert _view(h, "a")["operStatus"] == "active"  # its own link is untouched
    h.core.tick(10.0)
    assert not _attach_outs(h.flat())  # an extra link is not retried
    h.core.handle_batch(0, [ConnClosed(4, "")], 11.0)
    _listener_conn(h, 6)
    [again] = _attach_outs(h.flat())  # the next connection of the listener gets one again
    assert again.conn_id == 6
