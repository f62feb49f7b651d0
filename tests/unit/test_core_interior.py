"""The core in a network of routers (interior mode), against both builds.

Topology used throughout (this core is R1)::

    R2 ---conn 1--- R1 ---conn 5--- R3 ---- R4      (R4 reached through R3)

Link ids on conn 1 start at 100, on conn 5 at 200 (see ``_inter_router_links``): control in
= first, control out = first + 1, data in/out of priority p = first + 2 + 2p / first + 3 + 2p.
Peer 0 is the workers' side, peer 1 the agent.
"""
import pytest

from common.ipc import (
    STATE_ACCEPTED, STATE_MODIFIED, STATE_RELEASED, ConnClosed, ControlIn, ControlSend, Deliver,
    Disposition, LinkCredit, LinkFlow, LocalAddress, PeerHello, RemoteAddress, RouteUpdate,
    RouterDeliver, RouterLinkDown, RouterLinkUp, RouterTransfer, SettleIn, UpdateIn)
from tests.unit.test_core import Harness, _inter_router_links, core_cls  # noqa: F401

AGENT = 1


def data_out(first, priority=4):
    return first + 3 + 2 * priority


def data_in(first, priority=4):
    return first + 2 + 2 * priority


@pytest.fixture
def net(core_cls):
    h = Harness(core_cls, mode="interior")
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    for conn_id, first, router in ((1, 100, "R2"), (5, 200, "R3")):
        h.do(ConnOpenedFor(conn_id, router))
        _inter_router_links(h, conn_id, first)
        for link_id in range(first + 1, first + 22, 2):  # credit on every outbound router link
            h.do(LinkFlow(link_id, 100, False))
    h.do(RouteUpdate({"R2": "R2", "R3": "R3", "R4": "R3"}, {"R2": 1, "R3": 1, "R4": 2},
                     {"R2": [], "R3": ["R2"], "R4": ["R2"]}, {"R2": 1, "R3": 5}), peer=AGENT)
    h.effects()
    return h


def ConnOpenedFor(conn_id, router, cost=1):
    from common.ipc import ConnOpened
    return ConnOpened(conn_id, "inter-router", "in", "127.0.0.1:1", router, "l0", "", "", False,
                      250, cost)


def of(effects, cls):
    return [e for e in effects if isinstance(e, cls)]


def test_agent_hears_router_connections_come_and_go(core_cls):
    h = Harness(core_cls, mode="interior")
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    h.do(ConnOpenedFor(1, "R2", cost=4))
    h.sender(100, 1, None, capacity=250, link_type="router-control")
    assert of(h.effects().get(AGENT, []), RouterLinkUp) == []  # one control link is not enough
    h.receiver(101, 1, None, capacity=250, link_type="router-control")
    assert h.effects()[AGENT] == [RouterLinkUp(1, 4, "R2")]
    h.do(ConnClosed(1, ""))
    assert h.effects()[AGENT] == [RouterLinkDown(1)]


def test_hello_goes_on_the_connection_control_link_and_waits_for_credit(core_cls):
    h = Harness(core_cls, mode="interior")
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    h.do(ConnOpenedFor(1, "R2"))
    _inter_router_links(h, 1, 100)
    h.effects()
    h.do(ControlSend(1, "amqp:/_local/qdhello", b"hello-1"), peer=AGENT)
    assert of(h.flat(), RouterDeliver) == []  # no credit on the control link yet: queued
    h.do(LinkFlow(101, 10, False))
    [sent] = of(h.flat(), RouterDeliver)
    assert (sent.link_id, sent.settled, bytes(sent.payload)) == (101, True, b"hello-1")
    assert (sent.to_override, sent.phase) == (None, -1)


