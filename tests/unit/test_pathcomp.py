"""Route computation (interior routing protocol): every test runs on both builds.

Hand-made topologies are drawn in the docstrings (``A -1- B`` is a link of cost 1 advertised in both
directions; ``A -1-> B`` is advertised by A only; ``(X)`` is a stand-in with no link state of its
own). Hypothesis then checks, on random weighted directed graphs, that the two builds agree with
each other and with an oracle that does not use Dijkstra: Floyd-Warshall costs plus the declarative
tie rule (a router's parent is its lowest-id least-cost predecessor). No processes, no sockets.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router_core import pathcomp
from router_core.pathcomp import MAX_LINK_COST, Routes

try:
    from router_core import _pathcomp
except ImportError:         # not built: the compiled param skips
    _pathcomp = None

BUILDS = {"python": pathcomp, "cython": _pathcomp}


@pytest.fixture(params=sorted(BUILDS))
def compute(request):
    if BUILDS[request.param] is None:
        pytest.skip("router_core._pathcomp is not built "
                    "(ROUTER_ONLY_EXT=router_core._pathcomp python setup.py build_ext --inplace)")
    return BUILDS[request.param].compute_routes


def both() -> List:
    """Builds for Hypothesis tests, which compare them directly instead of via the fixture."""
    return [m.compute_routes for m in (pathcomp, _pathcomp) if m is not None]


def links(*specs: str) -> Dict[str, Dict[str, int]]:
    """``"A-1-B"`` adds both directions at cost 1; ``"A-1>B"`` only A->B."""
    ls: Dict[str, Dict[str, int]] = {}
    for spec in specs:
        one_way = ">" in spec
        a, cost, b = spec.replace(">", "-").split("-")
        ls.setdefault(a, {})[b] = int(cost)
        ls.setdefault(b, {})
        if not one_way:
            ls[b][a] = int(cost)
    return ls


# ---- hand-made topologies ------------------------------------------------------------------

def test_me_alone(compute):
    """A, with or without a link state of its own."""
    empty = Routes(next_hop={}, cost={}, radius=0, valid_origins={})
    assert compute("A", {}) == empty
    assert compute("A", {"A": {}}) == empty


def test_line(compute):
    """A -1- B -1- C -1- D"""
    ls = links("A-1-B", "B-1-C", "C-1-D")
    assert compute("A", ls) == Routes(
        next_hop={"B": "B", "C": "B", "D": "B"}, cost={"B": 1, "C": 2, "D": 3}, radius=3,
        valid_origins={"B": [], "C": [], "D": []})          # A is an end: nobody transits it
    assert compute("B", ls) == Routes(
        next_hop={"A": "A", "C": "C", "D": "C"}, cost={"A": 1, "C": 1, "D": 2}, radius=2,
        valid_origins={"A": ["C", "D"], "C": ["A"], "D": ["A"]})


def test_triangle_with_asymmetric_costs(compute):
    """Directed costs; each router advertises its own out-edges.

           A
      1 ↗↙ 10   5 ↘↖ 1         A->B 1, B->A 10, A->C 5, C->A 1
       B  ⇄  C                 B->C 1, C->B 1
           1
    """
    ls = {"A": {"B": 1, "C": 5}, "B": {"A": 10, "C": 1}, "C": {"A": 1, "B": 1}}
    assert compute("A", ls) == Routes(
        next_hop={"B": "B", "C": "B"}, cost={"B": 1, "C": 2}, radius=2,
        valid_origins={"B": [], "C": []})
    # B reaches A more cheaply through C (1 + 1) than over its own direct edge (10).
    b = compute("B", ls)
    assert (b.next_hop, b.cost, b.radius) == ({"A": "C", "C": "C"}, {"A": 2, "C": 1}, 2)
    assert b.valid_origins == {"A": [], "C": ["A"]}    # A->C goes A->B->C (2 < 5)
    c = compute("C", ls)
    assert (c.next_hop, c.cost) == ({"A": "A", "B": "B"}, {"A": 1, "B": 1})
    assert c.valid_origins == {"A": ["B"], "B": []}    # B->A goes B->C->A


def test_square_with_a_diagonal(compute):
    """Equal-cost detours around the square are decided by the lower predecessor id.

        A --1-- B
        | \\     |
        1   1   1
        |     \\ |
        D --1-- C
    """
    ls = links("A-1-B", "B-1-C", "C-1-D", "D-1-A", "A-1-C")
    assert compute("A", ls) == Routes(
        next_hop={"B": "B", "C": "C", "D": "D"}, cost={"B": 1, "C": 1, "D": 1}, radius=1,
        # B->D ties between B-A-D and B-C-D: predecessors A and C, A sorts lower, so via me.
        valid_origins={"B": ["D"], "C": [], "D": ["B"]})
    b = compute("B", ls)
    assert b.next_hop == {"A": "A", "C": "C", "D": "A"}
    assert b.cost == {"A": 1, "C": 1, "D": 2}
    assert b.valid_origins == {"A": [], "C": [], "D": []}


def test_ties_broken_by_id(compute):
    """Two equal-cost ways from A to D: through B or through C; B sorts lower.

            B
      A <       > D          all costs 1
            C
    """
    r = compute("A", links("A-1-B", "A-1-C", "B-1-D", "C-1-D"))
    assert r.next_hop["D"] == "B" and r.cost["D"] == 2
    # Renaming so that the other branch sorts lower flips the choice.
    r = compute("A", links("A-1-Z", "A-1-M", "Z-1-D", "M-1-D"))
    assert r.next_hop["D"] == "M"


def test_tie_rule_is_lowest_predecessor_not_lowest_first_hop(compute):
    """E costs 3 both ways; E's predecessors are Y and D, and D < Y, so E goes via C.

      A -1- B -1- Y -1- E
      A -1- C -1- D -1- E
    """
    ls = links("A-1-B", "B-1-Y", "Y-1-E", "A-1-C", "C-1-D", "D-1-E")
    r = compute("A", ls)
    assert r.cost["E"] == 3 and r.next_hop["E"] == "C"
    assert r.next_hop["Y"] == "B"


def test_stand_in_peer_is_reachable_but_never_transit(compute):
    """X and S have no link state; they are reachable only through routers that advertise them.

      A -1- B -2-> (X)          C -1-> (S) <-1- A      (C is reachable from nowhere)
    """
    ls = {"A": {"B": 1, "S": 1}, "B": {"A": 1, "X": 2}, "C": {"S": 1}}
    r = compute("A", ls)
    assert r == Routes(next_hop={"B": "B", "S": "S", "X": "B"}, cost={"B": 1, "S": 1, "X": 3},
                       radius=2, valid_origins={"B": [], "S": ["B"], "X": []})  # B-A-S


def test_one_way_advertisement_is_usable(compute):
    """A -1-> B   (B has advertised nothing yet: the directed edge is enough)"""
    r = compute("A", links("A-1>B"))
    assert r.next_hop == {"B": "B"} and r.cost == {"B": 1}
    assert compute("B", links("A-1>B")) == Routes({}, {}, 0, {})


def test_isolated_router_is_absent(compute):
    """A -1- B      Z (link state, no peers)      Q -1- R (a separate island)"""
    ls = {**links("A-1-B", "Q-1-R"), "Z": {}}
    r = compute("A", ls)
    assert r == Routes(next_hop={"B": "B"}, cost={"B": 1}, radius=1, valid_origins={"B": []})


def test_valid_origin_may_be_unreachable_from_me(compute):
    """R -1-> A -1-> B: R's path to B passes through me (A) although I cannot reach R."""
    r = compute("A", links("R-1>A", "A-1>B"))
    assert r.next_hop == {"B": "B"}
    assert r.valid_origins == {"B": ["R"]}


