"""The core's link routing (router_core/linkroute.py), command by command, on both builds:
the link-route table, route-container reachability, and (with the foundation's router-initiated
links) attach routing and the routed pair."""
import pytest

from common.ipc import ConnClosed, ConnOpened, LinkAttach, LinkRefuse, DIR_IN, DIR_OUT
from test_core import BUILDS, Harness

LR_IN = {"identity": "1", "name": "lr-in", "prefix": "queue", "direction": "in",
         "connection": "broker", "distribution": "linkBalanced"}
LR_OUT = {"identity": "2", "name": "lr-out", "prefix": "queue", "direction": "out",
          "connection": "broker", "distribution": "linkBalanced"}
LR_PATTERN = {"identity": "3", "pattern": "a.*.b", "direction": "in", "containerId": "bx"}


@pytest.fixture(params=BUILDS)
def core_cls(request):
    return request.param


def container(h, conn_id, listener="broker", container_id="bk"):
    return h.do(ConnOpened(conn_id, "route-container", "out", "127.0.0.1:2", container_id,
                           listener, "", "", False, 250, 1))


def status(h):
    return h.core.snapshot()["linkRoutes"]


def route_addresses(h):
    return {a["key"]: a for a in h.core.snapshot()["addresses"]
            if a["distribution"] == "linkBalanced"}


def test_route_addresses_are_keyed_as_1_19_keys_them(core_cls):
    h = Harness(core_cls, link_routes=[LR_IN, LR_OUT, LR_PATTERN,
                                       {"identity": "4", "pattern": "x.y.#", "direction": "out",
                                        "containerId": "bx"}])
    assert set(route_addresses(h)) == {"Cqueue", "Dqueue", "Ea.*.b", "Dx.y"}
    assert status(h) == {"1": "inactive", "2": "inactive", "3": "inactive", "4": "inactive"}
    # (and the heartbeat server's address, bound in every mode as 1.19 binds it)
    assert h.core.snapshot()["router"]["addrCount"] == 5


def test_route_container_by_connection_name_activates_and_deactivates(core_cls):
    h = Harness(core_cls, link_routes=[LR_IN, LR_OUT, LR_PATTERN])
    container(h, 5, listener="other")          # serves nothing
    h.conn(6)                                  # a normal connection named broker does not count
    assert set(status(h).values()) == {"inactive"}
    container(h, 7)
    assert status(h) == {"1": "active", "2": "active", "3": "inactive"}
    assert route_addresses(h)["Cqueue"]["containerCount"] == 1
    h.do(ConnClosed(7, ""))
    assert set(status(h).values()) == {"inactive"}
    assert route_addresses(h)["Cqueue"]["containerCount"] == 0


def test_route_container_by_container_id(core_cls):
    h = Harness(core_cls, link_routes=[LR_PATTERN])
    container(h, 5, listener="x", container_id="bx")
    assert status(h) == {"3": "active"}


def test_created_and_deleted_at_run_time(core_cls):
    h = Harness(core_cls)
    container(h, 5)
    h.core.create_link_route(LR_IN)
    assert status(h) == {"1": "active"}
    h.core.create_link_route(dict(LR_IN, identity="9", name="again"))  # same address, shared
    assert list(route_addresses(h)) == ["Cqueue"]
    assert h.core.delete_link_route("1") and list(route_addresses(h)) == ["Cqueue"]
    assert h.core.delete_link_route("9") and route_addresses(h) == {}
    assert not h.core.delete_link_route("9")


@pytest.mark.parametrize("direction, address", [(DIR_IN, "queue.a"), (DIR_OUT, "queue/b"),
                                                (DIR_IN, "queue"), (DIR_IN, "amqp:/queue.c")])
def test_attach_matching_a_route_without_destination_is_refused_no_route(core_cls, direction,
                                                                         address):
    h = Harness(core_cls, link_routes=[LR_IN, LR_OUT])
    h.conn(1)
    h.do(LinkAttach(10, 1, direction, "l", address, False, False, 10))
    assert h.core.take_effects()[0] == [
        LinkRefuse(10, "qd:no-route-to-dest", "No route to the destination node")]
    assert 10 not in h.core.links


