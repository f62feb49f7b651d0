"""A restarted agent resumes the routing protocol from its predecessor's saved state (sans-I/O).

Engines only, on a fake clock (``routing_sim``): every engine's ``snapshot_state`` goes through
JSON and back (as the control plane saves it in the runtime directory) and ``restore_state``
brings back the same state; a restored router's first topology report (a full one) gives its
core the same routes (a core that carried on sees no change; a new one computes the same),
sends RA with ``ls_seq`` + 1 and ``mobile_seq`` + 2, asks every router for LSU/MAU, and in a
network nobody sees a restart or loses its addresses. A neighbour that vanished while the agent
was down is dropped within ``helloMaxAge``.

"Agent down" here is the agent only: the router's core keeps forwarding with its last routes
(:class:`AgentNet` keeps the router in the routing paths and its core's route table, only its
engine hears and does nothing).
"""
from __future__ import annotations

import heapq
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agent.interior import topology_messages
from agent.routing import (Log, RemoteAddressAdded, RemoteAddressRemoved, RoutingEngine, Send,
                           Topology)
from agent.routing.hello import HelloEngine
from agent.routing.linkstate import LinkStateEngine
from agent.routing.messages import LSR, MAR, RA, decode
from agent.routing.mobile import MobileSync
from agent.routing.node import NodeTable
from router_core.routetable import RouteTable
from routing_sim import Network, random_topology


def via_json(state: dict) -> dict:
    return json.loads(json.dumps(state))