def test_valid_origins_star(compute):
    """Hub H; every spoke's path to every other spoke passes through H.

          S1
          |1
    S4 -1-H-1- S2      (plus S3 -5- S2, a costly shortcut that S3 does not use)
          |1
          S3
    """
    ls = links("H-1-S1", "H-1-S2", "H-1-S3", "H-1-S4", "S3-5-S2")
    r = compute("H", ls)
    assert r.valid_origins == {"S1": ["S2", "S3", "S4"], "S2": ["S1", "S3", "S4"],
                               "S3": ["S1", "S2", "S4"], "S4": ["S1", "S2", "S3"]}
    assert r.radius == 1


def test_self_loop_ignored_and_no_128_router_cap(compute):
    names = [f"R{i:04d}" for i in range(300)]
    ls = links(*(f"{a}-1-{b}" for a, b in zip(names, names[1:])))
    ls["R0000"]["R0000"] = 7
    r = compute("R0000", ls)
    assert r.radius == 299 and r.cost["R0299"] == 299 and r.next_hop["R0299"] == "R0001"
    middle = compute("R0150", ls)
    assert middle.valid_origins["R0299"] == names[:150]


@pytest.mark.parametrize("cost, error", [(0, ValueError), (-1, ValueError),
                                         (MAX_LINK_COST + 1, ValueError), (1.5, TypeError),
                                         ("1", TypeError)])