def test_attach_not_matching_is_message_routed(core_cls):
    h = Harness(core_cls, link_routes=[LR_IN])
    h.conn(1)
    h.do(LinkAttach(10, 1, DIR_IN, "l", "queuex", False, False, 10),
         LinkAttach(11, 1, DIR_OUT, "m", "queue.a", False, False, 10))  # LR_IN is in only
    assert 10 in h.core.links and 11 in h.core.links


# --- attach routing and the routed pair -------------------------------------------------------
from common.ipc import (  # noqa: E402
    STATE_ACCEPTED, TERMINUS_COORDINATOR, TERMINUS_SOURCE, TERMINUS_TARGET, AttachOut,
    DetachLink, Deliver, Disposition, Drained, InDrained, LinkAttached, LinkCredit, LinkDetach,
    LinkDrain, LinkFlow, LinkOpen, Transfer, UpdateIn, terminus, DeliveryTag, DeliverTag)

CLIENT, BROKER = 0, 1  # peers (workers) of the client's and the broker's connections


def routed_core(core_cls, routes=(LR_IN, LR_OUT)):
    h = Harness(core_cls, link_routes=list(routes))
    h.conn(1, peer=CLIENT)
    h.do(ConnOpened(5, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "", False,
                    250, 1), peer=BROKER)
    h.core.take_effects()
    return h


def attach(h, link_id, direction, address, target=None, source=None, settle=(0, 0)):
    if direction == DIR_IN:
        source = source or terminus(TERMINUS_SOURCE, None)
        target = target or terminus(TERMINUS_TARGET, address)
    else:
        source = source or terminus(TERMINUS_SOURCE, address)
        target = target or terminus(TERMINUS_TARGET, None)
    h.do(LinkAttach(link_id, 1, direction, f"l{link_id}", address, False, settle[0] == 1, 10,
                    "endpoint", source, target, list(settle)), peer=CLIENT)
    return h.core.take_effects()


def test_sender_is_routed_to_the_container_and_answered_with_its_termini(core_cls):
    h = routed_core(core_cls)
    fx = attach(h, 10, DIR_IN, "queue.a")
    assert CLIENT not in fx  # not answered before the far end has
    (out,) = fx[BROKER]
    assert isinstance(out, AttachOut) and out.conn_id == 5 and out.direction == DIR_OUT
    assert out.name == "l10@c1" and out.target["address"] == "queue.a"
    far_target = dict(out.target, capabilities=b"\xa3\x03cap")
    h.do(LinkAttached(out.link_id, out.source, far_target, [0, 0]), peer=BROKER)
    fx = h.core.take_effects()
    assert fx[CLIENT] == [LinkOpen(10, "queue.a", out.source, far_target, [0, 0])]
    # no credit until the container gives some; then exactly as much
    h.do(LinkFlow(out.link_id, 3, False), peer=BROKER)
    assert h.core.take_effects()[CLIENT] == [LinkCredit(10, 3)]
    h.do(Transfer(100, 10, None, False, 0, b"message bytes"), peer=CLIENT)
    fx = h.core.take_effects()
    (deliver,) = fx[BROKER]
    assert isinstance(deliver, Deliver) and deliver.link_id == out.link_id
    assert bytes(deliver.payload) == b"message bytes"
    assert CLIENT not in fx  # no credit replenished by the router
    h.do(Disposition(deliver.dlv_id, STATE_ACCEPTED, True, None), peer=BROKER)
    assert h.core.take_effects()[CLIENT] == [UpdateIn(100, STATE_ACCEPTED, True, None)]
    # the client detaches with an error: the far end gets it
    h.do(LinkDetach(10, True, "amqp:resource-deleted: gone"), peer=CLIENT)
    assert h.core.take_effects()[BROKER] == [
        DetachLink(out.link_id, "amqp:resource-deleted", "gone")]
    assert 10 not in h.core.links and out.link_id not in h.core.links