def test_control_messages_in_go_to_the_agent_and_on_to_others(net):
    # HELLO: only to the agent, with the connection it came on
    net.do(RouterTransfer(1, 100, "amqp:/_local/qdhello", True, 9, 0, "0/R2", ["0/R2"], b"h"))
    effects = net.effects()
    assert [(e.conn_id, bytes(e.payload)) for e in of(effects[AGENT], ControlIn)] == [(1, b"h")]
    assert of(effects.get(0, []), RouterDeliver) == []
    # RA (flooded): to the agent, and on to R3 (not back to R2, which is in the trace)
    net.do(RouterTransfer(2, 100, "amqp:/_topo/0/all/qdrouter", True, 9, 0, "0/R2", ["0/R2"],
                          b"ra"))
    effects = net.effects()
    assert len(of(effects[AGENT], ControlIn)) == 1
    assert [e.link_id for e in of(effects[0], RouterDeliver)] == [201]
    # LSR for R4: not for us, forwarded on the control link toward R4 (through R3)
    net.do(RouterTransfer(3, 100, "amqp:/_topo/0/R4/qdrouter", True, 9, 0, "0/R2", ["0/R2"],
                          b"lsr"))
    effects = net.effects()
    assert of(effects.get(AGENT, []), ControlIn) == []
    assert [e.link_id for e in of(effects[0], RouterDeliver)] == [201]
    # LSU for us: to the agent only
    net.do(RouterTransfer(4, 200, "amqp:/_topo/0/R1/qdrouter", True, 9, 0, "0/R3", ["0/R3"],
                          b"lsu"))
    effects = net.effects()
    assert len(of(effects[AGENT], ControlIn)) == 1 and of(effects.get(0, []), RouterDeliver) == []


def test_agent_sends_flooded_and_routed_control_messages(net):
    net.do(ControlSend(-1, "amqp:/_topo/0/all/qdrouter", b"ra"), peer=AGENT)
    assert sorted(e.link_id for e in of(net.flat(), RouterDeliver)) == [101, 201]
    net.do(ControlSend(-1, "amqp:/_topo/0/R4/qdrouter.ma", b"mar"), peer=AGENT)
    assert [e.link_id for e in of(net.flat(), RouterDeliver)] == [201]


def test_first_and_last_local_consumer_are_announced(net):
    net.conn(9).receiver(20, 9, "orders", credit=5)
    assert net.effects()[AGENT] == [LocalAddress("M0orders", True, 3)]
    net.receiver(21, 9, "orders", credit=5)
    assert AGENT not in net.effects()
    net.do(ConnClosed(9, ""))
    assert net.effects()[AGENT] == [LocalAddress("M0orders", False, 3)]


def test_sender_gets_credit_once_a_remote_destination_appears(net):
    net.conn(9).sender(10, 9, "orders")
    assert of(net.flat(), LinkCredit) == []
    net.do(RemoteAddress("M0orders", "R4", True, 3), peer=AGENT)
    assert of(net.flat(), LinkCredit) == [LinkCredit(10, 10)]
    # targeted sender: the next router needs the address in x-opt-qd.to
    dlv = net.send(10, to=None)
    [sent] = of(net.flat(), RouterDeliver)
    assert (sent.link_id, sent.settled, sent.to_override, sent.phase) == (
        data_out(200), False, "orders", -1)  # phase 0: no x-opt-qd.phase needed
    # settlement comes back end to end
    net.do(Disposition(sent.dlv_id, STATE_ACCEPTED, True, None))
    assert UpdateIn(dlv, STATE_ACCEPTED, True, None) in net.flat()


def test_anonymous_sender_message_goes_with_its_own_to(net):
    net.do(RemoteAddress("M0orders", "R2", True, 2), peer=AGENT)
    net.conn(9).sender(10, 9, None)
    net.flat()
    net.send(10, settled=True, to="orders", priority=7)
    [sent] = of(net.flat(), RouterDeliver)
    assert (sent.link_id, sent.to_override, sent.phase) == (data_out(100, 7), None, -1)


def test_presettled_deliveries_queued_toward_a_router_are_bounded_by_the_links_capacity(net):
    """As 1.19: a pre-settled delivery waiting for the data link's credit gave its sender
    the credit back; when the link's capacity (250) wait, the waiting ones but the first are
    dropped and counted on that link and the router."""
    net.do(RemoteAddress("M0far", "R2", True, 2), peer=AGENT)
    net.do(LinkFlow(data_out(100), 0, False))  # the data link toward R2 has no credit
    net.conn(9).sender(10, 9, "far", capacity=300, presettled=True)
    net.flat()
    credit = 0
    for i in range(252):
        net.send(10, settled=True, payload=b"d%d" % i)
        credit += sum(e.credit for e in of(net.flat(), LinkCredit))
    assert credit == 252
    link = net.link(data_out(100))
    assert (link["undeliveredCount"], link["droppedPresettledCount"]) == (3, 249)
    assert net.snap()["router"]["droppedPresettledDeliveries"] == 249
    net.do(LinkFlow(data_out(100), 10, False))
    assert [e.payload for e in of(net.flat(), RouterDeliver)] == [b"d0", b"d250", b"d251"]


