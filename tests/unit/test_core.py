"""The router core, command by command, against both builds (pure Python and compiled).

Also holds the build parameters and the small :class:`Harness` the other core tests import.
"""
import pytest

from common import ipc

from router_core import core as pure_core
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_RECEIVED, STATE_REJECTED,
    STATE_RELEASED, ChildStatus, ConnClosed, ConnOpened, Deliver, Disposition, Drained, IpcError,
    LinkAttach, LinkCredit, LinkDetach, LinkFlow, LinkOpen, LinkRefuse, PeerHello, RouterTransfer,
    SettleIn, SettleOut, Transfer, UpdateIn)

try:
    from router_core import _core as compiled_core
except ImportError:  # not built: python setup.py build_ext --inplace
    compiled_core = None

NOT_BUILT = "router_core._core is not built (ROUTER_ONLY_EXT=router_core._core python setup.py " \
            "build_ext --inplace)"
BUILDS = [
    pytest.param(pure_core.RouterCore, id="pure"),
    pytest.param(getattr(compiled_core, "RouterCore", None), id="compiled",
                 marks=pytest.mark.skipif(compiled_core is None, reason=NOT_BUILT)),
]
MODIFIED_FAILED = {"failed": True, "undeliverable": False}


@pytest.fixture(params=BUILDS)
def core_cls(request):
    return request.param


class Harness:
    """A core plus shorthands for the commands a worker would send."""

    def __init__(self, cls, **kwargs):
        kwargs.setdefault("seed", 7)
        self.core = cls("R1", **kwargs)
        self._dlv = 1000

    def do(self, *cmds, peer=0):
        self.core.handle_batch(peer, list(cmds), 0.0)
        return self

    def conn(self, conn_id, peer=0, role="normal", cost=1):
        return self.do(ConnOpened(conn_id, role, "in", "127.0.0.1:1", f"c{conn_id}", "l0", "u",
                                  "", False, 250, cost), peer=peer)

    def sender(self, link_id, conn_id, address, capacity=10, presettled=False, dynamic=False,
               peer=0, link_type="endpoint"):
        return self.do(LinkAttach(link_id, conn_id, DIR_IN, f"s{link_id}", address, dynamic,
                                  presettled, capacity, link_type), peer=peer)

    def receiver(self, link_id, conn_id, address, capacity=10, dynamic=False, credit=None,
                 peer=0, link_type="endpoint"):
        self.do(LinkAttach(link_id, conn_id, DIR_OUT, f"r{link_id}", address, dynamic, False,
                           capacity, link_type), peer=peer)
        if credit is not None:
            self.do(LinkFlow(link_id, credit, False), peer=peer)
        return self

    def send(self, link_id, settled=False, to=None, priority=4, payload=None, peer=0):
        self._dlv += 1
        self.do(Transfer(self._dlv, link_id, to, settled, priority,
                         payload if payload is not None else b"m%d" % self._dlv), peer=peer)
        return self._dlv

    def effects(self):
        return self.core.take_effects()

    def flat(self, peer=0):
        return self.core.take_effects().get(peer, [])

    def snap(self):
        return self.core.snapshot()

    def link(self, link_id):
        return next(v for v in self.snap()["links"] if v["identity"] == str(link_id))

    def addr(self, key):
        return next((v for v in self.snap()["addresses"] if v["key"] == key), None)


@pytest.fixture
def h(core_cls):
    return Harness(core_cls)


def test_builds_are_what_they_claim():
    assert pure_core.__file__.endswith(".py")
    if compiled_core is None:
        pytest.skip(NOT_BUILT)
    assert compiled_core.__file__.endswith(".so")
    assert compiled_core.RouterCore.__module__ == "router_core._core"


# ---- attach ----------------------------------------------------------------------------------
def test_sender_stalls_until_first_consumer(h):
    h.conn(1).sender(10, 1, "q", capacity=5)
    assert h.flat() == [LinkOpen(10, "q")]
    assert h.link(10)["creditAvailable"] == 0
    h.receiver(20, 1, "amqp:/q")
    assert h.flat() == [LinkOpen(20, "amqp:/q"), LinkCredit(10, 5)]
    h.receiver(21, 1, "q")
    assert h.flat() == [LinkOpen(21, "q")]  # credit is granted once
    h.do(LinkDetach(20, True, ""), LinkDetach(21, True, ""))
    assert h.flat() == []  # and never revoked
    h.sender(11, 1, "q", capacity=3)
    assert h.flat() == [LinkOpen(11, "q")]


def test_sender_with_consumer_and_anonymous_get_credit_at_attach(h):
    h.conn(1).receiver(20, 1, "q").sender(10, 1, "q", capacity=4).sender(11, 1, None, capacity=6)
    assert h.flat() == [LinkOpen(20, "q"), LinkOpen(10, "q"), LinkCredit(10, 4),
                        LinkOpen(11, None), LinkCredit(11, 6)]


@pytest.mark.parametrize("role", ["inter-router", "edge"])
def test_interior_roles_refused(h, role):
    h.conn(1, role=role).sender(10, 1, "q")
    [effect] = h.flat()
    assert isinstance(effect, LinkRefuse) and effect.condition == "amqp:not-allowed"
    assert h.snap()["router"]["linkCount"] == 0


@pytest.mark.parametrize("link_type", ["router-control", "inter-router"])
def test_router_links_refused_on_a_normal_connection(core_cls, link_type):
    h = Harness(core_cls, mode="interior")
    h.conn(1).sender(10, 1, None, link_type=link_type)
    [effect] = h.flat()
    assert isinstance(effect, LinkRefuse) and effect.condition == "amqp:not-allowed"
    assert "inter-router" in effect.description
    assert h.snap()["router"]["linkCount"] == 0


def test_inter_router_refused_in_standalone_mode(h):
    h.conn(1, role="inter-router").sender(10, 1, None, link_type="router-control")
    [effect] = h.flat()
    assert isinstance(effect, LinkRefuse) and effect.condition == "amqp:not-allowed"
    assert h.snap()["router"]["mode"] == "standalone"


def test_endpoint_links_refused_on_an_inter_router_connection(core_cls):
    h = Harness(core_cls, mode="interior")
    h.conn(1, role="inter-router").sender(10, 1, "q").receiver(11, 1, "q")
    effects = h.flat()
    assert [type(e) for e in effects] == [LinkRefuse, LinkRefuse]
    assert all(e.condition == "amqp:not-allowed" for e in effects)
    assert h.snap()["router"]["linkCount"] == 0