def test_receiver_credit_and_drain_pass_through(core_cls):
    h = routed_core(core_cls)
    (out,) = attach(h, 11, DIR_OUT, "queue.b")[BROKER]
    assert out.direction == DIR_IN and out.source["address"] == "queue.b"
    h.do(LinkFlow(11, 4, False), peer=CLIENT)  # before the far end answered: kept
    assert h.core.take_effects() == {}
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)
    fx = h.core.take_effects()
    assert fx[CLIENT] == [LinkOpen(11, "queue.b", out.source, out.target, [0, 0])]
    # the far side is marked link-routed (its deliveries keep their tags), then credited
    assert fx[BROKER] == [LinkOpen(out.link_id, None, None, None, [0, 0]),
                          LinkCredit(out.link_id, 4)]
    h.do(Transfer(200, out.link_id, None, True, 0, b"m"), peer=BROKER)
    fx = h.core.take_effects()
    assert [type(e) for e in fx[CLIENT]] == [Deliver] and BROKER not in fx
    h.do(LinkFlow(11, 4, True), peer=CLIENT)  # drain the 3 left
    assert h.core.take_effects() == {BROKER: [LinkDrain(out.link_id)]}
    h.do(InDrained(out.link_id), peer=BROKER)
    assert h.core.take_effects() == {CLIENT: [Drained(11)]}
    h.do(LinkFlow(11, 6, False), peer=CLIENT)  # 2 more after the drain (4 used up)
    assert h.core.take_effects() == {BROKER: [LinkCredit(out.link_id, 2)]}


def test_the_senders_tag_goes_first_to_the_receivers_worker(core_cls):
    """DeliveryTag before a routed Transfer: the receiver's worker gets DeliverTag for the
    delivery id the Deliver then carries, sent at once or after being held for credit; a tag
    whose transfer went elsewhere is not passed on."""
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_IN, "queue.t")[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)
    h.core.take_effects()
    h.do(LinkFlow(out.link_id, 1, False), peer=BROKER)
    h.core.take_effects()
    h.do(DeliveryTag(100, 10, b"client-tag"), peer=CLIENT)
    h.do(Transfer(100, 10, None, False, 0, b"m1"), peer=CLIENT)
    tag, deliver = h.core.take_effects()[BROKER]
    assert tag == DeliverTag(deliver.dlv_id, b"client-tag") and isinstance(deliver, Deliver)
    # no credit left: held with its tag, which goes first when credit comes
    h.do(DeliveryTag(101, 10, b"second"), peer=CLIENT)
    h.do(Transfer(101, 10, None, True, 0, b"m2"), peer=CLIENT)
    assert BROKER not in h.core.take_effects()
    h.do(LinkFlow(out.link_id, 2, False), peer=BROKER)
    tag, deliver = [e for e in h.core.take_effects()[BROKER] if type(e) is not LinkCredit]
    assert tag == DeliverTag(deliver.dlv_id, b"second") and bytes(deliver.payload) == b"m2"
    assert not h.core.lr.held_tags and h.core.routed_tag is None
    # a tag for a link that is not routed is ignored
    h.do(DeliveryTag(102, 999, b"x"), peer=CLIENT)
    assert h.core.routed_tag is None


def test_a_detach_that_does_not_close_passes_as_one(core_cls):
    """1.19 passes a detach(closed=false) of a routed link on as a detach, not a close."""
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_IN, "queue.d")[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)
    h.core.take_effects()
    h.do(LinkDetach(10, False, ""), peer=CLIENT)
    (detach,) = h.core.take_effects()[BROKER]
    assert detach == DetachLink(out.link_id, "", "", False) and not detach.closed


def test_external_prefixes_are_rewritten_both_ways(core_cls):
    route = {"identity": "7", "prefix": "a", "direction": "in", "connection": "broker",
             "addExternalPrefix": "ext.", "delExternalPrefix": "a."}
    h = routed_core(core_cls, [route])
    (out,) = attach(h, 10, DIR_IN, "a.q")[BROKER]
    assert out.target["address"] == "ext.q"
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)
    (opened,) = h.core.take_effects()[CLIENT]
    assert opened.address == "a.q" and opened.target["address"] == "a.q"