def tenant_conn(h, conn_id, vhost):
    """A connection of a multiTenant listener: the worker names its vhost (the 10th item of
    the security information of ConnOpened)."""
    from common.ipc import ConnOpened
    info = [False, False, None, None, 0, False, {}, True, True, vhost]
    return h.do(ConnOpened(conn_id, "normal", "in", "127.0.0.1:1", f"c{conn_id}", "l0", "u", "",
                           info, 250, 1))


def test_anonymous_tenant_message_goes_with_the_tenants_address(net):
    # 1.19 sets x-opt-qd.to to the tenant's address (the next router cannot know the tenant)
    net.do(RemoteAddress("M0vh/orders", "R2", True, 2), peer=AGENT)
    tenant_conn(net, 9, "vh").sender(10, 9, None)
    net.flat()
    net.send(10, settled=True, to="vh/orders")  # the worker put 'to' in the space
    [sent] = of(net.flat(), RouterDeliver)
    assert (sent.link_id, sent.to_override, sent.phase) == (data_out(100), "vh/orders", -1)
    # a multicast address the same way
    net.core.set_address_config([{"prefix": "vh/mc", "distribution": "multicast"}])
    net.do(RemoteAddress("M0vh/mc.x", "R3", True, 2), peer=AGENT)
    net.send(10, settled=True, to="vh/mc.x")
    sent = of(net.flat(), RouterDeliver)
    assert [(e.to_override, e.phase) for e in sent] == [("vh/mc.x", -1)]
    # not for the router's own addresses: they keep the message's own 'to'
    net.send(10, settled=True, to="_topo/0/R3/temp.x")
    [sent] = of(net.flat(), RouterDeliver)
    assert sent.to_override is None


def test_closest_prefers_local_then_least_cost(net):
    net.do(RemoteAddress("M0q", "R2", True, 2), RemoteAddress("M0q", "R4", True, 2), peer=AGENT)
    net.conn(9).sender(10, 9, None)
    net.flat()
    net.send(10, settled=True, to="q")
    assert [e.link_id for e in of(net.flat(), RouterDeliver)] == [data_out(100)]  # R2: cost 1
    net.receiver(20, 9, "q", credit=5)
    net.flat()
    net.send(10, settled=True, to="q")
    effects = net.flat()
    assert [e.link_id for e in of(effects, Deliver)] == [20] and not of(effects, RouterDeliver)


def test_balanced_honours_valid_origins(net):
    net.do(RemoteAddress("M0b", "R4", True, 3), peer=AGENT)
    # from R2 (a valid origin for R4): forwarded toward R4
    net.do(RouterTransfer(1, data_in(100), "b", True, 4, 0, "0/R2", ["0/R2"], b"x"))
    assert [e.link_id for e in of(net.flat(), RouterDeliver)] == [data_out(200)]
    # ingress R9 is not a valid origin for R4 here: not forwarded (dropped, pre-settled)
    net.do(RouterTransfer(2, data_in(100), "b", False, 4, 0, "0/R9", ["0/R9", "0/R2"], b"y"))
    effects = net.flat()
    assert not of(effects, RouterDeliver)
    assert UpdateIn(2, STATE_RELEASED, True, None) in effects


def test_multicast_one_copy_per_next_hop_never_back_along_the_trace(net):
    net.do(RemoteAddress("M0m", "R2", True, 1), RemoteAddress("M0m", "R3", True, 1),
           RemoteAddress("M0m", "R4", True, 1), peer=AGENT)
    net.conn(9).receiver(20, 9, "m", credit=5)
    net.sender(10, 9, None)
    net.flat()
    net.send(10, settled=True, to="m")
    effects = net.flat()
    assert [e.link_id for e in of(effects, Deliver)] == [20]
    # R3 and R4 share the next hop R3: one copy there, one to R2
    assert sorted(e.link_id for e in of(effects, RouterDeliver)) == [data_out(100), data_out(200)]
    # from R2: the local consumer and R3 only
    net.do(RouterTransfer(1, data_in(100), "m", True, 4, 0, "0/R2", ["0/R2"], b"x"))
    effects = net.flat()
    assert [e.link_id for e in of(effects, Deliver)] == [20]
    assert [e.link_id for e in of(effects, RouterDeliver)] == [data_out(200)]