def _inter_router_links(h, conn_id=1, first=100):
    """Attach what the connecting router creates: 2 control links, then in/out per priority."""
    h.sender(first, conn_id, None, capacity=250, link_type="router-control")
    h.receiver(first + 1, conn_id, None, capacity=250, link_type="router-control")
    for p in range(10):
        h.sender(first + 2 + 2 * p, conn_id, None, capacity=250, link_type="inter-router")
        h.receiver(first + 3 + 2 * p, conn_id, None, capacity=250, link_type="inter-router")


def test_inter_router_links_classified_with_priorities(core_cls):
    h = Harness(core_cls, mode="interior")
    h.conn(1, role="inter-router", cost=3)
    _inter_router_links(h)
    effects = h.flat()
    opens = [e for e in effects if isinstance(e, LinkOpen)]
    assert [e.link_id for e in opens] == list(range(100, 122))
    assert all(e.address is None for e in opens)
    # inbound router links get their capacity as credit at once; outbound ones none to give
    credits = {e.link_id: e.credit for e in effects if isinstance(e, LinkCredit)}
    assert credits == {i: 250 for i in range(100, 122, 2)}
    snap = h.snap()
    assert snap["router"]["mode"] == "interior"
    assert snap["connections"][0]["cost"] == 3 and snap["connections"][0]["role"] == "inter-router"
    views = {int(v["identity"]): v for v in snap["links"]}
    assert views[100]["linkType"] == "router-control" and views[100]["linkDir"] == "in"
    assert views[101]["linkType"] == "router-control" and views[101]["linkDir"] == "out"
    for p in range(10):
        for link_id, direction in ((102 + 2 * p, "in"), (103 + 2 * p, "out")):
            v = views[link_id]
            assert (v["linkType"], v["linkDir"], v["priority"]) == ("inter-router", direction, p)
            assert v["owningAddr"] is None
    # no address but the routing protocol's own (1.19's built-in rows, corestate) and the
    # heartbeat server's (every mode)
    assert sorted(a["key"] for a in snap["addresses"]) == [
        "Lqdhello", "Lqdrouter", "Lqdrouter.ma", "M0_$qd.edge_heartbeat", "Tqdrouter",
        "Tqdrouter.ma"]


def test_inter_router_deliveries_reach_local_consumers(core_cls):
    h = Harness(core_cls, mode="interior")
    h.conn(1, role="inter-router")
    _inter_router_links(h)
    h.conn(2).receiver(20, 2, "q", credit=100)
    h.flat()
    h.do(RouterTransfer(1, 102, "q", True, 4, 0, "0/R2", ["0/R2"], b"a"),
         RouterTransfer(2, 104, "q", False, 4, 0, "0/R2", ["0/R2"], b"b"),
         RouterTransfer(3, 104, "nowhere", False, 4, 0, "0/R2", ["0/R2"], b"c"))
    effects = h.flat()
    assert [(e.link_id, bytes(e.payload)) for e in effects if isinstance(e, Deliver)] == [
        (20, b"a"), (20, b"b")]
    assert UpdateIn(3, STATE_RELEASED, True, None) in effects
    # credit comes back in slices of an eighth of the window (250 // 8 = 31 deliveries)
    assert not [e for e in effects if isinstance(e, LinkCredit)]
    assert h.link(104)["releasedCount"] == 1
    for n in range(28):  # 2 + 28: one short of a slice
        h.do(RouterTransfer(10 + n, 104, "q", True, 4, 0, None, [], b"x"))
    assert [e for e in h.flat() if isinstance(e, LinkCredit)] == []
    h.do(RouterTransfer(99, 104, "q", True, 4, 0, None, [], b"x"))
    assert [e for e in h.flat() if isinstance(e, LinkCredit)] == [LinkCredit(104, 31)]
    # flow and drain on an outbound router link, then the links and connection go away
    h.do(LinkFlow(103, 5, True))
    assert h.flat() == [Drained(103)]
    h.do(LinkDetach(103, True, ""), ConnClosed(1, ""))
    assert all(v["connectionId"] != 1 for v in h.snap()["links"])


def test_refusals(h):
    h.sender(10, 99, "q")
    [effect] = h.flat()
    assert isinstance(effect, LinkRefuse) and effect.link_id == 10
    h.conn(1).receiver(20, 1, None)
    [effect] = h.flat()
    assert isinstance(effect, LinkRefuse) and effect.link_id == 20


def test_dynamic_source_routes_back(h):
    h.conn(1).receiver(20, 1, None, dynamic=True, credit=5)
    [opened] = h.flat()
    assert opened.link_id == 20 and opened.address.startswith("amqp:/_topo/0/R1/temp.")
    key = "L" + opened.address[len("amqp:/_topo/0/R1/"):]
    assert h.link(20)["owningAddr"] == key
    h.sender(10, 1, None)
    h.flat()
    h.send(10, settled=True, to=opened.address, payload=b"reply")
    assert h.flat()[0] == Deliver(1, 20, True, b"reply")


def test_dynamic_target(h):
    h.conn(1).sender(10, 1, None, dynamic=True)
    [opened] = h.flat()
    assert opened.address.startswith("amqp:/_$temp.")


def test_effects_go_to_the_owning_peer(h):
    h.conn(1, peer=0).conn(2, peer=1)
    h.receiver(20, 2, "q", credit=5, peer=1).sender(10, 1, "q", peer=0)
    assert h.effects() == {1: [LinkOpen(20, "q")], 0: [LinkOpen(10, "q"), LinkCredit(10, 10)]}
    dlv = h.send(10, peer=0)
    assert h.effects() == {1: [Deliver(1, 20, False, b"m%d" % dlv)]}
    h.do(Disposition(1, STATE_ACCEPTED, True, None), peer=1)
    # the sender's credit for an unsettled delivery comes back with its settlement
    assert h.effects() == {0: [UpdateIn(dlv, STATE_ACCEPTED, True, None), LinkCredit(10, 1)]}


def test_credit_coalesced_where_first_placed(h):
    h.conn(1).receiver(20, 1, "q", credit=100).sender(10, 1, "q", capacity=2)
    h.flat()
    h.send(10, settled=True)
    h.do(LinkFlow(20, 101, False))
    h.send(10, settled=True)
    effects = h.flat()
    assert [type(e) for e in effects] == [Deliver, LinkCredit, Deliver]
    assert effects[1] == LinkCredit(10, 2)