def test_coordinator_matches_a_coordinator_link_route(core_cls):
    route = {"identity": "8", "prefix": "$coordinator", "direction": "in",
             "connection": "broker"}
    h = routed_core(core_cls, [route])
    coordinator = terminus(TERMINUS_COORDINATOR, None)
    (out,) = attach(h, 10, DIR_IN, None, target=coordinator)[BROKER]
    assert out.target["type"] == TERMINUS_COORDINATOR and out.target["address"] is None


def test_lost_container_detaches_routed_links_not_the_client(core_cls):
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_IN, "queue.a")[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)
    h.core.take_effects()
    h.do(ConnClosed(5, "connection lost"), peer=BROKER)
    fx = h.core.take_effects()
    assert fx[CLIENT] == [DetachLink(10, "qd:routed-link-lost",
                                     "Connectivity to the peer container was lost")]
    assert 1 in h.core.conns and 10 not in h.core.links
    assert status(h) == {"1": "inactive", "2": "inactive"}
    assert attach(h, 12, DIR_IN, "queue.a")[CLIENT] == [
        LinkRefuse(12, "qd:no-route-to-dest", "No route to the destination node")]


def test_far_end_refusal_reaches_the_client(core_cls):
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_OUT, "queue.c")[BROKER]
    h.do(LinkAttached(out.link_id, None, out.target, [0, 0]),
         LinkDetach(out.link_id, True, "amqp:not-found: no queue"), peer=BROKER)
    assert h.core.take_effects()[CLIENT] == [
        LinkOpen(10, None, None, out.target, [0, 0]),
        DetachLink(10, "amqp:not-found", "no queue")]
    assert not h.core.links.get(10)


def test_client_gone_before_the_answer(core_cls):
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_IN, "queue.a")[BROKER]
    h.do(ConnClosed(1, ""), peer=CLIENT)
    assert h.core.take_effects()[BROKER] == [
        DetachLink(out.link_id, "qd:routed-link-lost",
                   "Connectivity to the peer container was lost")]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)  # ignored
    assert h.core.take_effects() == {}


# --- network-wide (interior mode; topology of test_core_interior: R2 -1- R1 -5- R3 -- R4) ------
from common.ipc import LocalAddress, PeerHello, RemoteAddress  # noqa: E402
from test_core_interior import AGENT, net  # noqa: E402,F401


def test_local_destination_is_advertised_with_the_link_balanced_hint(core_cls):
    h = Harness(core_cls, mode="interior", link_routes=[LR_IN])
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    h.core.take_effects()
    container(h, 7)
    assert h.core.take_effects()[AGENT] == [LocalAddress("Cqueue", True, 4)]
    h.do(ConnClosed(7, ""))
    assert h.core.take_effects()[AGENT] == [LocalAddress("Cqueue", False, 4)]


def test_attach_goes_toward_a_router_with_a_destination(net):
    # R1 has no linkRoute of its own: it learns the route address from R4's MAU, as 1.19 does
    net.do(RemoteAddress("Dqueue", "R4", True, 4), peer=AGENT)
    assert "Dqueue" in [a["key"] for a in net.core.snapshot()["addresses"]]
    net.conn(9, peer=0)
    net.do(LinkAttach(50, 9, DIR_OUT, "rx", "queue.z", False, False, 10, "endpoint",
                      terminus(TERMINUS_SOURCE, "queue.z"), terminus(TERMINUS_TARGET, None),
                      [0, 0]))
    (out,) = [e for e in net.core.take_effects()[0] if isinstance(e, AttachOut)]
    assert out.conn_id == 5 and out.name == "rx@c9" and out.direction == DIR_IN
    # R4 withdraws it: the learned route address goes, the address is message-routed again
    net.do(RemoteAddress("Dqueue", "R4", False, 4), peer=AGENT)
    assert "Dqueue" not in {a["key"] for a in net.core.snapshot()["addresses"]}
    net.do(LinkAttach(51, 9, DIR_OUT, "rx2", "queue.z", False, False, 10, "endpoint",
                      terminus(TERMINUS_SOURCE, "queue.z"), None, [0, 0]))
    assert isinstance(net.core.take_effects()[0][0], LinkOpen)


