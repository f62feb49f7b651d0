"""Edge mode in the core (edge.py), both builds: an edge router's uplink and address proxy, an
interior router's edge connections (downlink, address tracking, heartbeats, no echo).

Wire facts as 1.19 has them (DESIGN.md "Edge routers"): the edge attaches an anonymous
sender, a downlink receiver (source = its id, capability qd.router-edge-downlink), a
receiver on ``_$qd.edge_addr_tracking``, a receiver per address it has consumers for and a
sender per address it has senders for; the interior tells it ``[key, bool]`` per such address.
"""
import pytest

from common import ipc
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_RELEASED, AttachOut, Deliver, DetachLink,
    LinkAttached, LinkAttach, LinkCredit, LinkFlow, LinkOpen, LinkStall, RouterDeliver,
    Transfer, UpdateIn)
from router_core import edgemsg
from router_core.addressing import address_key, has_capability, temp_address
from test_core import BUILDS, Harness

TRACKING = "_$qd.edge_addr_tracking"
DOWNLINK = b"qd.router-edge-downlink"


@pytest.fixture(params=BUILDS)
def edge(request):
    return Harness(request.param, mode="edge")


@pytest.fixture(params=BUILDS)
def interior(request):
    return Harness(request.param, mode="interior")


def _uplink(h, conn_id=1):
    """Open the edge connection; answer the links the edge attaches; the uplink's
    links by role."""
    h.conn(conn_id, role="edge")
    fx = [e for e in h.flat() if type(e) is AttachOut]
    assert len(fx) == 7, fx
    anon, down, track, beat, lookup, replies, mgmt = fx
    h.do(*[LinkAttached(e.link_id, e.source, e.target, [2, 0]) for e in fx])
    return anon, down, track


def _attach_outs(h):
    return [e for e in h.flat() if type(e) is AttachOut]


# --- addresses ------------------------------------------------------------------------------------
def test_edge_address_keys():
    assert address_key("_edge/E1/temp.x", "E1", 0, "0", True) == "Ltemp.x"
    assert address_key("_edge/E2/temp.x", "E1", 0, "0", True) == "L_edge"
    assert address_key("_topo/0/I1/temp.x", "E1", 0, "0", True) == "L_edge"
    assert address_key("_topo/0/E1/x", "E1", 0, "0", True) == "Lx"
    assert address_key("_topo/0/all/x", "E1", 0, "0", True) == "Tx"
    assert address_key("_topo/1/I1/x", "E1", 0, "0", True) == "L_edge"
    assert address_key("q", "E1", 0, "0", True) == "M0q"
    # on an interior router another edge's addresses are its edge-summary key
    assert address_key("amqp:/_edge/E1/temp.x", "I1") == "HE1"
    assert address_key("_edge/I1/x", "I1") == "Lx"
    assert temp_address("E1", "abc", False, True) == "amqp:/_edge/E1/temp.abc"


def test_tracking_message_round_trip():
    for key, present in (("M0q", True), ("M0" + "x" * 300, False)):
        assert edgemsg.read_tracking_update(edgemsg.tracking_update(key, present)) == \
            (key, present)
    assert edgemsg.read_tracking_update(b"\x00\x53\x77\xa1\x01x") is None
    assert edgemsg.read_tracking_update(b"garbage") is None
    assert edgemsg.read_tracking_update(b"") is None


# --- the edge router ------------------------------------------------------------------------------
def test_edge_connection_attaches_uplink_links(edge):
    edge.conn(1, role="edge")
    anon, down, track, beat, lookup, replies, mgmt = _attach_outs(edge)
    assert (mgmt.direction, mgmt.target["address"]) == (DIR_OUT, "$management")
    assert (lookup.direction, lookup.target["address"]) == (DIR_OUT, "_$qd.addr_lookup")
    assert replies.direction == DIR_IN and replies.source["dynamic"]
    assert (beat.direction, beat.target["address"]) == (DIR_OUT, "_$qd.edge_heartbeat")
    assert (anon.direction, anon.source["address"], anon.target["address"]) == \
        (DIR_OUT, None, None)
    assert down.direction == DIR_IN and down.source["address"] == "R1"
    assert has_capability(down.source["capabilities"], DOWNLINK)
    assert has_capability(down.target["capabilities"], DOWNLINK)
    assert track.direction == DIR_IN and track.source["address"] == TRACKING
    assert all(e.name.startswith("qdlink.") for e in (anon, down, track, beat))
    # a second edge connection stands by: nothing attached on it
    edge.conn(2, role="edge")
    assert _attach_outs(edge) == []


