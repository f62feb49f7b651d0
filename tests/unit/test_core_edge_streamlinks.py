"""Streaming links on edge connections (1.19's qd.streaming-links between an edge and its
interior router) in the core, against both builds.

A message still arriving (StreamTransfer) for a consumer on an edge connection whose peer
offered the capability takes a streaming link of that connection: an anonymous endpoint
sender the core attaches (AttachOut, no address, no capability on either terminus), so a
whole message sent meanwhile to the same address goes on the consumer's own link at once.
Both ends: the interior toward an edge's proxy of a receiver, the edge up its uplink.
"""
import pytest

from common.ipc import (
    DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, AttachOut, ConnClosed, ConnOpened, Deliver,
    DeliverChunk, DetachLink, Disposition, LinkAttached, LinkFlow, RouterDeliver,
    StreamDeliver, StreamTransfer, TransferChunk, UpdateIn)
from router_core.streamlinks import TEST_SCRUB_INTERVAL
from test_core import BUILDS, Harness

EDGE_CONN = 3
PROXY = 30      # the edge's receiver of "q" on the interior's edge connection
CLIENT = 9
SENDER = 10


def of(effects, kind):
    return [e for e in effects if type(e) is kind]


def edge_conn(h, conn_id, streaming):
    h.do(ConnOpened(conn_id, "edge", "in", "127.0.0.1:1", "E1", "l0", "", "", False, 250, 1,
                    None, streaming))


def interior(cls, streaming=True):
    h = Harness(cls, mode="interior")
    edge_conn(h, EDGE_CONN, streaming)
    h.receiver(PROXY, EDGE_CONN, "q", capacity=250, credit=100)
    h.conn(CLIENT).sender(SENDER, CLIENT, "q", capacity=250)
    h.flat()
    return h


def stream(h, link_id=SENDER, to=None, last=False):
    h._dlv += 1
    h.do(StreamTransfer(h._dlv, link_id, to, False, 4, False, 0, None, [], b"first bytes"))
    if last:
        h.do(TransferChunk(h._dlv, True, False, b"end"))
    return h._dlv


def answer(h, attach, credit=100):
    h.do(LinkAttached(attach.link_id, attach.target, attach.source, [2, 0]),
         LinkFlow(attach.link_id, credit, False))


@pytest.mark.parametrize("cls", BUILDS)
def test_interior_to_edge_a_message_still_arriving_takes_a_streaming_link(cls):
    h = interior(cls)
    dlv = stream(h)
    effects = h.flat()
    [attach] = of(effects, AttachOut)
    assert (attach.conn_id, attach.direction) == (EDGE_CONN, DIR_OUT)
    assert attach.name.startswith("qdlink.")
    for terminus in (attach.source, attach.target):
        assert (terminus["address"], terminus["capabilities"]) == (None, None)
    assert of(effects, StreamDeliver) == []  # it waits for the edge's attach and credit
    # a whole message to the same address meanwhile goes on the proxy's own link
    small = h.send(SENDER)
    [sent] = of(h.flat(), RouterDeliver)
    assert (sent.link_id, sent.to_override) == (PROXY, "q")
    answer(h, attach)
    [started] = of(h.flat(), StreamDeliver)
    # the far end routes it by x-opt-qd.to: the targeted sender's address
    assert (started.link_id, started.to_override) == (attach.link_id, "q")
    h.do(TransferChunk(dlv, True, False, b"rest"))
    assert of(h.flat(), DeliverChunk) == [DeliverChunk(started.dlv_id, True, False, b"rest")]
    h.do(Disposition(started.dlv_id, STATE_ACCEPTED, True, None),
         Disposition(sent.dlv_id, STATE_ACCEPTED, True, None))
    assert {u.dlv_id for u in of(h.flat(), UpdateIn)} == {dlv, small}
    view = h.link(attach.link_id)
    assert (view["linkType"], view["linkDir"], view["priority"], view["owningAddr"]) == (
        "endpoint", "out", 4, None)
    assert h.addr("M0q")["deliveriesEgress"] == 2
    # idle again: the next such message takes it, nothing attached
    stream(h)
    effects = h.flat()
    assert of(effects, AttachOut) == []
    assert [s.link_id for s in of(effects, StreamDeliver)] == [attach.link_id]


@pytest.mark.parametrize("cls", BUILDS)
def test_an_edge_without_the_capability_gets_the_message_on_its_link(cls):
    h = interior(cls, streaming=False)
    stream(h)
    effects = h.flat()
    assert of(effects, AttachOut) == []
    assert [s.link_id for s in of(effects, StreamDeliver)] == [PROXY]