def test_a_tenants_attach_carries_the_tenants_address_to_container_and_router(net):
    """multiTenant: the worker gives the core the tenant's address (``vh/queue.a``) while
    the terminus has the client's own (``queue.a``); 1.19 forwards the attach with the
    tenant's address, to a route container and to the
    next router alike. The client's answer carries what the far end said."""
    route = {"identity": "7", "prefix": "vh/queue", "direction": "in", "connection": "broker"}
    net.core.create_link_route(route)
    net.do(ConnOpened(7, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "",
                      False, 250, 1))
    net.conn(9)
    net.core.take_effects()
    net.do(LinkAttach(50, 9, DIR_IN, "tx", "vh/queue.a", False, False, 10, "endpoint",
                      terminus(TERMINUS_SOURCE, None), terminus(TERMINUS_TARGET, "queue.a"),
                      [0, 0]))
    (out,) = [e for e in net.core.take_effects()[0] if isinstance(e, AttachOut)]
    assert out.conn_id == 7 and out.target["address"] == "vh/queue.a"
    net.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]))
    (opened,) = [e for e in net.core.take_effects()[0] if isinstance(e, LinkOpen)
                 and e.link_id == 50]
    assert opened.target["address"] == "vh/queue.a"
    # a route address learned from another router: the attach goes there with vh/
    net.do(RemoteAddress("Dvh/other", "R4", True, 4), peer=AGENT)
    net.do(LinkAttach(51, 9, DIR_OUT, "rx", "vh/other.z", False, False, 10, "endpoint",
                      terminus(TERMINUS_SOURCE, "other.z"), terminus(TERMINUS_TARGET, None),
                      [0, 0]))
    (out,) = [e for e in net.core.take_effects()[0] if isinstance(e, AttachOut)]
    assert out.conn_id == 5 and out.source["address"] == "vh/other.z"


def test_routed_attach_from_another_router_reaches_the_local_container(core_cls):
    h = Harness(core_cls, mode="interior", link_routes=[LR_IN])
    h.do(ConnOpened(5, "inter-router", "in", "127.0.0.1:1", "R3", "l0", "", "", False, 250, 1))
    container(h, 7)
    h.core.take_effects()
    h.do(LinkAttach(60, 5, DIR_IN, "tx@client", "queue.q", False, False, 10, "endpoint",
                    terminus(TERMINUS_SOURCE, None), terminus(TERMINUS_TARGET, "queue.q"),
                    [0, 0]))
    (out,) = h.core.take_effects()[0]
    assert isinstance(out, AttachOut) and out.conn_id == 7 and out.name == "tx@client"
    # a plain endpoint attach on the inter-router connection is still refused
    h.do(LinkAttach(61, 5, DIR_IN, "tx", "other", False, False, 10, "endpoint", None, None,
                    [0, 0]))
    assert h.core.take_effects()[0][0].condition == "amqp:not-allowed"


def test_every_disposition_state_passes_a_routed_pair(core_cls):
    """declared (0x33) with its txn-id, transactional-state, an extension state: as they are."""
    h = routed_core(core_cls, [{"identity": "8", "prefix": "$coordinator", "direction": "in",
                                "connection": "broker"}])
    (out,) = attach(h, 10, DIR_IN, None, target=terminus(TERMINUS_COORDINATOR, None))[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), LinkFlow(out.link_id, 5, False),
         peer=BROKER)
    h.core.take_effects()
    for n, (state, info) in enumerate([(0x33, {"data": b"\xc0\x06\x01\xa0\x03tx1"}),
                                       (0x34, {"data": b"\xc0\x0a\x02\xa0\x03tx1\x00"}),
                                       (999, None)]):
        h.do(Transfer(300 + n, 10, None, False, 0, b"m"), peer=CLIENT)
        (deliver,) = h.core.take_effects()[BROKER]
        h.do(Disposition(deliver.dlv_id, state, True, info), peer=BROKER)
        assert h.core.take_effects()[CLIENT] == [UpdateIn(300 + n, state, True, info)]