def test_tracking_receiver_gets_credit_and_downlink_is_anonymous(edge):
    edge.conn(1, role="edge")
    anon, down, track, beat, lookup, replies, mgmt = _attach_outs(edge)
    edge.do(*[LinkAttached(e.link_id, e.source, e.target, [2, 0]) for e in (anon, down, track)])
    credit = {e.link_id: e.credit for e in edge.flat() if type(e) is LinkCredit}
    assert credit[track.link_id] == 32 and credit[down.link_id] == 250


def test_local_receiver_is_proxied_on_the_uplink(edge):
    _uplink(edge)
    edge.conn(2).receiver(20, 2, "q")
    [proxy] = _attach_outs(edge)
    assert proxy.direction == DIR_IN and proxy.source["address"] == "q"
    # gone with the last consumer
    edge.do(ipc.LinkDetach(20, True, ""))
    assert [e for e in edge.flat() if type(e) is DetachLink] == [DetachLink(proxy.link_id, "",
                                                                            "")]


def test_receiver_before_the_uplink_is_proxied_when_it_opens(edge):
    edge.conn(2).receiver(20, 2, "q")
    edge.flat()
    edge.conn(1, role="edge")
    fx = _attach_outs(edge)
    assert [e.source["address"] for e in fx if e.direction == DIR_IN] == ["R1", TRACKING, None,
                                                                          "q"]


def test_sender_gets_credit_only_while_the_interior_has_a_destination(edge):
    anon, down, track = _uplink(edge)
    edge.flat()
    edge.conn(2).sender(10, 2, "q", capacity=5)
    [out] = _attach_outs(edge)
    assert out.direction == DIR_OUT and out.target["address"] == "q"
    edge.do(LinkAttached(out.link_id, out.source, out.target, [2, 0]),
            LinkFlow(out.link_id, 100, False))
    assert not [e for e in edge.flat() if type(e) is LinkCredit]
    edge.do(Transfer(1, track.link_id, None, True, 4, edgemsg.tracking_update("M0q", True)))
    fx = edge.flat()
    assert LinkCredit(10, 5) in fx and LinkCredit(track.link_id, 1) in fx
    d = edge.send(10)
    [dlv] = [e for e in edge.flat() if type(e) in (Deliver, RouterDeliver)]
    assert dlv.link_id == out.link_id
    assert type(dlv) is RouterDeliver and dlv.to_override == "q"  # (x-opt-qd.to, as 1.19)
    # the last consumer elsewhere went: the next delivery finds no destination, the sender
    # is drained and gets no credit back
    edge.do(Transfer(2, track.link_id, None, True, 4, edgemsg.tracking_update("M0q", False)))
    edge.flat()
    d2 = edge.send(10)
    fx = edge.flat()
    assert UpdateIn(d2, STATE_RELEASED, True, None) in fx
    assert LinkStall(10, True) in fx
    assert d != d2


def test_invalid_tracking_update_is_rejected(edge):
    anon, down, track = _uplink(edge)
    edge.flat()
    edge.do(Transfer(5, track.link_id, None, False, 4, b"\x00\x53\x77\xa1\x01x"))
    fx = edge.flat()
    assert [e.state for e in fx if type(e) is UpdateIn] == [ipc.STATE_REJECTED]


