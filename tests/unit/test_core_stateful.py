"""Stateful Hypothesis test of the core's credit and settlement invariants, on both builds.

A model plays well-behaved workers (senders send only with credit, receivers dispose only what
they were given) and checks every effect the core emits:

* credit never negative: a sender's granted credit always covers what it sent;
* a sender's credit plus its deliveries not yet settled never exceed its capacity (1.19);
* bounded memory: what the core holds for an inbound link never exceeds its capacity
  (granted <= capacity + sent, and the link's undeliveredCount <= capacity);
* a receiver never gets more deliveries than the limit its flow allowed;
* every unsettled inbound delivery gets exactly one settlement back to its (live) sender, and at
  the end, once every receiver is gone, none is left without one (never silently lost);
* no effect is addressed to a link that is closed;
* a targeted sender whose address has no destination is stalled (LinkStall on: no credit
  back, it may drain what it has) and gets its window back, never more, when its address
  has one again (LinkStall off, answered with its credit as a worker answers: LinkUnstalled).
"""
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule)

from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED,
    ConnClosed, ConnOpened, Deliver, Disposition, Drained, LinkAttach, LinkCredit, LinkDetach,
    LinkFlow, LinkOpen, LinkStall, LinkUnstalled, SettleIn, SettleOut, Transfer, UpdateIn)
from test_core import BUILDS

ADDRESSES = ["a", "mc"]
OUTCOMES = [STATE_ACCEPTED, STATE_REJECTED, STATE_RELEASED, STATE_MODIFIED]


