"""The compiled core and the pure-Python reference agree: same effects, same counters.

Random command sequences over a small id space (so links, deliveries and dispositions really meet)
are fed to both builds; after every command the effect streams must be identical (values and
NamedTuple types), and at the end the management snapshots. Runtime address reconfiguration
(``set_address_config``) is one of the random steps.
"""
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from common import ipc

from router_core import core as pure_core
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_NONE, STATE_RECEIVED, STATE_REJECTED,
    STATE_RELEASED, ConnClosed, ConnOpened, ControlSend, Disposition, LinkAttach, LinkDetach,
    LinkFlow, PeerHello, RemoteAddress, RouterTransfer, RouteUpdate, SettleIn, Transfer)
from test_core import NOT_BUILT, compiled_core

pytestmark = pytest.mark.skipif(compiled_core is None, reason=NOT_BUILT)

CONNS = st.integers(1, 3)
LINKS = st.integers(1, 8)
IDS = st.integers(1, 40)
ADDRESSES = st.sampled_from([None, "a", "b", "mc.x", "cl", "amqp:/_topo/0/all/t",
                             "_local/l", "u"])
STATES = st.sampled_from([STATE_NONE, STATE_RECEIVED, STATE_ACCEPTED, STATE_REJECTED,
                          STATE_RELEASED, STATE_MODIFIED])
RULES = [{"prefix": "mc", "distribution": "multicast"},
         {"pattern": "cl", "distribution": "closest", "priority": 5},
         {"prefix": "u", "distribution": "unavailable"}]
RULESETS = [RULES, [], [{"prefix": "a", "distribution": "multicast", "priority": 2}],
            [{"pattern": "#", "distribution": "closest"}, {"prefix": "b", "priority": 9}],
            [{"prefix": "mc", "distribution": "balanced"},
             {"prefix": "u", "distribution": "closest"},
             {"pattern": "cl", "distribution": "multicast"}]]


class SetAddressConfig(NamedTuple):
    """Not an IPC command: a test step calling ``set_address_config(rules)`` on the core."""
    rules: list


def apply(core, peer, cmd, now):
    if isinstance(cmd, SetAddressConfig):
        core.set_address_config(cmd.rules)
    else:
        core.handle(peer, cmd, now)


def typed(effects):
    return {peer: [(type(e), e) for e in lst] for peer, lst in effects.items()}

commands = st.one_of(
    st.builds(ConnOpened, CONNS, st.sampled_from(["normal", "route-container", "edge"]),
              st.just("in"), st.just("h:1"), st.just("c"), st.just("l"), st.just("u"),
              st.just(""), st.booleans(), st.just(250),
              policy=st.sampled_from([None, [2, None, "u", "h", 0, 0, 0],
                                      [65535, "v", "u", "h", 2, 1, 1]])),
    st.builds(ConnClosed, CONNS, st.just("")),
    st.builds(LinkAttach, LINKS, CONNS, st.sampled_from([DIR_IN, DIR_OUT]), st.just("n"),
              ADDRESSES, st.booleans(), st.booleans(), st.integers(1, 4),
              target=st.sampled_from([None, None, None,
                                      ipc.terminus(ipc.TERMINUS_COORDINATOR, None)])),
    st.builds(LinkDetach, LINKS, st.booleans(), st.just("")),
    st.builds(LinkFlow, LINKS, st.integers(0, 12), st.booleans()),
    st.builds(Transfer, IDS, LINKS, ADDRESSES, st.booleans(), st.integers(0, 9),
              st.just(b"p")),
    st.builds(Disposition, IDS, STATES, st.booleans(),
              st.sampled_from([None, {"failed": True, "undeliverable": False}])),
    st.builds(SettleIn, IDS, STATES),
    st.builds(SetAddressConfig, st.sampled_from(RULESETS)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1), commands), max_size=80),
       st.sampled_from(["balanced", "closest", "multicast", "unavailable"]))
def test_builds_agree(steps, default_distribution):
    kwargs = dict(default_distribution=default_distribution, addresses=RULES, seed=3)
    pure = pure_core.RouterCore("R1", **kwargs)
    compiled = compiled_core.RouterCore("R1", **kwargs)
    for n, (peer, cmd) in enumerate(steps):
        apply(pure, peer, cmd, float(n))
        apply(compiled, peer, cmd, float(n))
        pure.tick(float(n))
        compiled.tick(float(n))
        assert typed(pure.take_effects()) == typed(compiled.take_effects()), (n, cmd)
    assert pure.snapshot() == compiled.snapshot()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), commands), max_size=60))
def test_batches_equal_single_commands(steps):
    """handle_batch is handle in a loop (on both builds), and flushing late loses nothing."""
    for cls in (pure_core.RouterCore, compiled_core.RouterCore):
        one, batched = cls("R1", seed=1, addresses=RULES), cls("R1", seed=1, addresses=RULES)
        for peer, cmd in steps:
            if isinstance(cmd, SetAddressConfig):
                one.set_address_config(cmd.rules)
                batched.set_address_config(cmd.rules)
                continue
            one.handle(peer, cmd, 0.0)
            batched.handle_batch(peer, [cmd], 0.0)
        assert one.take_effects() == batched.take_effects()
        assert one.snapshot() == batched.snapshot()


# --- interior mode: inter-router links, routing table and remote addresses from the agent ----
ROUTER_IDS = st.sampled_from(["R2", "R3", "R4"])
ROUTER_ADDRESSES = st.sampled_from([None, "a", "mc.x", "cl", "amqp:/_topo/0/all/qdrouter",
                                    "amqp:/_local/qdhello", "amqp:/_topo/0/R3/qdrouter",
                                    "amqp:/_topo/0/R4/$management", "amqp:/_topo/0/R1/temp.t"])