def test_anonymous_delivery_for_unknown_address_goes_up(edge):
    anon, down, track = _uplink(edge)
    edge.do(LinkFlow(anon.link_id, 10, False))
    edge.conn(2).sender(10, 2, None)
    edge.flat()
    edge.send(10, to="elsewhere")
    edge.send(10, to="_topo/0/I1/temp.x")
    sent = [e for e in edge.flat() if type(e) is Deliver]
    assert [e.link_id for e in sent] == [anon.link_id, anon.link_id]


def test_dynamic_receiver_on_an_edge_gets_an_edge_address_reachable_by_downlink(edge):
    anon, down, track = _uplink(edge)
    edge.conn(2).receiver(20, 2, None, dynamic=True, credit=10)
    [opened] = [e for e in edge.flat() if type(e) is LinkOpen]
    assert opened.address.startswith("amqp:/_edge/R1/temp.")
    # a message for it comes down the downlink (anonymous: routed by its to)
    edge.do(Transfer(7, down.link_id, opened.address, False, 4, b"m"))
    [dlv] = [e for e in edge.flat() if type(e) is Deliver]
    assert dlv.link_id == 20


def test_uplink_fails_over_to_the_standby_connection(edge):
    _uplink(edge, 1)
    edge.conn(2, role="edge")
    edge.conn(3).receiver(20, 3, "q")
    edge.flat()
    edge.do(ipc.ConnClosed(1, ""))
    fx = _attach_outs(edge)
    assert {e.conn_id for e in fx} == {2}
    assert sorted(str(e.source["address"]) for e in fx) == sorted(
        ["None", "None", "None", "None", "None", "R1", TRACKING, "q"])


# --- the interior router --------------------------------------------------------------------------
def _edge_links(h, conn_id=1, edge_id="E1"):
    """An edge connection with the links an edge attaches: tracking receiver (link 50) with
    credit, downlink (51)."""
    h.conn(conn_id, role="edge")
    caps = b"\xa3" + bytes([len(DOWNLINK)]) + DOWNLINK
    h.do(LinkAttach(50 + conn_id * 100, conn_id, DIR_OUT, "t", TRACKING, False, False, 250,
                    "endpoint", ipc.terminus(ipc.TERMINUS_SOURCE, TRACKING), None, [2, 0]),
         LinkFlow(50 + conn_id * 100, 32, False))
    h.do(LinkAttach(51 + conn_id * 100, conn_id, DIR_OUT, "d", edge_id, False, False, 250,
                    "endpoint", ipc.terminus(ipc.TERMINUS_SOURCE, edge_id, False, caps),
                    ipc.terminus(ipc.TERMINUS_TARGET, None, False, caps), [2, 0]),
         LinkFlow(51 + conn_id * 100, 100, False))
    return 50 + conn_id * 100, 51 + conn_id * 100


def _updates(fx, link_id):
    return [edgemsg.read_tracking_update(e.payload) for e in fx
            if type(e) is RouterDeliver and e.link_id == link_id]


def test_interior_tells_an_edge_when_its_sender_has_a_destination(interior):
    track, down = _edge_links(interior)
    interior.flat()
    interior.sender(10, 1, "q")      # the edge's proxy of its sender
    assert _updates(interior.flat(), track) == []   # no destination: nothing said
    interior.conn(2).receiver(20, 2, "q")
    assert _updates(interior.flat(), track) == [("M0q", True)]
    interior.do(ipc.LinkDetach(20, True, ""))
    assert _updates(interior.flat(), track) == [("M0q", False)]


def test_interior_does_not_count_the_edges_own_consumer(interior):
    track, down = _edge_links(interior)
    interior.receiver(11, 1, "q").sender(10, 1, "q")
    assert _updates(interior.flat(), track) == []
    interior.conn(2).receiver(20, 2, "q")
    assert _updates(interior.flat(), track) == [("M0q", True)]


def test_tracking_attached_late_gets_the_current_state(interior):
    interior.conn(1, role="edge")
    interior.conn(2).receiver(20, 2, "q")
    interior.sender(10, 1, "q")
    interior.flat()
    interior.do(LinkAttach(99, 1, DIR_OUT, "t", TRACKING, False, False, 250, "endpoint"),
                LinkFlow(99, 32, False))
    assert _updates(interior.flat(), 99) == [("M0q", True)]