def test_the_senders_state_reaches_the_forwarded_delivery(core_cls):
    from common.ipc import DeliverState, SenderState  # noqa: PLC0415
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_IN, "queue.t")[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]),
         LinkFlow(out.link_id, 5, False), peer=BROKER)
    h.core.take_effects()
    info = {"data": b"\xc0\x06\x01\xa0\x03tx1"}
    h.do(Transfer(400, 10, None, False, 0, b"m"), SenderState(400, 0x34, info), peer=CLIENT)
    deliver, state = h.core.take_effects()[BROKER]
    assert isinstance(deliver, Deliver) and state == DeliverState(deliver.dlv_id, 0x34, info)


def test_the_senders_state_follows_a_delivery_the_core_held(core_cls):
    """The receiver's credit went (the worker reported a lower limit): the next delivery is
    held; the state its sender gives it meanwhile goes out right after it once it is sent, and
    is forgotten when a held delivery goes back instead."""
    from common.ipc import DeliverState, SenderState  # noqa: PLC0415
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_IN, "queue.t")[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]),
         LinkFlow(out.link_id, 1, False), peer=BROKER)
    h.core.take_effects()
    h.do(Transfer(400, 10, None, False, 0, b"m1"), peer=CLIENT)
    h.core.take_effects()
    info = {"data": b"\xc0\x06\x01\xa0\x03tx1"}
    h.do(Transfer(401, 10, None, False, 0, b"m2"), SenderState(401, 0x34, info), peer=CLIENT)
    assert BROKER not in h.core.take_effects()  # held: no credit
    h.do(LinkFlow(out.link_id, 2, False), peer=BROKER)
    deliver, state = h.core.take_effects()[BROKER]
    assert isinstance(deliver, Deliver) and deliver.payload == b"m2"
    assert state == DeliverState(deliver.dlv_id, 0x34, info)
    assert h.core.lr.held_states == {}
    h.do(Transfer(402, 10, None, False, 0, b"m3"), SenderState(402, 0x34, None), peer=CLIENT)
    h.do(LinkDetach(out.link_id, True, ""), peer=BROKER)  # goes back: the state with it
    assert h.core.lr.held_states == {}


def test_a_local_route_for_a_learned_address_brings_its_external_prefixes(net):
    net.do(RemoteAddress("Cqueue", "R4", True, 4), peer=AGENT)
    net.core.create_link_route({"identity": "5", "prefix": "queue", "direction": "in",
                                "connection": "broker", "addExternalPrefix": "x."})
    net.do(ConnOpened(7, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "",
                      False, 250, 1))
    net.conn(9)
    net.core.take_effects()
    net.do(LinkAttach(50, 9, DIR_IN, "tx", "queue.a", False, False, 10, "endpoint",
                      terminus(TERMINUS_SOURCE, None), terminus(TERMINUS_TARGET, "queue.a"),
                      [0, 0]))
    (out,) = net.core.take_effects()[0]
    assert out.conn_id == 7 and out.target["address"] == "x.queue.a"  # local first


def test_activation_is_logged_as_1_19_logs_it(core_cls):
    h = Harness(core_cls, link_routes=[LR_IN, LR_PATTERN])
    container(h, 7, listener="broker", container_id="bx")
    h.do(ConnClosed(7, ""))
    assert h.core.lr.take_logs() == [
        ("info", "Link Route Activated 'lr-in' on connection broker"),
        ("info", "Link Route Activated '3' on container bx"),
        ("info", "Link Route Deactivated 'lr-in' on connection broker"),
        ("info", "Link Route Deactivated '3' on container bx")]


def test_attaches_are_balanced_over_the_destinations(core_cls):
    h = routed_core(core_cls)  # container connection 5 ("broker")
    h.do(ConnOpened(6, "route-container", "out", "127.0.0.1:3", "bk2", "broker", "", "", False,
                    250, 1), peer=BROKER)
    h.core.take_effects()
    conns = [attach(h, 20 + n, DIR_IN, "queue.b")[BROKER][0].conn_id for n in range(4)]
    assert conns == [5, 6, 5, 6]