def test_the_agents_reply_link_gets_its_credit_back_in_slices(h):
    """The agent's anonymous sender (its replies) is credited its whole window at attach and
    given credit back an eighth of it at a time (250 // 8 = 31 replies), not a LinkCredit
    after every reply: each one is a batch to the agent and a wake-up of it. A client's
    anonymous sender still gets each credit back (coalesced per flush)."""
    h.conn(9, peer=1, role="internal").sender(90, 9, None, capacity=250, peer=1)
    h.conn(1).receiver(20, 1, "reply", credit=250).sender(10, 1, None, capacity=250)
    assert LinkCredit(90, 250) in h.effects()[1]
    for n in range(30):
        h.send(90, settled=True, to="reply", peer=1)
    effects = h.effects()
    assert [e for e in effects.get(1, []) if isinstance(e, LinkCredit)] == []
    assert len([e for e in effects[0] if isinstance(e, Deliver)]) == 30
    h.send(90, settled=True, to="reply", peer=1)
    assert [e for e in h.effects()[1] if isinstance(e, LinkCredit)] == [LinkCredit(90, 31)]
    h.send(10, settled=True, to="reply")
    assert [e for e in h.flat() if isinstance(e, LinkCredit)] == [LinkCredit(10, 1)]


# ---- routing and settlement ------------------------------------------------------------------
def test_no_route_releases_and_drops(h):
    h.conn(1).sender(10, 1, None, capacity=3)
    h.flat()
    dlv = h.send(10, to="nowhere")
    assert h.flat() == [UpdateIn(dlv, STATE_RELEASED, True, None), LinkCredit(10, 1)]
    h.send(10, settled=True, to="nowhere")
    h.send(10, settled=True)  # no 'to' at all
    assert h.flat() == [LinkCredit(10, 2)]
    router = h.snap()["router"]
    assert router["droppedPresettledDeliveries"] == 2
    assert router["releasedDeliveries"] == 1 and router["deliveriesIngress"] == 3
    assert router["presettledDeliveries"] == 2


def test_anycast_settlement_path(h):
    h.conn(1).receiver(20, 1, "q", credit=5).sender(10, 1, "q")
    h.flat()
    dlv = h.send(10, payload=b"x")
    assert h.flat() == [Deliver(1, 20, False, b"x")]  # its credit: once it is settled
    received = {"section_number": 0, "section_offset": 3}
    h.do(Disposition(1, STATE_RECEIVED, False, received))
    # non-terminal: on to the sender as it is (1.19 moves every delivery state to the peer)
    assert h.flat() == [UpdateIn(dlv, STATE_RECEIVED, False, received)]
    h.do(Disposition(1, STATE_REJECTED, False, {"condition": "x:y", "description": "no"}))
    assert h.flat() == [UpdateIn(dlv, STATE_REJECTED, False,
                                 {"condition": "x:y", "description": "no"})]
    h.do(SettleIn(dlv, STATE_REJECTED))
    assert h.flat() == [LinkCredit(10, 1), SettleOut(1, STATE_REJECTED)]
    h.do(Disposition(1, STATE_ACCEPTED, True, None))  # already forgotten
    assert h.flat() == []
    snap = h.snap()
    assert snap["router"]["rejectedDeliveries"] == 1
    assert h.link(20)["rejectedCount"] == 1 and h.link(10)["rejectedCount"] == 1
    assert h.link(20)["unsettledCount"] == 0 and h.link(10)["unsettledCount"] == 0


def test_extension_state_goes_back_to_the_sender(h):
    """A delivery state of no AMQP type (descriptor 999) and its value (AMQP-encoded bytes the
    core passes unread) reach the sender, unsettled and when the receiver settles with it."""
    h.conn(1).receiver(20, 1, "q", credit=5).sender(10, 1, "q")
    h.flat()
    dlv = h.send(10, payload=b"x")
    h.flat()
    info = {"data": b"\xc0\x03\x01\x54\x2a"}
    h.do(Disposition(1, 999, False, info))
    assert h.flat() == [UpdateIn(dlv, 999, False, info)]
    h.do(Disposition(1, 999, True, info))
    assert h.flat() == [UpdateIn(dlv, 999, True, info), LinkCredit(10, 1)]
    assert h.link(10)["unsettledCount"] == 0 and h.link(20)["unsettledCount"] == 0


def test_received_then_settled_without_outcome_is_accepted(h):
    h.conn(1).receiver(20, 1, "q", credit=5).sender(10, 1, "q")
    h.flat()
    dlv = h.send(10, payload=b"x")
    h.flat()
    h.do(Disposition(1, STATE_RECEIVED, True, {"section_number": 0, "section_offset": 0}))
    assert h.flat() == [UpdateIn(dlv, STATE_ACCEPTED, True, None), LinkCredit(10, 1)]


def test_receiver_settles_first(h):
    h.conn(1).receiver(20, 1, "q", credit=5).sender(10, 1, "q")
    h.flat()
    dlv = h.send(10)
    h.flat()
    assert h.link(10)["unsettledCount"] == 1 and h.link(20)["unsettledCount"] == 1
    h.do(Disposition(1, STATE_ACCEPTED, True, None))
    assert h.flat() == [UpdateIn(dlv, STATE_ACCEPTED, True, None), LinkCredit(10, 1)]
    h.do(SettleIn(dlv, STATE_ACCEPTED))
    assert h.flat() == []
    router = h.snap()["router"]
    assert (router["acceptedDeliveries"], router["deliveriesEgress"]) == (1, 1)


def test_never_beyond_credit_then_resume_in_priority_order(h):
    h.conn(1).receiver(20, 1, "q", credit=1).sender(10, 1, "q", capacity=5)
    h.flat()
    first = h.send(10, payload=b"a")
    h.send(10, payload=b"low", priority=1)
    h.send(10, payload=b"high", priority=8)
    h.send(10, payload=b"low2", priority=1)
    effects = h.flat()
    assert effects == [Deliver(1, 20, False, b"a")]
    # (as 1.19: what waits counts on the receiver's link, not the sender's)
    assert h.link(20)["undeliveredCount"] == 3 and h.link(10)["undeliveredCount"] == 0
    assert h.link(20)["creditAvailable"] == 0
    h.do(LinkFlow(20, 3, False))
    assert h.flat() == [Deliver(2, 20, False, b"high"), Deliver(3, 20, False, b"low")]
    h.do(LinkFlow(20, 10, False))
    assert h.flat() == [Deliver(4, 20, False, b"low2")]
    # unsettled: the sender's credit comes back as they are settled (coalesced per flush)
    for out_id in (1, 2, 3, 4):
        h.do(Disposition(out_id, STATE_ACCEPTED, True, None))
    assert [e for e in h.flat() if isinstance(e, LinkCredit)] == [LinkCredit(10, 4)]
    assert first