def test_no_echo_back_to_the_edge(interior):
    _edge_links(interior)
    interior.receiver(11, 1, "q", credit=10).sender(10, 1, "q")
    interior.flat()
    d = interior.send(10)
    fx = interior.flat()
    assert not [e for e in fx if type(e) in (Deliver, RouterDeliver)]
    assert UpdateIn(d, STATE_RELEASED, True, None) in fx
    interior.conn(2).receiver(20, 2, "q", credit=10)
    interior.flat()
    interior.send(10)
    [dlv] = [e for e in interior.flat() if type(e) in (Deliver, RouterDeliver)]
    assert dlv.link_id == 20


def test_downlink_serves_the_edges_addresses(interior):
    track, down = _edge_links(interior)
    interior.conn(2).sender(10, 2, None)
    interior.flat()
    interior.send(10, to="amqp:/_edge/E1/temp.abc")
    [dlv] = [e for e in interior.flat() if type(e) in (Deliver, RouterDeliver)]
    assert dlv.link_id == down
    assert "HE1" in {a["name"] if "name" in a else a.get("key") for a in
                     interior.snap()["addresses"]} or interior.core.addrs.get("HE1") is not None


def test_heartbeats_are_accepted(interior):
    interior.conn(1, role="edge")
    interior.do(LinkAttach(60, 1, DIR_IN, "h", "_$qd.edge_heartbeat", False, False, 250,
                           "endpoint"))
    fx = interior.flat()
    assert LinkOpen(60, "_$qd.edge_heartbeat") in fx and LinkCredit(60, 2) in fx
    interior.do(Transfer(3, 60, None, False, 4, edgemsg.heartbeat(0)))
    fx = interior.flat()
    assert UpdateIn(3, STATE_ACCEPTED, True, None) in fx and LinkCredit(60, 1) in fx


def test_router_links_refused_on_edge_connections(interior):
    interior.conn(1, role="edge").sender(10, 1, None, link_type="inter-router")
    [fx] = interior.flat()
    assert fx.condition == "amqp:not-allowed"


def test_address_lookup_is_answered_on_the_downlink(interior):
    import proton
    track, down = _edge_links(interior)
    interior.do(LinkAttach(70, 1, DIR_IN, "l", "_$qd.addr_lookup", False, False, 250,
                           "endpoint"))
    fx = interior.flat()
    assert LinkCredit(70, 32) in fx
    req = proton.Message(reply_to="amqp:/_edge/E1/temp.r", correlation_id=9,
                         properties={"version": 1, "opcode": 1}, body=["queue.x", True])
    interior.do(Transfer(4, 70, None, False, 4, req.encode()))
    fx = interior.flat()
    assert UpdateIn(4, STATE_ACCEPTED, True, None) in fx
    [reply] = [e for e in fx if type(e) is RouterDeliver]
    assert reply.link_id == down
    msg = proton.Message()
    msg.decode(reply.payload)
    assert msg.address == "amqp:/_edge/E1/temp.r" and msg.correlation_id == 9
    assert msg.properties["status"] == 3 and msg.body == [False, False]  # not a link route
    # a request that cannot be answered is rejected
    interior.do(Transfer(5, 70, None, False, 4, b"junk"))
    assert [e.state for e in interior.flat() if type(e) is UpdateIn] == [ipc.STATE_REJECTED]


def test_standby_uplink_is_not_active(edge):
    edge.conn(1, role="edge").conn(2, role="edge").conn(3)
    active = {c["identity"]: c["active"] for c in edge.snap()["connections"]}
    assert active == {"1": True, "2": False, "3": True}
    edge.do(ipc.ConnClosed(1, ""))
    active = {c["identity"]: c["active"] for c in edge.snap()["connections"]}
    assert active == {"2": True, "3": True}


