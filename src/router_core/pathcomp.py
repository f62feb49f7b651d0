"""Route computation for the interior routing protocol: the pure-Python reference build.

Owns ``compute_routes(my_id, link_states) -> Routes`` and the types both builds share
(:class:`Routes`, ``MAX_LINK_COST``). The compiled build ``router_core._pathcomp`` has the same API,
imports these types from here, and must return an equal ``Routes`` for every input; callers pick a
build through ``router_core.pathcomp_select``. Sans-I/O and clock-free: must not import zmq, proton,
sockets, logging handlers or any other router module.

The rules (reference doc, "Behaviour: Routes"):

* **Graph.** ``link_states[A][B]`` is the cost of the *directed* edge A→B, exactly as A advertised
  it in its ``peers``. An edge is usable as soon as A advertises it: unlike Qpid Dispatch's
  ``path.py`` we do not wait for B to advertise A too, nor invent a reverse edge — the doc says
  "Dijkstra from me over the directed costs advertised in every router's peers".
* **Stand-ins.** Every router named only as a peer (no link state of its own) gets a stand-in
  node with *no* outgoing edges, so it stays reachable through whoever advertises it but is never
  a transit hop. ``my_id`` is always a node, even with no link state (then nothing is reachable).
* **Costs** are ints in ``1..MAX_LINK_COST`` (``ValueError`` otherwise, ``TypeError`` for a
  non-int). Positive costs keep the tie rule below well defined; the cap keeps every path sum in
  a signed 64-bit integer for the compiled build. A router listing itself as a peer is ignored.
* **Ties** are broken by router id order (Python ``str`` ordering): of all the predecessors ``u``
  that give ``v`` its least cost (``cost[u] + w(u, v) == cost[v]``), ``v``'s parent in the
  shortest-path tree is the one whose id sorts lowest. Because costs are positive, all those
  ``u`` are settled before ``v``, so Dijkstra implements this by replacing ``v``'s parent on an
  equal-cost relaxation from a lower id. The heap orders ``(cost, id)``, which makes the settle
  order deterministic too, though the result does not depend on it.

Outputs, all keyed by router id and built in id order:

* ``next_hop[D]``: my neighbour on the tree path to D, for every router D ≠ me reachable from me;
* ``cost[D]``: the least total cost to D (same keys); unreachable routers are absent from both;
* ``radius``: the greatest hop count in my shortest-path tree (0 when nothing is reachable);
* ``valid_origins[D]``: for every D in ``next_hop``, the sorted ids of the routers R ≠ me, R ≠ D
  whose own shortest-path tree (same graph, same tie rule) reaches D through me. Balanced
  forwarding toward D accepts only messages whose ingress router is listed. A router R that I
  cannot reach may still be a valid origin (directed graph: R reaches me, I do not reach R).
"""
from __future__ import annotations

import heapq
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

__all__ = ["Routes", "compute_routes", "MAX_LINK_COST", "IMPLEMENTATION"]

IMPLEMENTATION = "python"

#: Largest accepted link cost. Any simple path of fewer than 2**32 hops then sums below 2**63.
MAX_LINK_COST = 2**31 - 1


class Routes(NamedTuple):
    """The result of one route computation; equal (``==``) across builds for the same input."""

    next_hop: Dict[str, str]
    cost: Dict[str, int]
    radius: int
    valid_origins: Dict[str, List[str]]


Graph = Dict[str, Dict[str, int]]


def _graph(my_id: str, link_states: Mapping[str, Mapping[str, int]]) -> Graph:
    """Validated adjacency with a stand-in (no outgoing edges) for every router without link state."""
    graph: Graph = {my_id: {}}
    for router, peers in link_states.items():
        edges = graph.setdefault(router, {})
        for peer, cost in peers.items():
            if not isinstance(cost, int):
                raise TypeError(f"link cost {router!r}->{peer!r} is not an int: {cost!r}")
            if not 1 <= cost <= MAX_LINK_COST:
                raise ValueError(f"link cost {router!r}->{peer!r} out of range "
                                 f"1..{MAX_LINK_COST}: {cost}")
            graph.setdefault(peer, {})
            if peer != router:
                edges[peer] = cost
    return graph


def _shortest_path_tree(graph: Graph, root: str
                        ) -> Tuple[Dict[str, int], Dict[str, Optional[str]], List[str]]:
    """Dijkstra from ``root``: (cost, parent, settle order) for every reachable router."""
    cost: Dict[str, int] = {root: 0}
    parent: Dict[str, Optional[str]] = {root: None}
    settled: List[str] = []
    done = set()
    queue = [(0, root)]
    while queue:
        dist_u, u = heapq.heappop(queue)
        if u in done:
            continue                      # a stale entry left by a later cost decrease
        done.add(u)
        settled.append(u)
        for v, weight in graph[u].items():
            if v in done:
                continue
            alt = dist_u + weight
            if v not in cost or alt < cost[v]:
                cost[v] = alt
                parent[v] = u
                heapq.heappush(queue, (alt, v))
            elif alt == cost[v] and u < parent[v]:  # type: ignore[operator]
                parent[v] = u             # equal cost: the lower predecessor id wins
    return cost, parent, settled


def compute_routes(my_id: str, link_states: Mapping[str, Mapping[str, int]]) -> Routes:
    """Next hop, cost, radius and valid origins from ``my_id`` (see the module docstring)."""
    graph = _graph(my_id, link_states)
    cost, parent, settled = _shortest_path_tree(graph, my_id)

    next_hop: Dict[str, str] = {}
    hops: Dict[str, int] = {my_id: 0}
    for v in settled[1:]:                 # a parent is always settled before its children
        u = parent[v]
        assert u is not None
        hops[v] = hops[u] + 1
        next_hop[v] = v if u == my_id else next_hop[u]

    destinations = sorted(next_hop)
    valid_origins: Dict[str, List[str]] = {d: [] for d in destinations}
    for origin in sorted(graph):
        if origin == my_id:
            continue
        _, origin_parent, origin_settled = _shortest_path_tree(graph, origin)
        through_me = {my_id}              # me and, below, every router in my subtree
        for v in origin_settled[1:]:
            if origin_parent[v] in through_me:
                through_me.add(v)
                valid_origins[v].append(origin)

    return Routes(next_hop={d: next_hop[d] for d in destinations},
                  cost={d: cost[d] for d in destinations},
                  radius=max(hops.values()),
                  valid_origins=valid_origins)