def test_topological_addresses_route_to_their_router(net):
    net.conn(9).sender(10, 9, None)
    net.flat()
    dlv = net.send(10, to="amqp:/_topo/0/R4/$management")
    [sent] = of(net.flat(), RouterDeliver)
    assert sent.link_id == data_out(200) and sent.to_override is None
    # an unknown router: released
    dlv2 = net.send(10, to="amqp:/_topo/0/R7/$management")
    assert UpdateIn(dlv2, STATE_RELEASED, True, None) in net.flat()
    # a sender targeted at another router's address: the address travels in x-opt-qd.to
    net.sender(11, 9, "amqp:/_topo/0/R2/$management")
    assert of(net.flat(), LinkCredit) == [LinkCredit(11, 10)]
    net.send(11)
    [sent] = of(net.flat(), RouterDeliver)
    assert (sent.link_id, sent.to_override) == (data_out(100), "amqp:/_topo/0/R2/$management")
    # a reply for this router's temporary address arriving from R3 reaches the local receiver
    net.receiver(20, 9, "amqp:/_topo/0/R1/temp.abc", credit=5)
    net.flat()
    net.do(RouterTransfer(1, data_in(200), "amqp:/_topo/0/R1/temp.abc", True, 4, 0, "0/R4",
                          ["0/R4", "0/R3"], b"reply"))
    assert [e.link_id for e in of(net.flat(), Deliver)] == [20]
    assert dlv


def test_lost_router_connection_settles_what_went_or_waited_there(net):
    net.do(RemoteAddress("M0q", "R2", True, 2), peer=AGENT)
    net.conn(9).sender(10, 9, None)
    net.flat()
    net.do(LinkFlow(data_out(100), 1, False))  # room for exactly one delivery
    net.flat()
    first = net.send(10, to="q")
    effects = net.flat()
    sent_ids = [e.dlv_id for e in of(effects, RouterDeliver)]
    second = net.send(10, to="q")  # beyond the credit limit: queued on the link
    assert of(net.flat(), RouterDeliver) == []
    net.do(ConnClosed(1, "gone"))
    effects = net.effects()
    updates = {e.dlv_id: e for e in of(effects.get(0, []), UpdateIn)}
    assert updates[first].state == STATE_MODIFIED and updates[first].settled
    assert updates[second].state == STATE_RELEASED
    assert len(sent_ids) == 1
    assert effects[AGENT] == [RouterLinkDown(1)]


def test_remote_address_without_rule_takes_the_hint(net):
    net.do(RemoteAddress("M0h", "R2", True, 1), peer=AGENT)
    assert net.addr("M0h")["distribution"] == "multicast"
    net.do(RemoteAddress("M0h", "R2", False, -1), peer=AGENT)
    assert net.addr("M0h") is None


def test_an_agent_that_comes_late_hears_what_it_missed(core_cls):
    h = Harness(core_cls, mode="interior")
    h.do(ConnOpenedFor(1, "R2"))
    _inter_router_links(h, 1, 100)
    h.conn(9).receiver(20, 9, "orders", credit=5)
    h.effects()
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    assert h.effects()[AGENT] == [RouterLinkUp(1, 1, "R2"), LocalAddress("M0orders", True, 3)]