def test_edge_sends_heartbeats_every_two_seconds_with_credit(edge):
    edge.conn(1, role="edge")
    fx = _attach_outs(edge)
    [hb] = [e for e in fx if e.target and e.target["address"] == "_$qd.edge_heartbeat"]
    assert hb.direction == DIR_OUT
    edge.do(*[LinkAttached(e.link_id, e.source, e.target, [2, 0]) for e in fx])
    edge.core.tick(5.0)
    assert not [e for e in edge.flat() if type(e) is RouterDeliver]  # no credit yet
    edge.do(LinkFlow(hb.link_id, 2, False))
    edge.core.tick(7.5)
    edge.core.tick(8.0)  # (within 2 s of the last)
    beats = [e for e in edge.flat() if type(e) is RouterDeliver]
    assert [(e.link_id, e.settled, e.payload) for e in beats] == [
        (hb.link_id, True, edgemsg.heartbeat(0))]
    edge.core.tick(9.6)
    assert [e.payload for e in edge.flat() if type(e) is RouterDeliver] == \
        [edgemsg.heartbeat(1)]


def test_interior_closes_an_edge_whose_heartbeats_stop(interior):
    from common.ipc import CloseConnection
    interior.conn(1, role="edge")
    interior.do(LinkAttach(60, 1, DIR_IN, "h", "_$qd.edge_heartbeat", False, False, 250,
                           "endpoint"))
    interior.flat()
    for now in (2.0, 4.0, 6.0, 8.0):
        interior.core.handle(0, Transfer(int(now), 60, None, True, 4, edgemsg.heartbeat(0)),
                             now)
        interior.core.tick(now + 0.5)
    assert not [e for e in interior.flat() if type(e) is CloseConnection]
    interior.core.tick(16.1)
    assert [e for e in interior.flat() if type(e) is CloseConnection] == [
        CloseConnection(1, "", "")]
    assert any("Lost heartbeat from container c1, closing connection" in t
               for t in interior.core.al_logs)


def test_an_edge_streaming_a_message_in_is_not_closed_for_silent_heartbeats(interior):
    """While a message from the edge is still arriving, its worker may hold the socket (Q2):
    the heartbeats queue behind that message's bytes. The connection stays; once the message
    is complete, silence closes it as before."""
    from common.ipc import CloseConnection, StreamTransfer, TransferChunk
    interior.conn(1, role="edge")
    interior.do(LinkAttach(60, 1, DIR_IN, "h", "_$qd.edge_heartbeat", False, False, 250,
                           "endpoint"))
    interior.do(LinkAttach(61, 1, DIR_IN, "s", "big", False, False, 250, "endpoint"))
    interior.flat()
    interior.core.handle(0, Transfer(1, 60, None, True, 4, edgemsg.heartbeat(0)), 1.0)
    interior.core.handle(0, StreamTransfer(2, 61, "big", True, 4, False, 0, None, [],
                                           b"\x00Sp\xc0\x01\x00"), 1.5)
    for now in (4.0, 8.0, 12.0, 16.0, 20.0):
        interior.core.tick(now)
    assert not [e for e in interior.flat() if type(e) is CloseConnection]
    interior.core.handle(0, TransferChunk(2, True, False, b"\x00Sw\xa1\x01x"), 21.0)
    interior.core.tick(30.5)
    assert [e for e in interior.flat() if type(e) is CloseConnection] == [
        CloseConnection(1, "", "")]