TRACES = st.sampled_from([[], ["0/R2"], ["0/R3", "0/R2"], ["0/R4"]])


def _route_update(hops):
    """A RouteUpdate over neighbours R2 (conn 1) and R3 (conn 2); hops: router -> next hop."""
    next_hop = {r: h for r, h in hops.items() if h is not None}
    return RouteUpdate(next_hop, {r: 1 + i for i, r in enumerate(sorted(next_hop))},
                       {r: ["R2"] if r == "R4" else [] for r in next_hop}, {"R2": 1, "R3": 2})


def _interior_prologue():
    """The agent, inter-router connections to R2 (conn 1, links 100..121) and R3 (conn 2,
    200..221) with their 22 links, and a client connection (conn 3) with endpoint links."""
    cmds = [ConnOpened(1, "inter-router", "in", "h:1", "R2", "l", "", "", False, 250, 1),
            ConnOpened(2, "inter-router", "out", "h:2", "R3", "l", "", "", False, 250, 2),
            ConnOpened(3, "normal", "in", "h:3", "c", "l", "", "", False, 250, 1)]
    for conn_id, first in ((1, 100), (2, 200)):
        cmds.append(LinkAttach(first, conn_id, DIR_IN, "c", None, False, True, 250,
                               "router-control"))
        cmds.append(LinkAttach(first + 1, conn_id, DIR_OUT, "c", None, False, True, 250,
                               "router-control"))
        for p in range(10):
            cmds.append(LinkAttach(first + 2 + 2 * p, conn_id, DIR_IN, "d", None, False, False,
                                   250, "inter-router"))
            cmds.append(LinkAttach(first + 3 + 2 * p, conn_id, DIR_OUT, "d", None, False, False,
                                   250, "inter-router"))
    for link_id, direction, address in ((10, DIR_IN, None), (11, DIR_IN, "a"), (12, DIR_OUT, "a"),
                                        (13, DIR_OUT, "mc.x"), (15, DIR_OUT, "cl"),
                                        (16, DIR_IN, "cl"),
                                        (14, DIR_IN, "amqp:/_topo/0/R4/$management")):
        cmds.append(LinkAttach(link_id, 3, direction, "e", address, False, False, 4))
    # some credit everywhere to start with, so traffic flows from the first step
    cmds.extend(LinkFlow(link_id, 3, False)
                for link_id in [12, 13, 15] + [f + 1 + 2 * p for f in (100, 200) for p in range(11)])
    return cmds


OUT_LINKS = st.sampled_from([101, 111, 113, 201, 211, 219, 12, 13, 15])
_flows = st.builds(LinkFlow, OUT_LINKS, st.integers(0, 12), st.booleans())
_transfers = st.builds(Transfer, IDS, st.sampled_from([10, 11, 14, 16]), ROUTER_ADDRESSES,
                       st.booleans(), st.integers(0, 9), st.just(b"p"))
_router_transfers = st.builds(
    RouterTransfer, IDS, st.sampled_from([100, 110, 200, 210, 220]), ROUTER_ADDRESSES,
    st.booleans(), st.integers(0, 9), st.integers(0, 1), st.sampled_from([None, "0/R2", "0/R4"]),
    TRACES, st.just(b"r"))
_outcomes = st.one_of(
    st.builds(Disposition, IDS, STATES, st.booleans(),
              st.sampled_from([None, {"failed": True, "undeliverable": False}])),
    st.builds(SettleIn, IDS, STATES))
_agent = st.one_of(
    st.builds(ControlSend, st.sampled_from([-1, 1, 2]), ROUTER_ADDRESSES.filter(bool),
              st.just(b"c")),
    st.builds(_route_update, st.fixed_dictionaries({
        "R2": st.sampled_from(["R2", None]), "R3": st.sampled_from(["R3", "R2", None]),
        "R4": st.sampled_from(["R3", "R2", None])})),
    st.builds(RemoteAddress, st.sampled_from(["M0a", "M0mc.x", "M0cl", "M0z"]), ROUTER_IDS,
              st.booleans(), st.integers(-1, 5)))
_losses = st.one_of(
    st.builds(LinkDetach, st.sampled_from([101, 111, 12, 13, 211, 100]), st.booleans(),
              st.just("")),
    st.builds(ConnClosed, st.sampled_from([1, 2, 3]), st.just("")))
# weighted: mostly traffic, credit and outcomes; now and then the agent; rarely a loss
interior_commands = st.one_of(_flows, _flows, _transfers, _transfers, _router_transfers,
                              _router_transfers, _outcomes, _outcomes, _agent, _agent, _losses)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1), interior_commands), max_size=80))
def test_builds_agree_in_interior_mode(steps):
    kwargs = dict(addresses=RULES, seed=3, mode="interior")
    pure = pure_core.RouterCore("R1", **kwargs)
    compiled = compiled_core.RouterCore("R1", **kwargs)
    for core in (pure, compiled):
        core.handle(1, PeerHello(1, "agent", 1), 0.0)
        core.handle_batch(0, _interior_prologue(), 0.0)
        core.handle(1, _route_update({"R2": "R2", "R3": "R3", "R4": "R3"}), 0.0)
    for n, (peer, cmd) in enumerate(steps):
        apply(pure, peer, cmd, float(n))
        apply(compiled, peer, cmd, float(n))
        assert typed(pure.take_effects()) == typed(compiled.take_effects()), (n, cmd)
    assert pure.snapshot() == compiled.snapshot()
