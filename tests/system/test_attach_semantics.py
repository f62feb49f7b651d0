"""What a client sees at attach and settlement time, as Qpid Dispatch 1.19 shows it (issue #11).

Each scenario was run by hand against a real 1.19 router and against ours with the same
clients; the conditions, texts and outcomes asserted here are 1.19's:

* ``distribution: unavailable`` (an address rule or ``router.defaultDistribution``): a sender
  or receiver is detached at once with ``amqp:not-found`` "Node not found" (the answering
  attach has a null target); an anonymous sender's message to such an address is REJECTED
  ``amqp:not-found`` "Deliveries cannot be sent to an unavailable address";
* a sender to a transaction coordinator, with no link route to one, is detached with
  ``amqp:precondition-failed`` and 1.19's sentence, whatever the distribution;
* a receiver on another router's address (``_topo/0/<other>/x``) gets ``qd:no-route-to-dest``;
* a receiver attaching with snd-settle-mode ``settled`` gets pre-settled deliveries even from an
  unsettled sender, and that sender sees ACCEPTED (the router settles on the receiver's behalf).

Real router processes, real proton clients, bounded waits.
"""
from __future__ import annotations

import textwrap

import pytest
from proton import Delivery, Message, Terminus
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container, LinkOption
from proton.utils import BlockingConnection, LinkDetached

from clients import pump_until

TIMEOUT = 10
NODE_NOT_FOUND = ("amqp:not-found", "Node not found")
UNAVAILABLE_REJECT = ("amqp:not-found", "Deliveries cannot be sent to an unavailable address")
NO_COORDINATOR = ("amqp:precondition-failed",
                  "The router can't coordinate transactions by itself, a linkRoute to a "
                  "coordinator must be configured to use transactions.")
RULES = textwrap.dedent("""\
    address {
        prefix: gone
        distribution: unavailable
    }
    address {
        prefix: avail
        distribution: balanced
    }
    """)


@pytest.fixture
def conns():
    opened: list = []
    yield opened
    for c in opened:
        try:
            c.close()
        except Exception:
            pass


def connect(router, conns) -> BlockingConnection:
    c = BlockingConnection(router.url, timeout=TIMEOUT)
    conns.append(c)
    return c


def refusal(router, conns, kind: str, address: str) -> tuple:
    """(condition, description) of the detach answering a sender's or receiver's attach."""
    c = connect(router, conns)
    with pytest.raises(LinkDetached) as err:
        if kind == "sender":
            c.create_sender(address)
        else:
            c.create_receiver(address)
    cond = err.value.link.remote_condition
    return cond.name, cond.description


def anonymous_outcomes(router, conns, addresses) -> dict:
    """Send one unsettled message to each address over an anonymous sender: address ->
    (outcome, condition name, description)."""
    c = connect(router, conns)
    snd = c.create_sender(None)
    dlvs = {a: snd.link.send(Message(address=a, body=a)) for a in addresses}
    pump_until([c], lambda: all(d.settled for d in dlvs.values()), timeout=TIMEOUT,
               what="every anonymous delivery settled")
    out = {}
    for a, d in dlvs.items():
        cond = d.remote.condition
        out[a] = (d.remote_state, cond.name if cond else None, cond.description if cond else None)
    return out


def test_unavailable_rule_refuses_links_and_rejects_anonymous_deliveries(router_factory, conns):
    router = router_factory(extra=RULES)
    assert refusal(router, conns, "sender", "gone.x") == NODE_NOT_FOUND
    assert refusal(router, conns, "receiver", "gone.x") == NODE_NOT_FOUND
    got = anonymous_outcomes(router, conns, ["gone.x", "other", "avail.x"])
    assert got == {"gone.x": (Delivery.REJECTED, *UNAVAILABLE_REJECT),
                   "other": (Delivery.RELEASED, None, None),     # available, no consumer
                   "avail.x": (Delivery.RELEASED, None, None)}
    # the router still routes what is available
    c = connect(router, conns)
    rcv = c.create_receiver("avail.x", credit=5)
    snd = c.create_sender("avail.x")
    snd.link.send(Message(body="ok"))
    assert rcv.receive(timeout=TIMEOUT).body == "ok"