class AgentNet(Network):
    """A Network where a router's *agent* can be down while its core still forwards."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.agent_down: set = set()
        self.effects: dict = {}                  # router -> every effect, in order

    def _step(self) -> None:
        down = self.agent_down
        if down:                                 # what the dead agent would have heard: lost
            kept = []
            for item in self.queue:
                t, seq, recipients, opcode, body = item
                if t <= self.now:
                    recipients = [(rid, link) for rid, link in recipients if rid not in down]
                kept.append((t, seq, recipients, opcode, body))
            self.queue = kept                    # same order: a valid heap still
            self.deadlines = [d for d in self.deadlines if d[1] not in down]
            heapq.heapify(self.deadlines)
        super()._step()

    def _schedule(self, rid: str) -> None:
        if rid not in getattr(self, "agent_down", ()):
            super()._schedule(rid)

    def _apply(self, rid: str, effects) -> None:
        effects = list(effects)
        self.effects.setdefault(rid, []).extend(effects)
        super()._apply(rid, effects)

    def kill_agent(self, rid: str) -> dict:
        """The agent dies; returns its last saved state (through JSON)."""
        state = via_json(self.engines[rid].snapshot_state())
        self.agent_down.add(rid)
        return state

    def resume_agent(self, rid: str, state: dict, instance: int,
                     announce: bool = True) -> RoutingEngine:
        """A new agent restores ``state``; the core announces the live control links again
        (unless not ``announce``: then only the HELLOs arriving on them confirm them)."""
        engine = RoutingEngine(rid, instance=instance, **self.engine_kwargs)
        restored = engine.restore_state(state, self.now)
        self.engines[rid] = engine
        self.agent_down.discard(rid)
        self._apply(rid, restored)
        for peer, (link, cost) in self.adjacent[rid].items():
            if announce:
                engine.link_up(link, cost)
        self._schedule(rid)
        return engine


def line(n: int = 3, **kw) -> AgentNet:
    net = AgentNet(**kw)
    ids = [chr(ord("A") + i) for i in range(n)]
    for i, rid in enumerate(ids):
        net.add_router(rid, instance=100 + i)
    for a, b in zip(ids, ids[1:]):
        net.connect(a, b)
    return net


def converged(net: Network) -> bool:
    return not net.mismatches(net.expected_routes())


# ---- engine round trips ---------------------------------------------------------------------
def settled_network(seed: int = 1, n: int = 6) -> AgentNet:
    rng = random.Random(seed)
    net = AgentNet(seed=seed)
    for i in range(n):
        net.add_router(f"R{i:03d}", instance=1000 + i)
    for a, b, cost in random_topology(n, 2, rng):
        net.connect(a, b, cost)
    for i, rid in enumerate(sorted(net.engines)):
        for k in range(i % 3 + 1):
            net.engines[rid].add_local(f"M0addr.{rid}.{k}", hint=k % 6)
        net._schedule(rid)
    assert net.run_until(lambda: converged(net), 30) is not None
    net.run(5)                                   # MAUs settle too
    return net


def test_every_engine_round_trips_through_json():
    net = settled_network()
    for rid, eng in net.engines.items():
        hello = HelloEngine(rid, eng.instance)
        hello.restore_state(via_json(eng.hello.snapshot_state()), net.now)
        assert hello.snapshot_state() == eng.hello.snapshot_state()
        assert hello.neighbours == eng.hello.neighbours and set(hello.heard) == set(eng.hello.heard)

        ls = LinkStateEngine(rid, eng.instance)
        ls.restore_state(via_json(eng.linkstate.snapshot_state()), net.now)
        assert ls.snapshot_state() == eng.linkstate.snapshot_state()
        assert ls.collection() == eng.linkstate.collection()

        nodes = NodeTable(rid, eng.instance)
        nodes.restore_state(via_json(eng.nodes.snapshot_state()))
        assert nodes.snapshot_state() == eng.nodes.snapshot_state()
        assert nodes.indexes() == eng.nodes.indexes()

        mobile = MobileSync(rid)
        mobile.restore_state(via_json(eng.mobile.snapshot_state()))
        assert mobile.snapshot_state() == eng.mobile.snapshot_state()
        assert mobile.remote_addresses() == eng.mobile.remote_addresses()
        assert mobile.remote_seq and mobile.remote_seq == eng.mobile.remote_seq


def test_restored_engine_publishes_the_same_routes_and_resumes_with_new_seqs():
    net = settled_network(seed=2)
    for rid, eng in net.engines.items():
        core = net.tables[rid]                   # the core that carried on
        before = core.routes
        state = via_json(eng.snapshot_state())
        new = RoutingEngine(rid, instance=eng.instance)
        restored = new.restore_state(state, net.now + 1)
        # the core hears the restored remote addresses again (harmless repeats), nothing removed
        again = {(fx.key, fx.router) for fx in restored if isinstance(fx, RemoteAddressAdded)}
        assert again == {(k, r) for r, keys in eng.remote_addresses().items() for k in keys}
        assert not any(isinstance(fx, (RemoteAddressRemoved, Topology)) for fx in restored)
        out = new.tick(net.now + 1)
        reports = [fx for fx in out if isinstance(fx, Topology)]
        assert len(reports) == 1 and reports[0].full, rid
        fresh = RouteTable(rid)                  # a core started again computes the same
        for msg in topology_messages(reports[0], net.conn_id):
            core.apply(msg)
            fresh.apply(msg)
        update, reachable = core.compute(net.now + 1)
        assert update is None and reachable.routers == sorted(before.next_hop), rid
        fresh.compute(net.now + 1)
        assert fresh.routes == before, rid
        new.set_reachable(reachable.routers)     # the core's answer: LSR/MAR to the rest
        out += new.tick(net.now + 1)
        sent = [fx.message for fx in out if isinstance(fx, Send)]
        ras = [m for m in sent if isinstance(m, RA)]
        assert len(ras) == 1
        assert ras[0].ls_seq == eng.linkstate.ls_seq + 1
        assert ras[0].mobile_seq == eng.mobile.mobile_seq + 2
        assert ras[0].instance == eng.instance
        assert {m.id for m in sent if isinstance(m, LSR)} == {rid}
        assert sorted(s.to.split("/")[3] for s in out
                      if isinstance(s, Send) and isinstance(s.message, LSR)) == sorted(eng.nodes.nodes)
        assert sorted(s.to.split("/")[3] for s in out
                      if isinstance(s, Send) and isinstance(s.message, MAR)) == sorted(eng.nodes.nodes)
        assert not any(isinstance(fx, RemoteAddressRemoved) for fx in out)
        strip = lambda rows: [{k: v for k, v in row.items() if k != "lastTopoChange"}
                              for row in rows]
        assert strip(fresh.view()) == strip(core.view())


def test_state_of_another_router_or_instance_is_not_restored():
    eng = RoutingEngine("A", instance=5)
    state = via_json(eng.snapshot_state())
    for other in (RoutingEngine("B", instance=5), RoutingEngine("A", instance=6)):
        out = other.restore_state(state, 0.0)
        assert [type(fx) for fx in out] == [Log] and out[0].level == "warning"
        assert other.linkstate.ls_seq == 0 and other.mobile.mobile_seq == 0


# ---- in a network ---------------------------------------------------------------------------
@pytest.mark.parametrize("announce", [True, False], ids=["links-announced", "links-restored"])
def test_agent_restart_in_the_middle_of_a_line_is_invisible_to_the_others(announce):
    net = line(3)
    net.engines["A"].add_local("M0left", 3)
    net.engines["C"].add_local("M0right", 2)
    for rid in net.engines:
        net._schedule(rid)
    assert net.run_until(lambda: converged(net) and net.addresses["A"].get("M0right")
                         and net.addresses["C"].get("M0left"), 30) is not None
    net.run(3)
    b_old = net.engines["B"]
    ls_seq, mobile_seq = b_old.linkstate.ls_seq, b_old.mobile.mobile_seq
    routes_before = {rid: net.tables[rid].routes for rid in "ABC"}
    marks = {rid: len(net.effects.get(rid, [])) for rid in "ABC"}
    updates = {rid: len(net.updates[rid]) for rid in "ABC"}
    state = net.kill_agent("B")
    net.run(1.5)                                 # < helloMaxAge (3 s): the others keep B
    b = net.resume_agent("B", state, instance=b_old.instance, announce=announce)
    b.add_local("M0middle", 3)                   # the core re-announces nothing, then a new one
    net.run(10)
    for rid in "AC":
        later = net.effects[rid][marks[rid]:]
        assert not [fx for fx in later if isinstance(fx, Log) and "Restart" in fx.text], rid
        assert not [fx for fx in later if isinstance(fx, RemoteAddressRemoved)], rid
        assert not [fx for fx in later if isinstance(fx, Topology) and fx.full], rid
    for rid in "ABC":                             # no core saw its routes change
        assert len(net.updates[rid]) == updates[rid], rid
        assert net.tables[rid].routes == routes_before[rid], rid
    for rid in "AC":
        held = net.engines[rid].linkstate.remote["B"]
        assert held.ls_seq == ls_seq + 1 and held.peers == {"A": 1, "C": 1}
        assert net.engines[rid].mobile.seq_of("B") == b.mobile.mobile_seq
        assert b.mobile.mobile_seq == mobile_seq + 3          # +2, then the M0middle MAU
    assert b.hello.links == b_old.hello.links and not b.hello.provisional
    assert net.addresses["A"]["M0middle"] == {"B"} and net.addresses["C"]["M0middle"] == {"B"}
    assert net.addresses["A"]["M0right"] == {"C"} and net.addresses["C"]["M0left"] == {"A"}
    reports = [fx for fx in net.effects["B"][marks["B"]:] if isinstance(fx, Topology)]
    assert reports and reports[0].full           # the new agent told its core everything
    assert converged(net)


def test_address_lost_while_the_agent_was_down_is_withdrawn_and_others_stay():
    net = line(2)
    a = net.engines["A"]
    for key in ("M0kept", "M0gone"):
        a.add_local(key, 3)
    net._schedule("A")
    assert net.run_until(lambda: set(net.addresses["B"]) == {"M0kept", "M0gone"}, 30) is not None
    marks = len(net.effects["B"])
    state = net.kill_agent("A")
    net.run(1.0)
    a = net.resume_agent("A", state, instance=a.instance)
    a.add_local("M0kept", 3)                     # the core names what it still has
    net._schedule("A")
    net.run(6)
    assert set(net.addresses["B"]) == {"M0kept"}
    later = net.effects["B"][marks:]
    assert [(fx.key, fx.router) for fx in later if isinstance(fx, RemoteAddressRemoved)] == [
        ("M0gone", "A")]
    assert not any(isinstance(fx, RemoteAddressAdded) and fx.key == "M0kept" for fx in later)


def test_remote_address_added_while_the_agent_was_down_is_learned():
    net = line(3)
    assert net.run_until(lambda: converged(net), 30) is not None
    net.run(2)
    b = net.engines["B"]
    state = net.kill_agent("B")
    net.engines["C"].add_local("M0late", 1)     # its MAU is lost at B's dead agent
    net._schedule("C")
    net.run(2.0)
    assert "M0late" in net.addresses["A"] and "M0late" not in net.addresses["B"]
    net.resume_agent("B", state, instance=b.instance)
    net.run(3)
    assert net.addresses["B"].get("M0late") == {"C"}


@pytest.mark.parametrize("announce", [True, False], ids=["links-announced", "links-restored"])
def test_neighbour_gone_while_the_agent_was_down_is_dropped_within_hello_max_age(announce):
    net = line(3)
    assert net.run_until(lambda: converged(net), 30) is not None
    net.run(2)
    b_old = net.engines["B"]
    state = net.kill_agent("B")
    net.kill("C")                                # C vanishes; its connection to B stays
    net.disconnect("B", "C")                     # ... or not: the core will not announce it
    net.run(1.0)
    b = net.resume_agent("B", state, instance=b_old.instance, announce=announce)
    t0 = net.now
    first = b.tick(net.now)
    net._apply("B", first)
    report = [t for t in first if isinstance(t, Topology)][0]
    assert report.full and {s.router: s.peers for s in report.states}["B"] == {"A": 1, "C": 1}
    assert net.tables["B"].routes.next_hop == {"A": "A", "C": "C"}
    took = net.run_until(lambda: "C" not in b.neighbours, 10, check_every=0.05)
    assert took is not None and net.now - t0 <= b.hello.hello_max_age + 0.1
    assert net.tables["B"].routes.next_hop == {"A": "A"}
    assert b.linkstate.peers == {"A": 1}
    assert "A" in b.neighbours                    # confirmed by HELLO all along
    assert list(b.hello.links) == ["B>A"] and not b.hello.provisional


def test_restored_neighbour_on_a_link_that_came_back_with_a_new_id_moves_to_it():
    net = line(2)
    assert net.run_until(lambda: converged(net), 30) is not None
    a_old = net.engines["A"]
    state = net.kill_agent("A")
    net.disconnect("A", "B")
    net.adjacent["A"]["B"] = ("A>B#2", 1)        # reconnected: new connection ids
    net.adjacent["B"]["A"] = ("B>A#2", 1)
    net.link_ends["A>B#2"] = ("A", "B", "B>A#2")
    net.link_ends["B>A#2"] = ("B", "A", "A>B#2")
    net.engines["B"].link_up("B>A#2", 1)
    net._schedule("B")
    net.run(0.5)
    a = net.resume_agent("A", state, instance=a_old.instance)
    net.run(4)
    assert a.neighbours == {"B": "A>B#2"}
    assert net.neighbours("A") == {"B": "A>B#2"}
    assert converged(net)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 7), extra=st.integers(0, 4),
       down=st.floats(0.1, 2.0), victim=st.integers(0, 6), announce=st.booleans())
def test_any_router_resumes_without_anyone_noticing(seed, n, extra, down, victim, announce):
    rng = random.Random(seed)
    net = AgentNet(seed=seed)
    ids = [f"R{i:03d}" for i in range(n)]
    for i, rid in enumerate(ids):
        net.add_router(rid, instance=10 + i)
        if rng.random() < 0.7:
            net.engines[rid].add_local(f"M0{rid}", rng.randint(0, 5))
    for a, b, cost in random_topology(n, min(extra, n * (n - 1) // 2 - (n - 1)), rng):
        net.connect(a, b, cost)
    assert net.run_until(lambda: converged(net), 30) is not None
    net.run(4)
    rid = ids[victim % n]
    old = net.engines[rid]
    addresses = {r: {k: set(v) for k, v in keys.items()} for r, keys in net.addresses.items()}
    marks = {r: len(net.effects.get(r, [])) for r in ids}
    updates = {r: len(net.updates[r]) for r in ids}
    state = net.kill_agent(rid)
    net.run(down)
    new = net.resume_agent(rid, state, instance=old.instance, announce=announce)
    for key in old.mobile.local:
        new.add_local(key, old.mobile.local[key])
    net._schedule(rid)
    net.run(8)
    for other in ids:
        later = net.effects.get(other, [])[marks[other]:]
        if other != rid:
            assert not [fx for fx in later if isinstance(fx, RemoteAddressRemoved)
                        or (isinstance(fx, Log) and "Restart" in fx.text)], other
            assert net.engines[other].mobile.seq_of(rid) == new.mobile.mobile_seq
        assert len(net.updates[other]) == updates[other], other   # no core's routes changed
    assert {r: {k: set(v) for k, v in keys.items()} for r, keys in net.addresses.items()} == addresses
    assert converged(net) and new.hello.links == old.hello.links and not new.hello.provisional


def test_agent_down_longer_than_hello_max_age_converges_again_without_a_restart():
    net = line(3)
    net.engines["C"].add_local("M0right", 2)
    net.engines["B"].add_local("M0middle", 1)
    for rid in net.engines:
        net._schedule(rid)
    assert net.run_until(lambda: converged(net) and net.addresses["A"].get("M0right"), 30)
    net.run(3)
    b_old = net.engines["B"]
    marks = {rid: len(net.effects[rid]) for rid in "AC"}
    state = net.kill_agent("B")
    net.run(5.0)                                 # A and C drop B as a neighbour meanwhile
    assert "B" not in net.engines["A"].neighbours
    b = net.resume_agent("B", state, instance=b_old.instance)
    b.add_local("M0middle", 1)
    assert net.run_until(lambda: converged(net) and "B" in net.engines["A"].neighbours, 10)
    net.run(4)
    assert net.addresses["A"] == {"M0right": {"C"}, "M0middle": {"B"}}
    assert net.addresses["C"] == {"M0middle": {"B"}}
    for rid in "AC":
        assert not [fx for fx in net.effects[rid][marks[rid]:]
                    if isinstance(fx, Log) and "Restart" in fx.text]