def test_address_priority_overrides_message_priority(core_cls):
    h = Harness(core_cls, addresses=[{"prefix": "p", "distribution": "closest", "priority": 3}])
    h.conn(1).receiver(20, 1, "p.x", credit=0).sender(10, 1, "p.x")
    h.flat()
    h.send(10, payload=b"1", priority=0)
    h.send(10, payload=b"2", priority=9)
    h.do(LinkFlow(20, 2, False))
    delivered = [e.payload for e in h.flat() if isinstance(e, Deliver)]
    assert delivered == [b"1", b"2"]  # same priority 3 for both: FIFO
    assert h.addr("M0p.x")["priority"] == 3 and h.addr("M0p.x")["distribution"] == "closest"


def test_drain(h):
    h.conn(1).receiver(20, 1, "q").sender(10, 1, "q")
    h.flat()
    h.do(LinkFlow(20, 5, True))
    assert h.flat() == [Drained(20)]
    assert h.link(20)["creditAvailable"] == 0
    h.send(10, settled=True)
    # held (the drained credit is gone); pre-settled, its credit is back at once (1.19)
    assert [type(e) for e in h.flat()] == [LinkCredit]
    h.do(LinkFlow(20, 7, True))  # one held delivery, then drained
    effects = h.flat()
    assert [type(e) for e in effects] == [Deliver, Drained]
    assert h.link(20)["creditAvailable"] == 0


def test_held_presettled_deliveries_give_credit_back_and_wait_within_the_receivers_capacity(h):
    """As 1.19: a pre-settled delivery's credit comes back as soon as it has a destination,
    waiting or not; a receiver's undelivered deliveries are bounded by its link's capacity:
    when that many wait, the waiting pre-settled ones but the next are dropped, counted on
    the receiver's link and the router. What waits shows as the receiver's undeliveredCount."""
    h.conn(1).receiver(20, 1, "q", capacity=20, credit=10).sender(10, 1, "q", capacity=20,
                                                                  presettled=True)
    h.flat()
    credit = 0
    sent = []
    for i in range(40):
        h.send(10, settled=True, payload=b"m%d" % i)
        for e in h.flat():
            if isinstance(e, LinkCredit):
                credit += e.credit
            elif isinstance(e, Deliver):
                sent.append(e.payload)
    assert credit == 40 and sent == [b"m%d" % i for i in range(10)]
    link = h.link(20)
    assert (link["undeliveredCount"], link["droppedPresettledCount"]) == (11, 19)
    assert (link["deliveryCount"], link["presettledCount"]) == (10, 29)  # dropped count too
    assert h.link(10)["undeliveredCount"] == 0 and h.link(10)["droppedPresettledCount"] == 0
    assert h.snap()["router"]["droppedPresettledDeliveries"] == 19
    h.do(LinkFlow(20, 100, False))
    sent = [e.payload for e in h.flat() if isinstance(e, Deliver)]
    assert sent == [b"m10"] + [b"m%d" % i for i in range(30, 40)]
    assert h.link(20)["undeliveredCount"] == 0


def test_held_presettled_deliveries_of_a_receiver_that_goes_count_on_the_router_only(h):
    h.conn(1).receiver(20, 1, "q", credit=0).sender(10, 1, "q", presettled=True)
    h.flat()
    for _ in range(3):
        h.send(10, settled=True)
    h.do(LinkDetach(20, True, ""))
    assert h.snap()["router"]["droppedPresettledDeliveries"] == 3
    assert h.link(10)["droppedPresettledCount"] == 0  # (1.19: the sender's link had a path)


def test_held_unsettled_deliveries_count_as_the_receivers_undelivered(h):
    h.conn(1).receiver(20, 1, "q", capacity=20, credit=10).sender(10, 1, "q", capacity=20)
    h.flat()
    for i in range(20):
        h.send(10)
    credit = sum(e.credit for e in h.flat() if isinstance(e, LinkCredit))
    assert credit == 0  # unsettled: credit comes back at settlement
    link = h.link(20)
    assert (link["undeliveredCount"], link["unsettledCount"]) == (10, 10)
    assert h.link(10)["undeliveredCount"] == 0 and h.link(10)["unsettledCount"] == 20
    h.receiver(21, 1, "q", capacity=20, credit=0)  # a second consumer shares what waits
    assert h.link(20)["undeliveredCount"] + h.link(21)["undeliveredCount"] == 10


def test_closest_round_robin_among_consumers_with_credit(core_cls):
    h = Harness(core_cls, default_distribution="closest")
    h.conn(1).receiver(20, 1, "q", credit=10).receiver(21, 1, "q", credit=10)
    h.receiver(22, 1, "q", credit=0).sender(10, 1, "q", capacity=10)
    h.flat()
    for _ in range(4):
        h.send(10, settled=True)
    links = [e.link_id for e in h.flat() if isinstance(e, Deliver)]
    assert links == [20, 21, 20, 21]


def test_balanced_prefers_least_outstanding(h):
    h.conn(1).receiver(20, 1, "q", capacity=10, credit=10).receiver(21, 1, "q", capacity=10,
                                                                     credit=10)
    h.sender(10, 1, "q", capacity=10)
    h.flat()
    for _ in range(3):
        h.send(10)
    links = [e.link_id for e in h.flat() if isinstance(e, Deliver)]
    assert links == [20, 21, 20]
    # settle everything on 20: it now has fewer outstanding than 21
    h.do(Disposition(1, STATE_ACCEPTED, True, None), Disposition(3, STATE_ACCEPTED, True, None))
    h.flat()
    h.send(10)
    h.send(10)
    links = [e.link_id for e in h.flat() if isinstance(e, Deliver)]
    assert links == [20, 21]  # 20 had 0 outstanding vs 1; then 1 vs 1: a tie, round robin


def test_balanced_relative_to_capacity(h):
    h.conn(1).receiver(20, 1, "q", capacity=2, credit=10).receiver(21, 1, "q", capacity=100,
                                                                    credit=10)
    h.sender(10, 1, "q")
    h.flat()
    for _ in range(4):
        h.send(10)
    links = [e.link_id for e in h.flat() if isinstance(e, Deliver)]
    assert links == [20, 21, 21, 21]