def test_bad_costs_rejected(compute, cost, error):
    with pytest.raises(error):
        compute("A", {"A": {"B": cost}})


def test_large_costs_do_not_overflow(compute):
    names = [f"R{i:03d}" for i in range(100)]
    r = compute("R000", links(*(f"{a}-{MAX_LINK_COST}-{b}" for a, b in zip(names, names[1:]))))
    assert r.cost["R099"] == 99 * MAX_LINK_COST


# ---- Hypothesis: both builds vs. an oracle with no Dijkstra in it --------------------------

INF = float("inf")


def oracle(my_id: str, link_states: Mapping[str, Mapping[str, int]]):
    """(Routes, dist): Floyd-Warshall costs; parent = lowest-id least-cost predecessor."""
    nodes = sorted({my_id, *link_states, *(p for peers in link_states.values() for p in peers)})
    w = {(a, b): c for a, peers in link_states.items() for b, c in peers.items() if a != b}
    dist = {(a, b): 0 if a == b else w.get((a, b), INF) for a in nodes for b in nodes}
    for k in nodes:
        for i in nodes:
            dik = dist[i, k]
            if dik == INF:
                continue
            for j in nodes:
                if dik + dist[k, j] < dist[i, j]:
                    dist[i, j] = dik + dist[k, j]
    into = {v: sorted(u for u in nodes if (u, v) in w) for v in nodes}
    parent = {(root, v): next(u for u in into[v] if dist[root, u] + w[u, v] == dist[root, v])
              for root in nodes for v in nodes if v != root and dist[root, v] < INF}

    def path(root: str, dest: str) -> List[str]:
        """root .. dest along root's tie-broken tree."""
        hops = [dest]
        while hops[-1] != root:
            hops.append(parent[root, hops[-1]])
        return hops[::-1]

    reachable = [d for d in nodes if d != my_id and dist[my_id, d] < INF]
    mine = {d: path(my_id, d) for d in reachable}
    valid_origins: Dict[str, List[str]] = {d: [] for d in reachable}
    for origin in nodes:
        if origin == my_id:
            continue
        for d in reachable:
            if d != origin and dist[origin, d] < INF and my_id in path(origin, d)[1:-1]:
                valid_origins[d].append(origin)
    routes = Routes(next_hop={d: p[1] for d, p in mine.items()},
                    cost={d: dist[my_id, d] for d in reachable},
                    radius=max((len(p) - 1 for p in mine.values()), default=0),
                    valid_origins=valid_origins)
    return routes, dist


@st.composite
def graphs(draw, max_nodes: int = 30):
    ids = draw(st.lists(st.text(alphabet="abAB0_/", min_size=1, max_size=3),
                        min_size=1, max_size=max_nodes, unique=True))
    costs = st.one_of(st.integers(1, 3), st.integers(1, MAX_LINK_COST))   # small ones make ties
    link_states = {}
    for router in draw(st.lists(st.sampled_from(ids), unique=True)):     # the rest: stand-ins
        link_states[router] = draw(st.dictionaries(st.sampled_from(ids), costs, max_size=6))
    return draw(st.sampled_from(ids)), link_states


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_builds_agree_with_each_other_and_the_oracle(case):
    my_id, link_states = case
    expected, dist = oracle(my_id, link_states)
    for compute in both():
        got = compute(my_id, link_states)
        assert got == expected
        assert list(got.next_hop) == sorted(got.next_hop)   # id order, both builds
        # Independently of the tie rule: the next hop starts some least-cost path.
        for d, hop in got.next_hop.items():
            assert link_states[my_id][hop] + dist[hop, d] == got.cost[d]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 40), st.randoms(use_true_random=False))
def test_dense_symmetric_meshes_agree(n, rnd):
    """Full meshes with small costs: many ties, every router a possible transit."""
    names = [f"R{i:02d}" for i in range(n)]
    ls = {a: {} for a in names}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ls[a][b] = ls[b][a] = rnd.randint(1, 3)
    my_id = rnd.choice(names)
    results = [compute(my_id, ls) for compute in both()]
    assert all(r == results[0] for r in results)
    assert set(results[0].next_hop) == set(names) - {my_id}
