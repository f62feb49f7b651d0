"""The core process's route table (router_core/routetable.py): topology in, routes out.

Both path-computation builds run every test that computes (the compiled ``_pathcomp`` is
required where ``ROUTER_REQUIRE_EXTENSIONS=1``); Hypothesis checks that a table fed LinkState by
LinkState (with removals and a reset) holds exactly the routes the reference computes from the
same link states in one go, and that the two builds agree on every table.
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from common import ipc
from router_core import pathcomp
from router_core.routetable import RouteTable


def _builds():
    out = [pytest.param(pathcomp.compute_routes, id="pure")]
    try:
        compiled = importlib.import_module("router_core._pathcomp").compute_routes
    except ImportError:
        if os.environ.get("ROUTER_REQUIRE_EXTENSIONS") == "1":
            raise
        compiled = None
    out.append(pytest.param(compiled, id="compiled",
                            marks=pytest.mark.skipif(compiled is None,
                                                     reason="_pathcomp not built")))
    return out


def ls(router, peers, conns=None, instance=7, index=1, ls_seq=1):
    return ipc.LinkState(router, instance, 1, index, ls_seq, peers, conns or {})


def line(table):
    """A -2- B -3- C from A's side (A's neighbour B over conn 11)."""
    table.apply(ipc.TopologyReset())
    table.apply(ls("A", {"B": 2}, {"B": 11}, instance=100, index=0))
    table.apply(ls("B", {"A": 2, "C": 3}, index=1))
    table.apply(ls("C", {"B": 3}, index=2))


@pytest.mark.parametrize("compute", _builds())
def test_line_routes_update_reachable_and_view(compute):
    table = RouteTable("A", path_computer=compute)
    line(table)
    update, reachable = table.compute(1_700_000_000.4)
    assert update == ipc.RouteUpdate({"B": "B", "C": "B"}, {"B": 2, "C": 5},
                                     {"B": [], "C": []}, {"B": 11})
    assert reachable == ipc.Reachable(["B", "C"])
    assert table.compute(1_700_000_001.0) == (None, None)      # nothing applied since
    rows = {row["id"]: row for row in table.view()}
    assert list(rows) == ["A", "B", "C"]
    assert rows["A"] == {"id": "A", "protocolVersion": 1, "instance": 100, "linkState": ["B"],
                         "nextHop": "(self)", "validOrigins": [], "address": "amqp:/_topo/0/A",
                         "routerLink": None, "cost": None, "index": 0,
                         "lastTopoChange": 1_700_000_000}
    assert rows["B"]["nextHop"] is None and rows["B"]["routerLink"] == "11"
    assert rows["B"]["cost"] == 2 and rows["B"]["linkState"] == ["A", "C"]
    assert rows["C"]["nextHop"] == "B" and rows["C"]["cost"] == 5 and rows["C"]["index"] == 2
    # the same link states again (a reset and the same reports): not a topology change
    line(table)
    table.compute(1_700_000_050.0)
    assert table.view()[0]["lastTopoChange"] == 1_700_000_000
    # as 1.19: a router alone has never had a topology change (0), however often computed
    alone = RouteTable("Z", path_computer=compute)
    alone.apply(ls("Z", {}, index=0))
    alone.compute(1_700_000_000.0)
    assert alone.view()[0]["lastTopoChange"] == 0 and alone.view()[0]["cost"] is None
    # B's view of the same network: A's tree reaches C through B
    b = RouteTable("B", path_computer=compute)
    b.apply(ls("B", {"A": 2, "C": 3}, {"A": 1, "C": 2}, index=0))
    b.apply(ls("A", {"B": 2}))
    b.apply(ls("C", {"B": 3}, index=2))
    update, _ = b.compute(0.0)
    assert update.valid_origins == {"A": ["C"], "C": ["A"]}


def test_same_routes_again_is_no_update_but_a_reset_always_answers_reachable():
    table = RouteTable("A")
    line(table)
    table.compute(0.0)
    table.apply(ls("C", {"B": 3}, index=2, ls_seq=1))         # the same: nothing changes
    assert table.compute(1.0) == (None, None)
    line(table)                                               # a new agent: reset + all again
    update, reachable = table.compute(2.0)
    assert update is None and reachable == ipc.Reachable(["B", "C"])


def test_router_gone_and_a_lost_neighbour_change_the_routes():
    table = RouteTable("A")
    line(table)
    table.compute(0.0)
    table.apply(ipc.RouterGone("C"))
    table.apply(ls("B", {"A": 2}))
    update, reachable = table.compute(1.0)
    assert update.next_hop == {"B": "B"} and reachable.routers == ["B"]
    assert [row["id"] for row in table.view()] == ["A", "B"]
    table.apply(ls("A", {}, {}, index=0))                     # the neighbour is gone too
    update, reachable = table.compute(2.0)
    assert update == ipc.RouteUpdate({}, {}, {}, {}) and reachable.routers == []


def test_a_reset_forgets_every_router_the_new_agent_does_not_name():
    table = RouteTable("A")
    line(table)
    table.compute(0.0)
    table.apply(ipc.TopologyReset())
    table.apply(ls("A", {"B": 2}, {"B": 11}, index=0))
    table.apply(ls("B", {"A": 2}))
    update, reachable = table.compute(1.0)
    assert update.next_hop == {"B": "B"} and reachable.routers == ["B"]
    assert "C" not in {row["id"] for row in table.view()}


@pytest.mark.parametrize("bad", [
    ls("", {}), ls("B", {"C": 0}), ls("B", {"C": "1"}), ls("B", {"C": pathcomp.MAX_LINK_COST + 1}),
    ls("B", {3: 1}), ls("B", {}, {"C": "11"}), ls("B", [], {}), ls("B", {}, instance="7"),
])
def test_malformed_link_state_is_refused_and_changes_nothing(bad):
    table = RouteTable("A")
    line(table)
    table.compute(0.0)
    before = dict(table.routers)
    with pytest.raises(ValueError):
        table.apply(bad)
    assert table.routers == before and table.compute(1.0) == (None, None)


def test_not_a_topology_message_is_refused():
    with pytest.raises(ValueError):
        RouteTable("A").apply(ipc.RouterLinkDown(3))


def test_the_agent_no_longer_imports_the_route_computation():
    """The routing protocol and the management agent run without pathcomp: only the core
    process computes routes."""
    code = ("import sys, agent.controlplane, agent.interior, agent.routing; "
            "print(sorted(m for m in sys.modules if 'pathcomp' in m or 'pathselect' in m "
            "or 'routetable' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---- Hypothesis: incremental feeding == one computation, and the builds agree -----------------
ROUTERS = [f"R{i}" for i in range(6)]
peers_st = st.dictionaries(st.sampled_from(ROUTERS), st.integers(1, 5), max_size=4)
step_st = st.one_of(
    st.tuples(st.just("ls"), st.sampled_from(ROUTERS), peers_st),
    st.tuples(st.just("gone"), st.sampled_from(ROUTERS[1:]), st.just({})),
    st.tuples(st.just("reset"), st.just(""), st.just({})),
    st.tuples(st.just("compute"), st.just(""), st.just({})),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step_st, max_size=30))
def test_incremental_table_equals_the_reference_on_the_same_link_states(steps):
    builds = [p.values[0] for p in _builds() if p.values[0] is not None]
    tables = [RouteTable("R0", path_computer=compute) for compute in builds]
    held: dict = {}                               # what the core should hold now
    for kind, router, peers in steps:
        if kind == "ls":
            msg = ls(router, peers, {p: 10 + i for i, p in enumerate(sorted(peers))}
                     if router == "R0" else {})
            held[router] = {p: c for p, c in peers.items() if p != router}
        elif kind == "gone":
            msg = ipc.RouterGone(router)
            held.pop(router, None)
        elif kind == "reset":
            msg = ipc.TopologyReset()
            held = {}
        else:
            for table in tables:
                table.compute(0.0)
            continue
        for table in tables:
            table.apply(msg)
    graph = {"R0": held.get("R0", {})}
    graph.update({r: p for r, p in held.items() if r != "R0" and p})
    expected = pathcomp.compute_routes("R0", graph)
    for table in tables:
        table.compute(0.0)
        assert table.routes == expected
        assert set(table.routes.next_hop) == set(table.reachable_sent or [])
        assert [row["id"] for row in table.view()] == ["R0"] + sorted(r for r in held
                                                                      if r != "R0")