UNAVAILABLE_REJECT = {"condition": "amqp:not-found",
                      "description": "Deliveries cannot be sent to an unavailable address"}


def test_unavailable_distribution(core_cls):
    """1.19: a sender or receiver on an unavailable address is refused (amqp:not-found "Node
    not found"); an anonymous sender's delivery to one is REJECTED amqp:not-found."""
    h = Harness(core_cls, addresses=[{"prefix": "u", "distribution": "unavailable"}])
    h.conn(1).receiver(20, 1, "u", credit=5).sender(21, 1, "u.x").sender(10, 1, None)
    assert h.flat() == [LinkRefuse(20, "amqp:not-found", "Node not found"),
                        LinkRefuse(21, "amqp:not-found", "Node not found"),
                        LinkOpen(10, None), LinkCredit(10, 10)]
    dlv = h.send(10, to="u")
    h.send(10, settled=True, to="u")
    other = h.send(10, to="v")  # available, no consumer: RELEASED
    assert h.flat() == [UpdateIn(dlv, STATE_REJECTED, True, UNAVAILABLE_REJECT),
                        LinkCredit(10, 3), UpdateIn(other, STATE_RELEASED, True, None)]
    router = h.snap()["router"]
    assert router["rejectedDeliveries"] == 1 and router["droppedPresettledDeliveries"] == 1
    assert h.snap()["links"][0]["identity"] == "10"  # nothing else attached


def test_default_distribution_unavailable(core_cls):
    h = Harness(core_cls, default_distribution="unavailable",
                addresses=[{"prefix": "ok", "distribution": "balanced"}])
    h.conn(1)
    h.receiver(20, 1, "q").receiver(21, 1, "_local/x").receiver(22, 1, "ok.q")
    h.receiver(23, 1, None, dynamic=True).receiver(24, 1, "$management")
    h.sender(10, 1, "amqp:/_topo/0/R1/q").sender(11, 1, None)
    effects = h.flat()
    refused = [e.link_id for e in effects if isinstance(e, LinkRefuse)]
    assert refused == [20, 21, 10]
    assert all(e == LinkRefuse(e.link_id, "amqp:not-found", "Node not found")
               for e in effects if isinstance(e, LinkRefuse))
    dlv = h.send(11, to="elsewhere")
    assert h.flat() == [UpdateIn(dlv, STATE_REJECTED, True, UNAVAILABLE_REJECT),
                        LinkCredit(11, 1)]


def test_unavailable_does_not_apply_to_the_agents_connection(core_cls):
    h = Harness(core_cls, default_distribution="unavailable")
    h.conn(1, role="internal").receiver(20, 1, "_local/$management")
    assert h.flat() == [LinkOpen(20, "_local/$management")]


def test_receiver_on_another_routers_address_is_refused(h):
    h.conn(1).receiver(20, 1, "amqp:/_topo/0/R9/x").receiver(21, 1, "_topo/0/R1/x")
    assert h.flat() == [LinkRefuse(20, "qd:no-route-to-dest", "No route to the destination node"),
                        LinkOpen(21, "_topo/0/R1/x")]


def test_coordinator_target_is_refused(core_cls):
    """Nothing here coordinates transactions: 1.19's condition and text, whatever the
    distribution."""
    for dist in ("balanced", "unavailable"):
        h = Harness(core_cls, default_distribution=dist)
        h.conn(1).do(LinkAttach(10, 1, DIR_IN, "txn", None, False, False, 10, "endpoint",
                                ipc.terminus(ipc.TERMINUS_SOURCE, None),
                                ipc.terminus(ipc.TERMINUS_COORDINATOR, None), [0, 0]))
        assert h.flat() == [LinkRefuse(
            10, "amqp:precondition-failed",
            "The router can't coordinate transactions by itself, a linkRoute to a coordinator "
            "must be configured to use transactions.")]
        assert h.snap()["links"] == []


# ---- multicast -------------------------------------------------------------------------------
@pytest.mark.parametrize("outcomes, final", [
    ([STATE_ACCEPTED, STATE_ACCEPTED], STATE_ACCEPTED),
    ([STATE_ACCEPTED, STATE_REJECTED], STATE_REJECTED),
    ([STATE_RELEASED, STATE_ACCEPTED], STATE_ACCEPTED),
    ([STATE_MODIFIED, STATE_RELEASED], STATE_MODIFIED),
    ([STATE_RELEASED, STATE_RELEASED], STATE_RELEASED),
    ([STATE_MODIFIED, STATE_ACCEPTED, STATE_REJECTED], STATE_REJECTED),
])
def test_multicast_outcome_precedence(core_cls, outcomes, final):
    h = Harness(core_cls, default_distribution="multicast")
    h.conn(1)
    for n in range(len(outcomes)):
        h.receiver(20 + n, 1, "m", credit=5)
    h.sender(10, 1, "m")
    h.flat()
    dlv = h.send(10)
    delivers = [e for e in h.flat() if isinstance(e, Deliver)]
    assert sorted(d.link_id for d in delivers) == list(range(20, 20 + len(outcomes)))
    for d, state in zip(delivers[:-1], outcomes[:-1]):
        h.do(Disposition(d.dlv_id, state, True, None))
        assert h.flat() == []  # waits for every copy
    h.do(Disposition(delivers[-1].dlv_id, outcomes[-1], True, None))
    assert h.flat() == [UpdateIn(dlv, final, True, None), LinkCredit(10, 1)]


def test_multicast_terminal_unsettled_copies_settled_at_the_end(core_cls):
    h = Harness(core_cls, default_distribution="multicast")
    h.conn(1).receiver(20, 1, "m", credit=5).receiver(21, 1, "m", credit=5).sender(10, 1, "m")
    h.flat()
    dlv = h.send(10)
    h.flat()
    h.do(Disposition(1, STATE_ACCEPTED, False, None))
    assert h.flat() == []
    h.do(Disposition(2, STATE_ACCEPTED, True, None))
    assert h.flat() == [UpdateIn(dlv, STATE_ACCEPTED, True, None), LinkCredit(10, 1),
                        SettleOut(1, STATE_ACCEPTED)]


def test_multicast_presettled_and_per_link_queues(core_cls):
    h = Harness(core_cls, default_distribution="multicast")
    h.conn(1).receiver(20, 1, "m", credit=5).receiver(21, 1, "m", credit=0)
    h.sender(10, 1, "m", capacity=2)
    h.flat()
    h.send(10, settled=True, payload=b"p")
    # as 1.19: a pre-settled delivery's credit is back once it has destinations, queued or not
    assert h.flat() == [Deliver(1, 20, True, b"p"), LinkCredit(10, 1)]
    assert h.link(21)["undeliveredCount"] == 1
    h.do(LinkFlow(21, 1, False))
    assert h.flat() == [Deliver(2, 21, True, b"p")]