def test_deliveries_waiting_for_a_lost_neighbour_are_released(net):
    """R2 stops answering HELLOs (frozen) but its connection stays: once the routing protocol
    drops it, what waited on its data links goes back to the senders, with their credit."""
    net.do(RemoteAddress("M0q", "R2", True, 2), RemoteAddress("M0q", "R4", True, 2), peer=AGENT)
    net.conn(9).sender(10, 9, None)
    net.do(LinkFlow(data_out(100), 0, False))  # R2 gives no more credit
    net.flat()
    waiting = net.send(10, to="q")
    assert of(net.flat(), RouterDeliver) == []
    net.do(RouteUpdate({"R3": "R3", "R4": "R3"}, {"R3": 1, "R4": 2}, {"R3": [], "R4": []},
                       {"R3": 5}), peer=AGENT)
    effects = net.flat()
    assert UpdateIn(waiting, STATE_RELEASED, True, None) in effects
    assert LinkCredit(10, 1) in effects
    net.send(10, to="q")  # new traffic takes the new route: R4 through R3
    assert [e.link_id for e in of(net.flat(), RouterDeliver)] == [data_out(200)]


def test_a_phased_address_travels_with_its_phase(core_cls):
    h = Harness(core_cls, mode="interior", addresses=[{"prefix": "wp", "ingressPhase": 3}])
    h.do(PeerHello(AGENT, "agent", 1), peer=AGENT)
    h.do(ConnOpenedFor(1, "R2"))
    _inter_router_links(h, 1, 100)
    h.do(LinkFlow(data_out(100), 10, False))
    h.do(RouteUpdate({"R2": "R2"}, {"R2": 1}, {"R2": []}, {"R2": 1}),
         RemoteAddress("M3wp.q", "R2", True, 2), peer=AGENT)
    h.conn(9).sender(10, 9, "wp.q")
    h.effects()
    h.send(10, settled=True)
    [sent] = of(h.flat(), RouterDeliver)
    assert (sent.to_override, sent.phase) == ("wp.q", 3)


def test_a_restarted_agent_hears_of_the_router_links_and_addresses_again(net):
    net.conn(9).receiver(20, 9, "orders", credit=5)  # a local consumer: announced to the agent
    net.effects()
    net.core.peer_lost(AGENT)  # the supervisor's PeerLost: the agent process died
    assert net.core.agent_peer is None
    net.do(PeerHello(AGENT, "agent", 2), peer=AGENT)  # its successor says hello
    told = net.effects()[AGENT]
    assert set(of(told, RouterLinkUp)) == {RouterLinkUp(1, 1, "R2"), RouterLinkUp(5, 1, "R3")}
    assert LocalAddress("M0orders", True, 3) in told
    # the routes the dead agent computed still stand: traffic to R4 still goes through R3
    assert net.core.routers["R4"].next_hop == "R3"


def test_sender_settling_a_delivery_queued_toward_a_router_takes_it_off_that_link(net):
    net.do(RemoteAddress("M0q", "R2", True, 2), peer=AGENT)
    net.conn(9).sender(10, 9, None, capacity=5)
    net.flat()
    net.do(LinkFlow(data_out(100), 0, False))  # no credit toward R2: deliveries wait there
    first = net.send(10, to="q")
    second = net.send(10, to="q")
    assert of(net.flat(), RouterDeliver) == []
    assert net.link(data_out(100))["undeliveredCount"] == 2
    net.do(SettleIn(first, STATE_ACCEPTED))
    assert of(net.flat(), LinkCredit) == [LinkCredit(10, 1)]  # its credit back at once
    assert net.link(data_out(100))["undeliveredCount"] == 1
    net.do(LinkFlow(data_out(100), 10, False))
    assert [e.payload for e in of(net.flat(), RouterDeliver)] == [b"m%d" % second]


def test_tracked_deliveries_count_balanced_ones_unsettled_toward_routers(net):
    """1.19's trackedDeliveries: an address's unsettled (balanced) deliveries sent on toward
    other routers and not settled yet; pre-settled ones are not tracked."""
    def tracked(key):
        return {a["key"]: a for a in net.core.snapshot()["addresses"]}[key]["trackedDeliveries"]

    net.do(RemoteAddress("M0orders", "R4", True, 3), peer=AGENT)
    net.conn(9).sender(10, 9, "orders")
    net.flat()
    net.send(10)
    net.send(10)
    net.send(10, settled=True)
    sent = [e for e in of(net.flat(), RouterDeliver) if not e.settled]
    assert len(sent) == 2 and tracked("M0orders") == 2
    net.do(Disposition(sent[0].dlv_id, STATE_ACCEPTED, True, None))
    net.flat()
    assert tracked("M0orders") == 1