def test_dynamic_terminus_is_routed_by_its_dynamic_node_properties_address(core_cls):
    h = routed_core(core_cls, [dict(LR_OUT, delExternalPrefix="queue.")])
    source = dict(terminus(TERMINUS_SOURCE, None, dynamic=True), properties=b"\xc1...",
                  dnp_address="queue.dyn")
    h.do(LinkAttach(10, 1, DIR_OUT, "dyn", None, True, False, 10, "endpoint", source,
                    terminus(TERMINUS_TARGET, None), [0, 0]), peer=CLIENT)
    (out,) = h.core.take_effects()[BROKER]
    assert out.source == source  # passed on as it is: dynamic, its properties
    answered = dict(source, address="tmp.broker.1", dynamic=True)
    h.do(LinkAttached(out.link_id, answered, out.target, [0, 0]), peer=BROKER)
    (opened,) = h.core.take_effects()[CLIENT]
    assert opened.address == "tmp.broker.1" and opened.source == answered
    # without the property a dynamic receiver is message-routed (a temporary address here)
    h.do(LinkAttach(11, 1, DIR_OUT, "dyn2", None, True, False, 10, "endpoint",
                    terminus(TERMINUS_SOURCE, None, dynamic=True), None, [0, 0]), peer=CLIENT)
    assert isinstance(h.core.take_effects()[CLIENT][0], LinkOpen)


# --- connection-scoped link routes (router.connection.linkRoute) ------------------------------
def test_connection_scoped_route_goes_to_its_connection_and_goes_with_it(core_cls):
    """A route created over connection 2 (a normal one: any role) makes it the destination of
    matching attaches from other connections; closing it removes the route and its address;
    a route for a connection that is gone is refused with 1.19's text."""
    h = Harness(core_cls)
    h.conn(1, peer=CLIENT)
    h.conn(2, peer=BROKER)
    assert h.core.create_conn_link_route({"identity": "7", "name": "clr", "pattern": "flea.*",
                                          "direction": "in", "connId": 2}) == ""
    views = h.core.snapshot()["connLinkRoutes"]
    assert views == [{"identity": "7", "name": "clr", "pattern": "flea.*", "direction": "in",
                      "containerId": "c2", "connId": 2}]
    assert route_addresses(h)["Eflea.*"]["containerCount"] == 1
    fx = attach(h, 10, DIR_IN, "flea.x")
    (out,) = fx[BROKER]
    assert isinstance(out, AttachOut) and out.conn_id == 2
    assert not h.core.delete_conn_link_route(1, "7")  # another connection's: not found
    h.do(ConnClosed(2, ""), peer=BROKER)
    assert route_addresses(h) == {} and h.core.snapshot()["connLinkRoutes"] == []
    assert h.core.create_conn_link_route({"identity": "8", "pattern": "a", "direction": "in",
                                          "connId": 2}) == "Parent connection no longer exists"


def test_connection_scoped_route_deleted_keeps_a_shared_address(core_cls):
    h = Harness(core_cls, link_routes=[dict(LR_PATTERN, pattern="flea.*")])
    h.conn(2, peer=BROKER)
    h.core.create_conn_link_route({"identity": "7", "pattern": "flea.*", "direction": "in",
                                   "connId": 2})
    assert route_addresses(h)["Eflea.*"]["containerCount"] == 1
    assert h.core.delete_conn_link_route(2, "7")
    assert route_addresses(h)["Eflea.*"]["containerCount"] == 0  # the configured one stays


def test_a_management_request_is_preceded_by_the_connection_it_came_on(core_cls):
    """The agent's request links (internal connection, outbound) get DeliverOrigin just before
    each Deliver (also when the request waited for credit); other receivers never do."""
    from common.ipc import DeliverOrigin  # noqa: PLC0415
    agent = 2
    h = Harness(core_cls)
    h.conn(1, peer=CLIENT)
    h.conn(9, peer=agent, role="internal")
    h.receiver(20, 9, "$management", peer=agent)
    h.do(LinkFlow(20, 1, False), peer=agent)
    h.conn(3, peer=BROKER)
    h.receiver(30, 3, "other", peer=BROKER)
    h.do(LinkFlow(30, 5, False), peer=BROKER)
    h.sender(10, 1, "$management", peer=CLIENT)
    h.sender(11, 1, "other", peer=CLIENT)
    h.core.take_effects()
    h.do(Transfer(100, 10, None, False, 0, b"request"), Transfer(101, 10, None, True, 0, b"r2"),
         Transfer(102, 11, None, False, 0, b"data"), peer=CLIENT)
    fx = h.core.take_effects()
    origin, deliver = fx[agent]
    assert isinstance(origin, DeliverOrigin) and isinstance(deliver, Deliver)
    assert (origin.dlv_id, origin.conn_id) == (deliver.dlv_id, 1)
    assert not any(isinstance(e, DeliverOrigin) for e in fx[BROKER])
    h.do(LinkFlow(20, 2, False), peer=agent)  # the held (pre-settled) one goes now
    origin, deliver = h.core.take_effects()[agent]
    assert (origin.dlv_id, origin.conn_id) == (deliver.dlv_id, 1) and deliver.settled


