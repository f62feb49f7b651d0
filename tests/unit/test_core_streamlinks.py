"""Streaming links (1.19's qd.streaming-links) in the core, against both builds.

Topology (this core is R1; conn 1 toward R2 offers qd.streaming-links, conn 5 toward R3 does
not)::

    client (conn 9) --- R1 ---conn 1--- R2     R1 ---conn 5--- R3

Link ids on conn 1 start at 100, on conn 5 at 200, as in test_core_interior.py. A message still
arriving (StreamTransfer) toward R2 takes a streaming link of conn 1 (attached by the core,
AttachOut), never the data link of its priority, so a whole message sent meanwhile is not
queued behind it; toward R3 it keeps the data link.
"""
import pytest

from common.ipc import (
    DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, AttachOut, ConnOpened, DeliverChunk, DetachLink,
    Disposition, LinkAttached, LinkDetach, LinkFlow, LinkOpen, PeerHello, RemoteAddress,
    RouteUpdate, RouterDeliver, StreamDeliver, StreamTransfer, TransferChunk, UpdateIn)
from router_core.streamlinks import (POOL_MAX, SCRUB_BATCH, SCRUB_INTERVAL, TEST_POOL_MAX,
                                     TEST_SCRUB_INTERVAL)
from tests.unit.test_core import Harness, _inter_router_links, core_cls  # noqa: F401
from tests.unit.test_core_interior import data_out, of

AGENT = 1
CLIENT_LINK = 10


def make_net(core_cls, **kwargs):
    h = Harness(core_cls, mode="interior", **kwargs)
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    for conn_id, first, router, streaming in ((1, 100, "R2", True), (5, 200, "R3", False)):
        h.do(ConnOpened(conn_id, "inter-router", "in", "127.0.0.1:1", router, "l0", "", "",
                        False, 250, 1, None, streaming))
        _inter_router_links(h, conn_id, first)
        for link_id in range(first + 1, first + 22, 2):
            h.do(LinkFlow(link_id, 100, False))
    h.do(RouteUpdate({"R2": "R2", "R3": "R3"}, {"R2": 1, "R3": 1}, {"R2": [], "R3": []},
                     {"R2": 1, "R3": 5}), peer=AGENT)
    h.do(RemoteAddress("M0big", "R2", True, 2), RemoteAddress("M0far", "R3", True, 2),
         peer=AGENT)
    h.conn(9).sender(CLIENT_LINK, 9, None, capacity=250)
    h.effects()
    return h


@pytest.fixture
def net(core_cls):
    return make_net(core_cls)


def stream(h, address, last=False):
    h._dlv += 1
    h.do(StreamTransfer(h._dlv, CLIENT_LINK, address, False, 4, False, 0, None, [],
                        b"first bytes"))
    if last:
        h.do(TransferChunk(h._dlv, True, False, b"end"))
    return h._dlv


def attach_answered(h, attach, credit=100):
    """The peer router's answer to a streaming link, then its credit."""
    h.do(LinkAttached(attach.link_id, attach.target, attach.source, [2, 0]),
         LinkFlow(attach.link_id, credit, False))


def test_a_message_still_arriving_takes_a_new_streaming_link(net):
    dlv = stream(net, "big")
    effects = net.flat()
    [attach] = of(effects, AttachOut)
    assert (attach.conn_id, attach.direction) == (1, DIR_OUT)
    assert attach.name.startswith("qdlink.")
    for terminus in (attach.source, attach.target):
        assert terminus["capabilities"] == b"\xa3\x0eqd.router-data"
        assert terminus["address"] is None
    assert of(effects, StreamDeliver) == []  # it waits for the peer's attach and credit
    # a whole message for the same address meanwhile takes the data link of its priority
    small = net.send(CLIENT_LINK, to="big")
    [sent] = of(net.flat(), RouterDeliver)
    assert sent.link_id == data_out(100)
    attach_answered(net, attach)
    [started] = of(net.flat(), StreamDeliver)
    assert started.link_id == attach.link_id
    net.do(TransferChunk(dlv, True, False, b"rest"))
    assert of(net.flat(), DeliverChunk) == [DeliverChunk(started.dlv_id, True, False, b"rest")]
    net.do(Disposition(started.dlv_id, STATE_ACCEPTED, True, None),
           Disposition(sent.dlv_id, STATE_ACCEPTED, True, None))
    assert {u.dlv_id for u in of(net.flat(), UpdateIn)} == {dlv, small}
    # management shows it as one more inter-router link of priority 4
    view = net.link(attach.link_id)
    assert (view["linkType"], view["linkDir"], view["priority"]) == ("inter-router", "out", 4)