def test_multicast_presettled_copies_queued_are_bounded_by_the_links_capacity(core_cls):
    """As 1.19: copies wait on a receiver's link up to its capacity; then the waiting
    pre-settled copies but the first are dropped, counted on that link and the router."""
    h = Harness(core_cls, default_distribution="multicast")
    h.conn(1).receiver(20, 1, "m", credit=50).receiver(21, 1, "m", capacity=3, credit=0)
    h.sender(10, 1, "m", capacity=10)
    h.flat()
    for i in range(5):
        h.send(10, settled=True, payload=b"p%d" % i)
    effects = h.flat()
    assert [e.payload for e in effects if isinstance(e, Deliver)] == [
        b"p%d" % i for i in range(5)]
    assert sum(e.credit for e in effects if isinstance(e, LinkCredit)) == 5
    link = h.link(21)
    assert (link["undeliveredCount"], link["droppedPresettledCount"]) == (3, 2)
    assert h.snap()["router"]["droppedPresettledDeliveries"] == 2
    h.do(LinkFlow(21, 10, False))
    assert [e.payload for e in h.flat() if isinstance(e, Deliver)] == [b"p0", b"p3", b"p4"]


def test_multicast_lost_receiver_counts_released_or_modified(core_cls):
    h = Harness(core_cls, default_distribution="multicast")
    h.conn(1).receiver(20, 1, "m", credit=5).receiver(21, 1, "m", credit=0)
    h.receiver(22, 1, "m", credit=5).sender(10, 1, "m")
    h.flat()
    dlv = h.send(10)
    h.flat()
    h.do(LinkDetach(21, True, ""))  # its copy never left the core: released
    assert h.flat() == []  # (the sender's credit: when the delivery is settled)
    h.do(Disposition(1, STATE_RELEASED, True, None))
    h.do(LinkDetach(22, True, ""))  # sent, no outcome: modified
    assert h.flat() == [UpdateIn(dlv, STATE_MODIFIED, True, MODIFIED_FAILED), LinkCredit(10, 1)]


# ---- losing a receiver or a sender -----------------------------------------------------------
def test_receiver_loss_never_loses_a_delivery(h):
    h.conn(1).conn(2).receiver(20, 2, "q", credit=2).sender(10, 1, "q", capacity=5)
    h.flat()
    a, b, c = h.send(10), h.send(10), h.send(10)
    h.flat()
    h.do(Disposition(1, STATE_ACCEPTED, False, None))
    assert h.flat() == [UpdateIn(a, STATE_ACCEPTED, False, None)]
    h.do(ConnClosed(2, ""))
    # every one settled back, and their credit with them (a and b had left the core, c held)
    assert h.flat() == [UpdateIn(a, STATE_ACCEPTED, True, None), LinkCredit(10, 3),
                        UpdateIn(b, STATE_MODIFIED, True, MODIFIED_FAILED),
                        UpdateIn(c, STATE_RELEASED, True, None)]
    router = h.snap()["router"]
    assert (router["acceptedDeliveries"], router["modifiedDeliveries"],
            router["releasedDeliveries"]) == (1, 1, 1)
    assert router["linkCount"] == 1 and router["connectionCount"] == 1


def test_held_deliveries_move_to_another_consumer(h):
    h.conn(1).receiver(20, 1, "q", credit=0).receiver(21, 1, "q", credit=0).sender(10, 1, "q")
    h.flat()
    dlv = h.send(10, payload=b"x")
    h.do(LinkDetach(20, True, ""))
    assert h.flat() == []
    h.do(LinkFlow(21, 1, False))
    assert h.flat() == [Deliver(1, 21, False, b"x")]
    h.do(Disposition(1, STATE_ACCEPTED, True, None))
    assert h.flat() == [UpdateIn(dlv, STATE_ACCEPTED, True, None), LinkCredit(10, 1)]


def test_sender_loss_forwarded_and_held_continue(h):
    h.conn(1).conn(2).receiver(20, 2, "q", credit=1).sender(10, 1, "q")
    h.flat()
    h.send(10, payload=b"a")
    h.send(10, payload=b"b")
    h.flat()
    h.do(ConnClosed(1, "gone"))
    assert h.flat() == []
    h.do(LinkFlow(20, 2, False))
    assert h.flat() == [Deliver(2, 20, False, b"b")]  # no credit for a dead link
    h.do(Disposition(1, STATE_ACCEPTED, True, None))
    assert h.flat() == []  # the outcome goes nowhere
    h.do(Disposition(2, STATE_ACCEPTED, False, None))
    assert h.flat() == [SettleOut(2, STATE_ACCEPTED)]  # nobody upstream to settle it
    assert h.link(20)["unsettledCount"] == 0


def test_settle_in_while_held_frees_credit(h):
    h.conn(1).receiver(20, 1, "q", credit=0).sender(10, 1, "q")
    h.flat()
    dlv = h.send(10)
    assert h.link(20)["undeliveredCount"] == 1
    h.do(SettleIn(dlv, STATE_ACCEPTED))
    assert h.flat() == [LinkCredit(10, 1)]
    assert h.link(20)["undeliveredCount"] == 0
    h.do(LinkFlow(20, 1, False))
    assert h.flat() == []
    assert h.link(10)["undeliveredCount"] == 0 and h.link(10)["unsettledCount"] == 0


def test_addresses_come_and_go_with_links(h):
    h.conn(1).receiver(20, 1, "q").sender(10, 1, "q")
    # (1 more: the heartbeat server's address, held for the router's life)
    assert h.snap()["router"]["addrCount"] == 2
    h.do(LinkDetach(20, True, ""))
    assert h.addr("M0q")["subscriberCount"] == 0
    h.do(LinkDetach(10, True, ""))
    assert h.snap()["router"]["addrCount"] == 1


def test_transfer_on_unknown_link_is_released(h):
    h.do(Transfer(5, 77, None, False, 4, b""), peer=3)
    assert h.effects() == {3: [UpdateIn(5, STATE_RELEASED, True, None)]}


def test_unknown_command_type(h):
    h.do(PeerHello(0, "worker", 1))
    with pytest.raises(IpcError):
        h.do(ChildStatus("core", 0, 1, "ready", ""))