def test_edge_asks_its_interior_whether_an_address_is_link_routed(edge):
    import proton
    edge.conn(1, role="edge")
    fx = _attach_outs(edge)
    lookup, replies = fx[4], fx[5]
    for e in fx:
        source = e.source
        if e is replies:  # the interior names the dynamic reply address
            source = dict(e.source, address="amqp:/_topo/0/I/temp.r")
        edge.do(LinkAttached(e.link_id, source, e.target, [2, 0]))
    edge.do(LinkFlow(lookup.link_id, 10, False))
    edge.flat()
    # a client's sender to lr.q waits for the answer: nothing answered yet
    edge.conn(2).sender(10, 2, "lr.q")
    fx = edge.flat()
    [req] = [e for e in fx if type(e) is RouterDeliver and e.link_id == lookup.link_id]
    assert not [e for e in fx if type(e) is LinkOpen]
    msg = proton.Message()
    msg.decode(req.payload)
    assert msg.reply_to == "amqp:/_topo/0/I/temp.r" and msg.body == ["lr.q", True]
    assert msg.properties == {"version": 1, "opcode": 1}
    # a link route with a destination: the attach goes up the uplink with the same termini
    reply = edgemsg.lookup_reply(msg.reply_to, b"\x80" + msg.correlation_id.to_bytes(8, "big"),
                                 0, True, True)
    edge.do(Transfer(1, replies.link_id, None, True, 4, reply))
    [up] = _attach_outs(edge)
    assert (up.conn_id, up.direction, up.name) == (1, DIR_OUT, "s10@c2")
    # a receiver to an address that is not link-routed is attached here once answered
    edge.receiver(20, 2, "plain")
    [req] = [e for e in edge.flat() if type(e) is RouterDeliver]
    msg.decode(req.payload)
    reply = edgemsg.lookup_reply(msg.reply_to, b"\x80" + msg.correlation_id.to_bytes(8, "big"),
                                 3, False, False)
    edge.do(Transfer(2, replies.link_id, None, True, 4, reply))
    assert LinkOpen(20, "plain") in edge.flat()
    # unanswered for 3 s: attached here
    edge.receiver(21, 2, "late")
    edge.flat()
    edge.core.tick(edge.core.now + 3.5)
    assert LinkOpen(21, "late") in edge.flat()
    # detached by the client before the answer: forgotten, never attached
    edge.receiver(22, 2, "gone")
    edge.flat()
    edge.do(ipc.LinkDetach(22, True, ""))
    edge.core.tick(edge.core.now + 3.5)
    assert not [e for e in edge.flat() if type(e) is LinkOpen]
    assert 22 not in edge.core.links


# --- the link-route proxy (1.19's edge link_route_proxy) ------------------------------------------
LR_BROKER_IN = {"identity": "1", "name": "lr-in", "prefix": "queue", "direction": "in",
                "connection": "broker", "distribution": "linkBalanced"}
CONN_LR = "org.apache.qpid.dispatch.router.connection.linkRoute"


def _uplink_answered(h, conn_id=1):
    """The uplink with its links attached, the dynamic reply address named; mgmt credit 10."""
    h.conn(conn_id, role="edge")
    fx = _attach_outs(h)
    replies, mgmt = fx[5], fx[6]
    for e in fx:
        source = e.source
        if e is replies:
            source = dict(e.source, address="amqp:/_topo/0/I/temp.r")
        h.do(LinkAttached(e.link_id, source, e.target, [2, 0]))
    h.do(LinkFlow(mgmt.link_id, 10, False))
    return replies, mgmt


def _requests(h, mgmt):
    import proton
    out = []
    for e in h.flat():
        if type(e) is RouterDeliver and e.link_id == mgmt.link_id:
            msg = proton.Message()
            msg.decode(e.payload)
            out.append(msg)
    return out


def _mgmt_reply(request, status, body):
    import proton
    return proton.Message(address=request.reply_to, correlation_id=request.correlation_id,
                          properties={"statusCode": status, "statusDescription": "x"},
                          body=body).encode()


def test_edge_creates_its_link_routes_on_the_interior(edge_lr):
    """A route container for the edge's linkRoute attaches: the edge asks its interior's
    $management for a connection-scoped link route of the uplink (1.19's names and fields);
    the container goes: the route is deleted by the identity the interior gave."""
    h = edge_lr
    replies, mgmt = _uplink_answered(h)
    assert _requests(h, mgmt) == []  # no destination yet: nothing to proxy
    h.do(ipc.ConnOpened(5, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "",
                        False, 250, 1))
    [create] = _requests(h, mgmt)
    assert create.reply_to == "amqp:/_topo/0/I/temp.r"
    assert create.properties == {"operation": "CREATE", "type": CONN_LR,
                                 "name": "R1/proxyLinkRoute/Cqueue"}
    assert create.body == {"type": CONN_LR, "pattern": "queue/#", "direction": "in",
                           "name": "R1/proxyLinkRoute/Cqueue"}
    h.do(Transfer(1, replies.link_id, None, True, 4,
                  _mgmt_reply(create, 201, {"identity": "42", "name": create.body["name"]})))
    assert _requests(h, mgmt) == []
    h.do(ipc.ConnClosed(5, ""))
    [delete] = _requests(h, mgmt)
    assert delete.properties == {"operation": "DELETE", "type": CONN_LR, "identity": "42",
                                 "name": "R1/proxyLinkRoute/Cqueue"}
    assert delete.body == {}
    h.do(Transfer(2, replies.link_id, None, True, 4, _mgmt_reply(delete, 204, None)))
    assert h.core.edge.routes.proxies == {}