@pytest.mark.parametrize("cls", BUILDS)
def test_a_message_complete_before_its_link_is_attached_goes_whole_on_it(cls):
    h = interior(cls)
    stream(h, last=True)
    [attach] = of(h.flat(), AttachOut)
    answer(h, attach)
    [whole] = of(h.flat(), RouterDeliver)
    assert (whole.link_id, whole.to_override, whole.payload) == (
        attach.link_id, "q", b"first bytesend")


@pytest.mark.parametrize("cls", BUILDS)
def test_edge_connection_lost_mid_stream_the_sender_is_told(cls):
    h = interior(cls)
    dlv = stream(h)
    [attach] = of(h.flat(), AttachOut)
    answer(h, attach)
    [started] = of(h.flat(), StreamDeliver)
    h.do(ConnClosed(EDGE_CONN, "connection lost"))
    updates = of(h.flat(), UpdateIn)
    assert [(u.dlv_id, u.state, u.settled) for u in updates] == [(dlv, STATE_MODIFIED, True)]


@pytest.mark.parametrize("cls", BUILDS)
def test_a_streaming_link_waiting_for_its_attach_is_released_when_the_edge_goes(cls):
    h = interior(cls)
    dlv = stream(h)
    [attach] = of(h.flat(), AttachOut)
    h.do(ConnClosed(EDGE_CONN, "connection lost"))
    updates = of(h.flat(), UpdateIn)
    assert [(u.dlv_id, u.settled) for u in updates] == [(dlv, True)]


@pytest.mark.parametrize("cls", BUILDS)
def test_edge_to_interior_up_the_uplink(cls):
    """On the edge: an anonymous sender's message for an address with no destination here
    goes up the uplink's anonymous sender; still arriving, on a streaming link instead."""
    h = Harness(cls, mode="edge")
    h.do(ConnOpened(1, "edge", "out", "127.0.0.1:1", "I1", "uplink", "", "", False, 250, 1,
                    None, True))
    anon = [e for e in h.flat() if type(e) is AttachOut][0]
    h.do(*[LinkAttached(anon.link_id, anon.source, anon.target, [2, 0])])
    h.do(LinkFlow(anon.link_id, 100, False))
    h.conn(CLIENT).sender(SENDER, CLIENT, None, capacity=250)
    h.flat()
    dlv = stream(h, to="far")
    [attach] = of(h.flat(), AttachOut)
    assert attach.conn_id == 1 and attach.target["address"] is None
    h.send(SENDER, to="far")
    effects = h.flat()
    [whole] = of(effects, Deliver) + of(effects, RouterDeliver)
    assert whole.link_id == anon.link_id
    answer(h, attach)
    [started] = of(h.flat(), StreamDeliver)
    assert (started.link_id, started.to_override) == (attach.link_id, None)  # its 'to' says
    h.do(TransferChunk(dlv, True, False, b"rest"))
    assert of(h.flat(), DeliverChunk) == [DeliverChunk(started.dlv_id, True, False, b"rest")]


@pytest.mark.parametrize("cls", BUILDS)
def test_idle_edge_streaming_links_are_scrubbed_and_the_sender_goes_on(cls):
    """With test hooks (1.19's -T): 5 streaming links toward the edge, all idle: 3 are
    detached at the first scan (2 kept), and the next message takes one of those kept."""
    h = Harness(cls, mode="interior", test_hooks=True)
    edge_conn(h, EDGE_CONN, True)
    h.receiver(PROXY, EDGE_CONN, "q", capacity=250, credit=100)
    h.conn(CLIENT).sender(SENDER, CLIENT, "q", capacity=250)
    h.flat()
    dlvs = [stream(h) for _ in range(5)]  # five at once: five links
    attaches = of(h.flat(), AttachOut)
    assert len(attaches) == 5
    for a in attaches:
        answer(h, a)
    started = of(h.flat(), StreamDeliver)
    for dlv in dlvs:
        h.do(TransferChunk(dlv, True, False, b""))
    h.do(*[Disposition(s.dlv_id, STATE_ACCEPTED, True, None) for s in started])
    h.flat()
    h.core.tick(TEST_SCRUB_INTERVAL + 0.5)
    detached = {d.link_id for d in of(h.flat(), DetachLink)}
    assert len(detached) == 3
    stream(h)
    effects = h.flat()
    assert of(effects, AttachOut) == []
    [nxt] = of(effects, StreamDeliver)
    assert nxt.link_id in {a.link_id for a in attaches} - detached