def test_snapshot_shape(h):
    h.conn(1).receiver(20, 1, "q", credit=3).sender(10, 1, "q")
    h.send(10, settled=True)
    snap = h.snap()
    router = snap["router"]
    for name in ("addrCount", "linkCount", "connectionCount", "presettledDeliveries",
                 "droppedPresettledDeliveries", "acceptedDeliveries", "rejectedDeliveries",
                 "releasedDeliveries", "modifiedDeliveries", "deliveriesIngress",
                 "deliveriesEgress", "deliveriesTransit"):
        assert isinstance(router[name], int), name
    out = h.link(20)
    assert out["linkDir"] == "out" and out["owningAddr"] == "M0q"
    assert (out["deliveryCount"], out["presettledCount"], out["creditAvailable"]) == (1, 1, 2)
    assert out["adminStatus"] == "enabled" and out["operStatus"] == "up"
    addr = h.addr("M0q")
    assert (addr["subscriberCount"], addr["deliveriesIngress"], addr["deliveriesEgress"]) == \
        (1, 1, 1)
    [conn] = snap["connections"]
    assert conn["container"] == "c1" and conn["opened"] is True and conn["role"] == "normal"


# ---- runtime address configuration -----------------------------------------------------------
def test_set_address_config_applies_at_once_to_existing_and_new_addresses(h):
    h.conn(1).receiver(20, 1, "mc.a", credit=10).receiver(21, 1, "mc.a", credit=10)
    h.sender(10, 1, "mc.a")
    h.flat()
    h.send(10, settled=True)
    assert [e.link_id for e in h.flat() if isinstance(e, Deliver)] == [20]  # balanced: one
    assert h.addr("M0mc.a")["distribution"] == "balanced"
    h.core.set_address_config([{"prefix": "mc", "distribution": "multicast", "priority": 7}])
    assert (h.addr("M0mc.a")["distribution"], h.addr("M0mc.a")["priority"]) == ("multicast", 7)
    h.send(10, settled=True)
    assert [e.link_id for e in h.flat() if isinstance(e, Deliver)] == [20, 21]
    h.receiver(22, 1, "mc.b")  # a new address follows the new rules too
    assert h.addr("M0mc.b")["distribution"] == "multicast"
    h.core.set_address_config([])  # back to the defaults
    assert (h.addr("M0mc.a")["distribution"], h.addr("M0mc.a")["priority"]) == ("balanced", -1)


def test_set_address_config_leaves_non_mobile_addresses_alone(h):
    h.conn(1).receiver(20, 1, "_local/x").receiver(21, 1, "amqp:/_topo/0/all/t")
    h.core.set_address_config([{"prefix": "", "distribution": "balanced"},
                               {"pattern": "#", "distribution": "multicast"}])
    assert h.addr("Lx")["distribution"] == "closest"
    assert h.addr("Tt")["distribution"] == "multicast"


def test_set_address_config_invalid_rules_change_nothing(core_cls):
    h = Harness(core_cls, addresses=[{"prefix": "u", "distribution": "multicast"}])
    h.conn(1).receiver(20, 1, "u.x")
    with pytest.raises(ValueError):
        h.core.set_address_config([{"prefix": "u", "distribution": "closest",
                                    "priority": "high"}])
    assert h.addr("M0u.x")["distribution"] == "multicast"
    h.receiver(21, 1, "u.y")
    assert h.addr("M0u.y")["distribution"] == "multicast"


@pytest.mark.parametrize("new_dist", ["multicast", "unavailable", "closest"])
def test_set_address_config_held_deliveries_still_drain(core_cls, new_dist):
    """Deliveries held under the old distribution are neither lost nor duplicated."""
    h = Harness(core_cls)
    h.conn(1).receiver(20, 1, "q", credit=0).sender(10, 1, "q", capacity=5)
    h.flat()
    first, second = h.send(10, payload=b"a"), h.send(10, payload=b"b")
    assert h.flat() == []
    h.core.set_address_config([{"prefix": "q", "distribution": new_dist}])
    h.do(LinkFlow(20, 5, False))
    assert h.flat() == [Deliver(1, 20, False, b"a"), Deliver(2, 20, False, b"b")]
    h.do(Disposition(1, STATE_ACCEPTED, True, None), Disposition(2, STATE_REJECTED, True, None))
    assert h.flat() == [UpdateIn(first, STATE_ACCEPTED, True, None), LinkCredit(10, 2),
                        UpdateIn(second, STATE_REJECTED, True, None)]
    assert h.link(10)["undeliveredCount"] == 0 and h.link(10)["unsettledCount"] == 0


def test_set_address_config_queued_multicast_copies_still_go(core_cls):
    h = Harness(core_cls, addresses=[{"prefix": "q", "distribution": "multicast"}])
    h.conn(1).receiver(20, 1, "q", credit=1).receiver(21, 1, "q", credit=0)
    h.sender(10, 1, "q", capacity=5)
    h.flat()
    dlv = h.send(10, payload=b"m")
    assert [e.link_id for e in h.flat() if isinstance(e, Deliver)] == [20]
    h.core.set_address_config([])  # multicast -> balanced, one copy still queued for 21
    h.do(LinkFlow(21, 1, False))
    assert h.flat() == [Deliver(2, 21, False, b"m")]
    h.do(Disposition(1, STATE_ACCEPTED, True, None), Disposition(2, STATE_ACCEPTED, True, None))
    assert h.flat() == [UpdateIn(dlv, STATE_ACCEPTED, True, None), LinkCredit(10, 1)]


def test_waypoint_address_phases(core_cls):
    """Clients send into phase 0 (towards the waypoint) and receive from phase 1."""
    h = Harness(core_cls, addresses=[{"prefix": "queue", "waypoint": True,
                                      "distribution": "balanced"}])
    h.conn(1).receiver(20, 1, "queue.orders", credit=5).sender(10, 1, "queue.orders")
    keys = {a["key"] for a in h.snap()["addresses"]}
    assert {"M1queue.orders", "M0queue.orders"} <= keys
    # the phase-1 consumer does not make phase 0 reachable: the sender stalls
    assert not [e for e in h.flat() if isinstance(e, LinkCredit) and e.link_id == 10]
    # an anonymous sender's message to the waypoint address is released (no phase-0 consumer)
    h.sender(11, 1, None)
    h.flat()
    dlv = h.send(11, to="queue.orders")
    assert [(e.dlv_id, e.state) for e in h.flat() if isinstance(e, UpdateIn)] == [
        (dlv, STATE_RELEASED)]
    # a non-waypoint address is phase 0 both ways
    h.receiver(21, 1, "plain", credit=5)
    assert h.addr("M0plain")["subscriberCount"] == 1