def test_an_idle_streaming_link_is_reused_and_a_busy_one_is_not(net):
    stream(net, "big", last=False)
    [first] = of(net.flat(), AttachOut)
    attach_answered(net, first)
    net.flat()
    dlv2 = stream(net, "big")  # the first is still arriving: a second link
    [second] = of(net.flat(), AttachOut)
    assert second.link_id != first.link_id
    attach_answered(net, second)
    net.flat()
    net.do(TransferChunk(dlv2, True, False, b"end"))
    net.flat()
    stream(net, "big")  # the second is idle again: taken, nothing attached
    effects = net.flat()
    assert of(effects, AttachOut) == []
    [started] = of(effects, StreamDeliver)
    assert started.link_id == second.link_id


def test_a_peer_without_the_capability_gets_the_data_link(net):
    stream(net, "far")
    effects = net.flat()
    assert of(effects, AttachOut) == []
    [started] = of(effects, StreamDeliver)
    assert started.link_id == data_out(200)


def test_a_message_complete_before_its_link_is_attached_goes_whole(net):
    stream(net, "big", last=True)
    [attach] = of(net.flat(), AttachOut)
    attach_answered(net, attach)
    [sent] = of(net.flat(), RouterDeliver)
    assert (sent.link_id, bytes(sent.payload)) == (attach.link_id, b"first bytesend")
    stream(net, "big")  # and the link is idle for the next one
    assert of(net.flat(), AttachOut) == []


def test_a_streaming_link_lost_mid_message(net):
    dlv = stream(net, "big")
    [attach] = of(net.flat(), AttachOut)
    attach_answered(net, attach)
    net.flat()
    net.do(LinkDetach(attach.link_id, True, ""))
    # the copy in flight ends in doubt at its sender, as for any lost outbound link
    [update] = of(net.flat(), UpdateIn)
    assert (update.dlv_id, update.state, update.settled) == (dlv, STATE_MODIFIED, True)
    stream(net, "big")  # a new one is attached for the next message
    [again] = of(net.flat(), AttachOut)
    assert again.link_id != attach.link_id


def test_scrubber_detaches_idle_links_past_the_pool(net):
    n = POOL_MAX + SCRUB_BATCH + 2
    dlvs = [stream(net, "big") for _ in range(n)]  # n at once: n links
    attaches = of(net.flat(), AttachOut)
    assert len(attaches) == n
    for a in attaches:
        attach_answered(net, a)
    started = of(net.flat(), StreamDeliver)
    for dlv in dlvs:
        net.do(TransferChunk(dlv, True, False, b""))
    # one of them is still unsettled at its receiver: never scrubbed
    net.do(*[Disposition(s.dlv_id, STATE_ACCEPTED, True, None) for s in started[1:]])
    net.flat()
    net.core.tick(SCRUB_INTERVAL + 1)
    detached = of(net.flat(), DetachLink)
    assert len(detached) == SCRUB_BATCH
    assert started[0].link_id not in {d.link_id for d in detached}
    assert all((d.condition, d.description) == ("", "") for d in detached)
    net.core.tick(SCRUB_INTERVAL + 2)  # not before the next scan
    assert of(net.flat(), DetachLink) == []
    net.core.tick(2 * SCRUB_INTERVAL + 2)
    # idle ones left: n - 1 - SCRUB_BATCH = POOL_MAX + 1 (the unsettled one is not idle)
    assert len(of(net.flat(), DetachLink)) == 1  # down to the pool's size
    net.core.tick(3 * SCRUB_INTERVAL + 3)
    assert of(net.flat(), DetachLink) == []


def test_inbound_data_links_past_the_tenth_get_priority_4(net):
    # the peer's streaming links: extra inter-router data links toward this router
    net.sender(150, 1, None, capacity=250, link_type="inter-router")
    assert LinkOpen(150, None) in net.flat()
    assert net.link(150)["priority"] == 4


def test_with_test_hooks_the_scrubber_runs_every_5_s_and_keeps_2(core_cls):
    """1.19's -T: idle streaming links beyond 2 per connection go at the next 5 s scan."""
    assert (TEST_SCRUB_INTERVAL, TEST_POOL_MAX) == (5.0, 2)
    net = make_net(core_cls, test_hooks=True)
    dlvs = [stream(net, "big") for _ in range(5)]
    for a in of(net.flat(), AttachOut):
        attach_answered(net, a)
    started = of(net.flat(), StreamDeliver)
    for dlv in dlvs:
        net.do(TransferChunk(dlv, True, False, b""))
    net.do(*[Disposition(s.dlv_id, STATE_ACCEPTED, True, None) for s in started])
    net.flat()
    net.core.tick(TEST_SCRUB_INTERVAL - 1)
    assert of(net.flat(), DetachLink) == []  # not before the first scan
    net.core.tick(TEST_SCRUB_INTERVAL + 0.5)
    assert len(of(net.flat(), DetachLink)) == 3  # 5 idle, 2 kept
    net.core.tick(2 * TEST_SCRUB_INTERVAL + 1)
    assert of(net.flat(), DetachLink) == []