def test_default_distribution_unavailable(router_factory, conns):
    router = router_factory(extra=RULES, router_attrs="defaultDistribution: unavailable")
    for kind in ("sender", "receiver"):
        for address in ("foo", "_local/foo", "_topo/0/Router.Test/foo"):
            assert refusal(router, conns, kind, address) == NODE_NOT_FOUND, (kind, address)
    c = connect(router, conns)
    c.create_receiver("avail.x")                 # a rule makes it available
    c.create_receiver(None, dynamic=True)        # dynamic addresses are never unavailable
    c.create_sender("$management")               # the management node is there
    got = anonymous_outcomes(router, conns, ["foo", "avail.y"])
    assert got == {"foo": (Delivery.REJECTED, *UNAVAILABLE_REJECT),
                   "avail.y": (Delivery.RELEASED, None, None)}


class _Coordinator(LinkOption):
    def apply(self, link):
        link.target.type = Terminus.COORDINATOR


class _CoordinatorAttach(MessagingHandler):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.condition = None
        self.target_type = None

    def on_start(self, event):
        conn = event.container.connect(self.url)
        event.container.create_sender(conn, None, options=_Coordinator())
        event.container.schedule(TIMEOUT, self)  # bounded: on_timer stops the container

    def on_link_error(self, event):
        self.condition = event.link.remote_condition
        self.target_type = event.link.remote_target.type
        event.connection.close()
        event.container.stop()

    def on_timer_task(self, event):
        event.container.stop()


@pytest.mark.parametrize("default", ["balanced", "unavailable"])
def test_coordinator_target_without_link_route_is_refused(router_factory, default):
    router = router_factory(router_attrs=f"defaultDistribution: {default}")
    handler = _CoordinatorAttach(router.url)
    Container(handler).run()
    assert handler.condition is not None, "no detach within the time limit"
    assert (handler.condition.name, handler.condition.description) == NO_COORDINATOR
    assert handler.target_type == Terminus.UNSPECIFIED  # a null target, as 1.19 answers


def test_receiver_on_another_routers_address_is_refused(router_factory, conns):
    router = router_factory()
    assert refusal(router, conns, "receiver", "_topo/0/Router.Elsewhere/x") == (
        "qd:no-route-to-dest", "No route to the destination node")


class _SettledModeReceiver(MessagingHandler):
    """A receiver with snd-settle-mode settled and an unsettled sender on one connection."""

    def __init__(self, url: str, count: int) -> None:
        super().__init__(auto_accept=False, auto_settle=False)
        self.url = url
        self.count = count
        self.sent = 0
        self.arrived_settled = []
        self.outcomes = []

    def on_start(self, event):
        conn = event.container.connect(self.url)
        event.container.create_receiver(conn, "settled.q", options=AtMostOnce())
        self.sender = event.container.create_sender(conn, "settled.q")
        event.container.schedule(TIMEOUT, self)

    def on_sendable(self, event):
        while self.sent < self.count and self.sender.credit > 0:
            self.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event):
        self.arrived_settled.append(event.delivery.settled)

    def on_settled(self, event):
        self.outcomes.append(event.delivery.remote_state)
        if len(self.outcomes) == self.count:
            event.connection.close()
            event.container.stop()

    def on_timer_task(self, event):
        event.container.stop()


def test_receiver_asking_for_settled_deliveries_gets_them_from_an_unsettled_sender(
        router_factory):
    router = router_factory()
    handler = _SettledModeReceiver(router.url, 20)
    Container(handler).run()
    assert handler.arrived_settled == [True] * 20
    assert handler.outcomes == [Delivery.ACCEPTED] * 20