def test_edge_link_route_proxy_waits_for_the_uplink_and_comes_back_with_it(edge_lr):
    """A container attached before the uplink: the CREATE goes once the reply address is
    known; the uplink lost (the interior drops the routes of that connection) and another
    one up: created again there. A CREATE refused by the interior is logged, not retried."""
    h = edge_lr
    h.do(ipc.ConnOpened(5, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "",
                        False, 250, 1))
    h.flat()
    replies, mgmt = _uplink_answered(h, 1)
    [create] = _requests(h, mgmt)
    h.do(Transfer(1, replies.link_id, None, True, 4,
                  _mgmt_reply(create, 201, {"identity": "42"})))
    h.do(ipc.ConnClosed(1, ""))
    h.flat()
    replies2, mgmt2 = _uplink_answered(h, 2)
    [again] = _requests(h, mgmt2)
    assert again.properties["operation"] == "CREATE" and again.correlation_id != \
        create.correlation_id
    h.do(Transfer(2, replies2.link_id, None, True, 4, _mgmt_reply(again, 400, None)))
    assert h.core.edge.routes.proxies == {}
    assert ("error", "link route proxy CREATE failed with error: (400) x, address=queue/# "
                     "proxy_name=R1/proxyLinkRoute/Cqueue)") in h.core.lr.logs


def test_edge_link_route_proxy_asks_again_after_ten_seconds(edge_lr):
    h = edge_lr
    replies, mgmt = _uplink_answered(h)
    h.do(ipc.ConnOpened(5, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "",
                        False, 250, 1))
    [create] = _requests(h, mgmt)
    h.core.tick(h.core.now + 5.0)
    assert _requests(h, mgmt) == []
    h.core.tick(h.core.now + 10.5)
    [again] = _requests(h, mgmt)
    assert again.properties["operation"] == "CREATE"
    # the late answer to the first is ignored; the second's is taken
    h.do(Transfer(1, replies.link_id, None, True, 4,
                  _mgmt_reply(create, 201, {"identity": "1"})))
    h.do(Transfer(2, replies.link_id, None, True, 4,
                  _mgmt_reply(again, 201, {"identity": "2"})))
    assert h.core.edge.routes.proxies["Cqueue"].identity == "2"


def test_link_routed_attach_from_the_uplink_goes_to_the_edges_container(edge_lr):
    """What the interior sends down the uplink for the proxied route reaches the container
    (the edge routes it with its own linkRoute; no address lookup for it)."""
    h = edge_lr
    _uplink_answered(h)
    h.do(ipc.ConnOpened(5, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "",
                        False, 250, 1))
    h.flat()
    target = {"address": "queue.a"}
    h.do(LinkAttach(30, 1, DIR_IN, "s9@c9", "queue.a", False, False, 10, "endpoint", None,
                    target, [0, 0]))
    fx = h.flat()
    assert not [e for e in fx if type(e) is RouterDeliver]  # no lookup asked
    [out] = [e for e in fx if type(e) is AttachOut]
    assert (out.conn_id, out.direction, out.target["address"]) == (5, DIR_OUT, "queue.a")


@pytest.fixture(params=BUILDS)
def edge_lr(request):
    return Harness(request.param, mode="edge", link_routes=[LR_BROKER_IN])