class CoreMachine(RuleBasedStateMachine):
    core_cls = None

    def __init__(self):
        super().__init__()
        self.core = self.core_cls("R1", seed=5, default_distribution="balanced",
                                  addresses=[{"prefix": "mc", "distribution": "multicast"}])
        self.next_id = 1
        self.conns = {}       # conn_id -> peer
        self.senders = {}     # link_id -> dict(conn, capacity, granted, sent, anonymous)
        self.receivers = {}   # link_id -> dict(conn, limit, delivered, outstanding={out: dlv})
        self.inbound = {}     # dlv_id -> dict(link, final=bool, sender_settled=bool)
        self.unstalled = []   # (link, peer): LinkStall off, the LinkUnstalled answer is due

    def _id(self):
        self.next_id += 1
        return self.next_id

    def _do(self, peer, cmd):
        self.core.handle(peer, cmd, 0.0)
        self._check_effects()
        while self.unstalled:  # the worker's answers to LinkStall off
            link, peer = self.unstalled.pop(0)
            s = self.senders.get(link)
            if s is not None:
                self.core.handle(peer, LinkUnstalled(link, s["granted"] - s["sent"]), 0.0)
                self._check_effects()

    def _check_effects(self):
        for peer, effects in self.core.take_effects().items():
            for eff in effects:
                kind = type(eff)
                if kind is LinkCredit:
                    s = self.senders.get(eff.link_id)
                    assert s is not None, f"credit for a closed link: {eff}"
                    assert eff.credit > 0
                    assert self.conns[s["conn"]] == peer
                    s["granted"] += eff.credit
                elif kind is Deliver:
                    r = self.receivers.get(eff.link_id)
                    assert r is not None, f"delivery to a closed link: {eff}"
                    assert self.conns[r["conn"]] == peer
                    r["delivered"] += 1
                    assert r["delivered"] <= r["limit"], "delivered beyond the receiver's credit"
                    if not eff.settled:
                        r["outstanding"][eff.dlv_id] = int(eff.payload)
                elif kind is UpdateIn:
                    d = self.inbound[eff.dlv_id]
                    assert d["link"] in self.senders, f"update to a closed link: {eff}"
                    assert not d["final"] and not d["sender_settled"], f"second outcome: {eff}"
                    if eff.settled:
                        assert eff.state in OUTCOMES
                        d["final"] = True
                elif kind is SettleOut:
                    for r in self.receivers.values():
                        if r["outstanding"].pop(eff.dlv_id, None) is not None:
                            break
                    else:
                        raise AssertionError(f"settle for an unknown outbound delivery: {eff}")
                elif kind is LinkStall:
                    s = self.senders.get(eff.link_id)
                    assert s is not None and not s["anonymous"], f"stall of {eff}"
                    assert self.conns[s["conn"]] == peer
                    assert s["stalled"] != eff.on, f"stall state repeated: {eff}"
                    s["stalled"] = eff.on
                    if not eff.on:
                        self.unstalled.append((eff.link_id, peer))
                elif kind is Drained:
                    r = self.receivers[eff.link_id]
                    r["delivered"] = max(r["delivered"], r["limit"])
                else:
                    assert kind is LinkOpen, eff

    # ---- connections and links ---------------------------------------------------------------
    @initialize(capacity=st.integers(1, 4), credit=st.integers(0, 4))
    def a_sender_and_a_receiver(self, capacity, credit):
        self.open_conn(0)
        self.open_conn(1)
        conn_in, conn_out = sorted(self.conns)
        self._attach_sender(conn_in, "a", capacity, False)
        self._attach_receiver(conn_out, "a", capacity)
        self._flow(max(self.receivers), credit, False)

    @precondition(lambda self: len(self.conns) < 3)
    @rule(peer=st.integers(0, 1))
    def open_conn(self, peer):
        conn = self._id()
        self.conns[conn] = peer
        self._do(peer, ConnOpened(conn, "normal", "in", "h:1", "c", "l", "u", "", False, 250,
                                  1))

    @precondition(lambda self: len(self.conns) > 1)
    @rule(data=st.data())
    def close_conn(self, data):
        conn = data.draw(st.sampled_from(sorted(self.conns)))
        self._forget_links(conn)
        self._do(self.conns.pop(conn), ConnClosed(conn, ""))

    def _forget_links(self, conn):
        for table in (self.senders, self.receivers):
            for link_id in [k for k, v in table.items() if v["conn"] == conn]:
                del table[link_id]

    @precondition(lambda self: self.conns and len(self.senders) < 4)
    @rule(data=st.data(), address=st.sampled_from(ADDRESSES + [None]),
          capacity=st.integers(1, 4), presettled=st.sampled_from([False, False, True]))
    def attach_sender(self, data, address, capacity, presettled):
        self._attach_sender(data.draw(st.sampled_from(sorted(self.conns))), address, capacity,
                            presettled)

    def _attach_sender(self, conn, address, capacity, presettled):
        link = self._id()
        self.senders[link] = dict(conn=conn, capacity=capacity, granted=0, sent=0,
                                  anonymous=address is None, presettled=presettled,
                                  stalled=False)
        self._do(self.conns[conn], LinkAttach(link, conn, DIR_IN, "s", address, False,
                                              presettled, capacity, "endpoint"))

    @precondition(lambda self: self.conns and len(self.receivers) < 4)
    @rule(data=st.data(), address=st.sampled_from(ADDRESSES), capacity=st.integers(1, 4))
    def attach_receiver(self, data, address, capacity):
        self._attach_receiver(data.draw(st.sampled_from(sorted(self.conns))), address, capacity)

    def _attach_receiver(self, conn, address, capacity):
        link = self._id()
        self.receivers[link] = dict(conn=conn, limit=0, delivered=0, outstanding={})
        self._do(self.conns[conn], LinkAttach(link, conn, DIR_OUT, "r", address, False, False,
                                              capacity, "endpoint"))

    @precondition(lambda self: self.senders or self.receivers)
    @rule(data=st.data())
    def detach(self, data):
        link = data.draw(st.sampled_from(sorted([*self.senders, *self.receivers])))
        table = self.senders if link in self.senders else self.receivers
        conn = table.pop(link)["conn"]
        self._do(self.conns[conn], LinkDetach(link, True, ""))

    # ---- flow and deliveries -----------------------------------------------------------------
    @precondition(lambda self: self.receivers)
    @rule(data=st.data(), credit=st.integers(0, 5), drain=st.booleans())
    def flow(self, data, credit, drain):
        self._flow(data.draw(st.sampled_from(sorted(self.receivers))), credit, drain)

    def _flow(self, link, credit, drain):
        r = self.receivers[link]
        r["limit"] = r["delivered"] + credit
        self._do(self.conns[r["conn"]], LinkFlow(link, r["limit"], drain))

    @precondition(lambda self: any(s["granted"] > s["sent"] for s in self.senders.values()))
    @rule(data=st.data(), settled=st.sampled_from([False, False, True]),
          to=st.sampled_from(ADDRESSES + ["none"]),
          priority=st.integers(0, 9))
    def send(self, data, settled, to, priority):
        link = data.draw(st.sampled_from(
            sorted(k for k, s in self.senders.items() if s["granted"] > s["sent"])))
        s = self.senders[link]
        s["sent"] += 1
        dlv = self._id()
        settled = settled or s["presettled"]
        if not settled:
            self.inbound[dlv] = dict(link=link, final=False, sender_settled=False)
        self._do(self.conns[s["conn"]], Transfer(dlv, link, to if s["anonymous"] else None,
                                                 settled, priority, b"%d" % dlv))

    @precondition(lambda self: any(r["outstanding"] for r in self.receivers.values()))
    @rule(data=st.data(), state=st.sampled_from(OUTCOMES + [0]), settled=st.booleans())
    def dispose(self, data, state, settled):
        link = data.draw(st.sampled_from(
            sorted(k for k, r in self.receivers.items() if r["outstanding"])))
        r = self.receivers[link]
        out = data.draw(st.sampled_from(sorted(r["outstanding"])))
        if settled:
            del r["outstanding"][out]
        self._do(self.conns[r["conn"]], Disposition(out, state, settled, None))

    @precondition(lambda self: any(not d["final"] and not d["sender_settled"]
                                   and d["link"] in self.senders
                                   for d in self.inbound.values()))
    @rule(data=st.data(), state=st.sampled_from(OUTCOMES))
    def sender_settles(self, data, state):
        dlv = data.draw(st.sampled_from(sorted(
            k for k, d in self.inbound.items()
            if not d["final"] and not d["sender_settled"] and d["link"] in self.senders)))
        d = self.inbound[dlv]
        d["sender_settled"] = True
        self._do(self.conns[self.senders[d["link"]]["conn"]], SettleIn(dlv, state))

    @precondition(lambda self: any(s["stalled"] and s["granted"] > s["sent"]
                                   for s in self.senders.values()))
    @rule(data=st.data())
    def stalled_sender_drains(self, data):
        """A sender that honours the drain flag uses up its credit without sending."""
        link = data.draw(st.sampled_from(sorted(
            k for k, s in self.senders.items() if s["stalled"] and s["granted"] > s["sent"])))
        self.senders[link]["granted"] = self.senders[link]["sent"]

    # ---- runtime configuration ---------------------------------------------------------------
    @rule(multicast=st.booleans(), closest=st.booleans())
    def reconfigure(self, multicast, closest):
        """The address rules change under traffic: nothing held or in flight may be lost."""
        rules = [{"prefix": "mc", "distribution": "multicast" if multicast else "balanced"}]
        if closest:
            rules.append({"prefix": "a", "distribution": "closest", "priority": 6})
        self.core.set_address_config(rules)
        self._check_effects()

    # ---- invariants --------------------------------------------------------------------------
    @invariant()
    def credit_and_memory_bounded(self):
        views = {int(v["identity"]): v for v in self.core.snapshot()["links"]}
        for link, s in self.senders.items():
            assert s["granted"] >= s["sent"], "negative credit"
            assert s["granted"] <= s["capacity"] + s["sent"], "credit beyond capacity"
            # as 1.19: a client sender's credit and its unsettled deliveries (not yet settled
            # either way) together stay within its capacity: credit for an unsettled
            # delivery comes back when it is settled, not when it is sent on
            unsettled = sum(1 for d in self.inbound.values() if d["link"] == link
                            and not d["final"] and not d["sender_settled"])
            assert s["granted"] - s["sent"] + unsettled <= s["capacity"], "unsettled beyond capacity"
            view = views[link]
            if s["stalled"]:  # a drain is known to the core only when it restores the window
                assert view["creditAvailable"] >= s["granted"] - s["sent"]
            else:
                assert view["creditAvailable"] == s["granted"] - s["sent"]
            assert 0 <= view["undeliveredCount"] <= s["capacity"]
        for link, r in self.receivers.items():
            assert r["delivered"] <= r["limit"]
            assert views[link]["creditAvailable"] >= 0
        assert set(views) == set(self.senders) | set(self.receivers)

    def teardown(self):
        # Every receiver goes away: whatever is still in flight must be settled back.
        for link in sorted(self.receivers):
            conn = self.receivers.pop(link)["conn"]
            self._do(self.conns[conn], LinkDetach(link, True, ""))
        for dlv, d in self.inbound.items():
            if d["link"] in self.senders and not d["sender_settled"]:
                assert d["final"], f"delivery {dlv} silently lost"
        for s in self.senders.values():  # nothing held any more: every credit came back
            # (but to a stalled sender: no destination, its credit is not given back)
            if not s["stalled"]:
                assert s["granted"] in (0, s["capacity"] + s["sent"])
        assert self.core.snapshot()["router"]["linkCount"] == len(self.senders)


@pytest.mark.parametrize("core_cls", BUILDS)
def test_credit_and_settlement_invariants(core_cls):
    machine = type(f"CoreMachine_{core_cls.__module__.replace('.', '_')}", (CoreMachine,),
                   {"core_cls": core_cls})
    machine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                         deadline=None)
    machine.TestCase().runTest()