@pytest.mark.parametrize("allow", [True, False])
@pytest.mark.parametrize("direction, timeout, expiry, resumable", [
    (DIR_IN, 5, 0, True), (DIR_OUT, 0, 3, True),         # timeout, expiry-policy never
    (DIR_IN, 0, 0, False), (DIR_OUT, 0, 1, False),       # link-detach, session-end
    (DIR_IN, 0, 2, False)])                              # connection-close
def test_allow_resumable_link_route(core_cls, allow, direction, timeout, expiry, resumable):
    """router allowResumableLinkRoute: no refuses a link-routed attach whose terminus outlives
    its link (1.19: non-zero timeout or expiry-policy never) with 1.19's condition; the other
    attaches are routed, and with the default every one is."""
    h = Harness(core_cls, link_routes=[LR_IN, LR_OUT], allow_resumable_link_route=allow)
    h.conn(1, peer=CLIENT)
    h.do(ConnOpened(5, "route-container", "out", "127.0.0.1:2", "bk", "broker", "", "", False,
                    250, 1), peer=BROKER)
    h.core.take_effects()
    term = dict(terminus(TERMINUS_TARGET if direction == DIR_IN else TERMINUS_SOURCE, "queue.x"),
                timeout=timeout, expiry=expiry)
    fx = attach(h, 10, direction, "queue.x", **({"target": term} if direction == DIR_IN
                                                 else {"source": term}))
    if resumable and not allow:
        assert fx == {CLIENT: [LinkRefuse(10, "qd:link-expiration",
                                          "Requested link expiration not allowed")]}
        assert 10 not in h.core.links
    else:
        assert isinstance(fx[BROKER][0], AttachOut) and CLIENT not in fx


# --- a session ended by its peer (LinkLost; issue 28, item 13d) --------------------------------
from common.ipc import LinkLost  # noqa: E402

LOST = ("qd:routed-link-lost", "Connectivity to the peer container was lost")


def test_links_of_a_session_the_container_ended_are_lost(core_cls):
    """The container ended the session of the far link: the client's link is detached
    (closed) with qd:routed-link-lost, as 1.19 does; the routes stay active and the next
    attach goes out again."""
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_IN, "queue.a")[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)
    h.core.take_effects()
    h.do(LinkLost(out.link_id), peer=BROKER)
    assert h.core.take_effects() == {CLIENT: [DetachLink(10, *LOST, True)]}
    assert 10 not in h.core.links and out.link_id not in h.core.links
    assert status(h) == {"1": "active", "2": "active"}
    (again,) = attach(h, 11, DIR_IN, "queue.a")[BROKER]
    assert isinstance(again, AttachOut) and again.link_id != out.link_id


def test_links_of_a_session_the_client_ended_are_lost(core_cls):
    h = routed_core(core_cls)
    (out,) = attach(h, 10, DIR_OUT, "queue.b")[BROKER]
    h.do(LinkAttached(out.link_id, out.source, out.target, [0, 0]), peer=BROKER)
    h.core.take_effects()
    h.do(LinkLost(10), peer=CLIENT)
    assert h.core.take_effects() == {BROKER: [DetachLink(out.link_id, *LOST, True)]}
    assert not h.core.links.get(10) and not h.core.links.get(out.link_id)
    h.do(LinkLost(10), peer=CLIENT)  # twice (or for a link never known): ignored
    assert h.core.take_effects() == {}
