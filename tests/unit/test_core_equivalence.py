"""The compiled core and the pure-Python reference agree: same effects, same counters.

Random command sequences over a small id space (so links, deliveries and dispositions really meet)
are fed to both builds; after every command the effect streams must be identical (values and
NamedTuple types), and at the end the management snapshots. Runtime address reconfiguration
(``set_address_config``) is one of the random steps.
"""
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from router_core import core as pure_core
from router_core.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_NONE, STATE_RECEIVED, STATE_REJECTED,
    STATE_RELEASED, ConnClosed, ConnOpened, Disposition, LinkAttach, LinkDetach, LinkFlow,
    SettleIn, Transfer)
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
              st.just(""), st.booleans(), st.just(250)),
    st.builds(ConnClosed, CONNS, st.just("")),
    st.builds(LinkAttach, LINKS, CONNS, st.sampled_from([DIR_IN, DIR_OUT]), st.just("n"),
              ADDRESSES, st.booleans(), st.booleans(), st.integers(1, 4)),
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
       st.sampled_from(["balanced", "closest", "multicast"]))
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