def test_explicit_phases(core_cls):
    h = Harness(core_cls, addresses=[{"prefix": "staged", "ingressPhase": 3, "egressPhase": 3}])
    h.conn(1).receiver(20, 1, "staged.a", credit=5).sender(10, 1, "staged.a")
    assert h.addr("M3staged.a")["subscriberCount"] == 1
    h.flat()
    h.send(10, payload=b"hop")
    assert [e.payload for e in h.flat() if isinstance(e, Deliver)] == [b"hop"]


def test_connection_uptime_and_last_delivery_from_core_time(core_cls):
    h = Harness(core_cls)
    h.core.handle_batch(0, [ConnOpened(1, "normal", "in", "h:1", "c1", "l0", "u", "", False,
                                       250, 1)], 100.0)
    h.core.tick(130.0)
    (conn,) = h.snap()["connections"]
    assert conn["uptimeSeconds"] == 30 and conn["lastDlvSeconds"] is None
    h.receiver(20, 1, "q", credit=5).sender(10, 1, "q")
    h.core.handle_batch(0, [Transfer(1, 10, None, True, 4, b"x")], 140.0)
    h.core.tick(145.0)
    (conn,) = h.snap()["connections"]
    assert conn["uptimeSeconds"] == 45 and conn["lastDlvSeconds"] == 5


def test_an_address_allocates_its_held_queues_only_when_it_holds(h):
    h.conn(1).receiver(20, 1, "q").sender(10, 1, "q")
    h.conn(2).sender(11, 2, "other")
    assert h.core.addrs["M0q"].queues is None
    assert h.core.addrs["M0other"].queues is None
    first = h.send(10)  # the receiver has no credit: held at the address
    assert len(h.core.addrs["M0q"].queues) == 10
    assert h.core.addrs["M0other"].queues is None
    h.flat()
    h.do(LinkFlow(20, 1, False))
    assert [e.payload for e in h.flat() if type(e) is Deliver] == [b"m%d" % first]


def test_connector_status_for_management(core_cls):
    """What a worker reports of a connector shows while it has no open connection; an open
    outgoing connection of it is SUCCESS with 1.19's Connection Opened text, which stays after
    the connection closed (until a failure replaces it); an empty status forgets a deleted
    one."""
    h = Harness(core_cls)
    failed = "[C7] Connection to h:1 failed: proton:io Connection refused - disconnected h:1"
    h.do(ipc.ConnectorStatus("c", "CONNECTING", ""), ipc.ConnectorStatus("d", "CONNECTING",
                                                                         failed))
    assert h.core.snapshot()["connectors"] == {
        "c": {"connectionStatus": "CONNECTING", "connectionMsg": None},
        "d": {"connectionStatus": "CONNECTING", "connectionMsg": failed}}
    h.do(ConnOpened(9, "normal", "out", "h:1", "peer-c", "c", "", "ANONYMOUS", False, 250))
    assert h.core.snapshot()["connectors"]["c"] == {
        "connectionStatus": "SUCCESS",
        "connectionMsg": "[C9] Connection Opened: dir=out host=h:1 vhost= encrypted=no "
                         "auth=ANONYMOUS user=(null) container_id=peer-c"}
    opened = h.core.snapshot()["connectors"]["c"]["connectionMsg"]
    h.do(ConnClosed(9, ""), ipc.ConnectorStatus("c", "CONNECTING", ""),
         ipc.ConnectorStatus("d", "", ""))
    assert h.core.snapshot()["connectors"] == {
        "c": {"connectionStatus": "CONNECTING", "connectionMsg": opened}}
    refused = failed.replace("C7", "C11")
    h.do(ipc.ConnectorStatus("c", "CONNECTING", refused))
    assert h.core.snapshot()["connectors"] == {
        "c": {"connectionStatus": "CONNECTING", "connectionMsg": refused}}


def test_connector_failover_urls_for_management(core_cls):
    """The failover list a worker reports of a connector shows as its failoverUrls, while it
    connects and while a connection of it is open (SUCCESS), and after that closes."""
    h = Harness(core_cls)
    urls = "amqp://h:1, amqp://b:2"
    h.do(ipc.ConnectorStatus("c", "CONNECTING", "", "amqp://h:1"))
    assert h.core.snapshot()["connectors"]["c"]["failoverUrls"] == "amqp://h:1"
    h.do(ConnOpened(9, "normal", "out", "h:1", "peer-c", "c", "", "ANONYMOUS", False, 250),
         ipc.ConnectorStatus("c", "CONNECTING", "", urls))
    view = h.core.snapshot()["connectors"]["c"]
    assert (view["connectionStatus"], view["failoverUrls"]) == ("SUCCESS", urls)
    h.do(ConnClosed(9, ""))
    view = h.core.snapshot()["connectors"]["c"]
    assert (view["connectionStatus"], view["failoverUrls"]) == ("CONNECTING", urls)


def test_router_counters_leave_out_the_agents_own_deliveries(core_cls):
    """1.19's agent lives in the router: its replies enter through no link, so they are neither
    ingress nor pre-settled, and what reaches it is not egress (10 messages and 3 management
    requests: +13 ingress, +13 egress, +10 pre-settled). Pre-settled deliveries arriving from
    another router (the routing protocol's HELLOs included) are not counted either: 1.19
    counts them on endpoint links only."""
    h = Harness(core_cls, mode="interior")
    h.conn(1, role="internal").receiver(20, 1, "$management", credit=10)
    h.sender(21, 1, None)
    h.conn(2).sender(30, 2, "q").receiver(31, 2, "q", credit=20).receiver(32, 2, "reply",
                                                                          credit=10)
    h.sender(33, 2, "$management")
    h.conn(3, role="inter-router")
    _inter_router_links(h, conn_id=3)
    h.flat()
    for _ in range(10):
        h.send(30, settled=True)
    for _ in range(3):
        h.send(33)                         # the request, unsettled
        h.send(21, settled=True, to="reply")  # the agent's pre-settled reply
    h.do(RouterTransfer(1, 100, "qdhello", True, 4, 0, None, [], b"hello"))
    router = h.snap()["router"]
    assert (router["deliveriesIngress"], router["deliveriesEgress"],
            router["presettledDeliveries"]) == (13, 13, 10)
