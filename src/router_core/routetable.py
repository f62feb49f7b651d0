"""The core process's route table: the topology the routing protocol reports, and its routes.

Owns what the core process knows of the network of routers: one entry per router the agent's
routing protocol knows (``ipc.LinkState``: instance, protocol version, mask-bit index, link-state
sequence, advertised peers with their costs, and for this router the inter-router connection of
each neighbour), the route computation over it (``router_core.pathcomp_select``: the compiled
``_pathcomp``, or the pure ``pathcomp`` reference with ``ROUTER_NO_EXTENSIONS=1``), and the
``router.node`` management rows (``qdstat -n``) that the core's snapshot carries.

How it is driven (``router_core/coreproc.py``): :meth:`RouteTable.apply` takes the agent's
``LinkState`` / ``RouterGone`` / ``TopologyReset`` messages; :meth:`RouteTable.compute` runs once
after a run of them (before the next command of that batch, so a ``ControlSend`` that follows
them in the batch is routed with the new routes) and returns the ``ipc.RouteUpdate`` the core
applies (only when the routes changed: ``RouterCore`` handles it as before) and the
``ipc.Reachable`` answer for the agent (only when the reachable set changed, or after a reset).

The graph handed to the computation is exactly the one the agent built before (its
``linkstate.collection()``): this router's peers, plus every other router's peers when it has
any (a router without peers is a stand-in if named, else unreachable: the same routes).

Sans-I/O and clock-free (the caller passes the wall-clock time of a computation). Must not
import zmq, proton, sockets, router_io or agent.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

from common.ipc import LinkState, Reachable, RouterGone, RouteUpdate, TopologyReset
from router_core.pathcomp import MAX_LINK_COST, Routes
from router_core.pathcomp_select import get_path_computer

__all__ = ["RouteTable", "TOPOLOGY_TYPES", "RouterEntry"]

#: The agent's messages a RouteTable takes (coreproc hands them here, never to RouterCore).
TOPOLOGY_TYPES = (LinkState, RouterGone, TopologyReset)

_EMPTY = Routes(next_hop={}, cost={}, radius=0, valid_origins={})


class RouterEntry(NamedTuple):
    """One router as the last LinkState for it gave it (validated)."""

    instance: Optional[int]
    pv: Optional[int]
    index: int
    ls_seq: int
    peers: Dict[str, int]
    conns: Dict[str, int]


def _opt_int(value: object, what: str) -> Optional[int]:
    if type(value) is not int:
        raise ValueError(f"{what} is not an int: {value!r}")
    return None if value < 0 else value


def _entry(msg: LinkState) -> RouterEntry:
    """Validate one LinkState (ValueError with what is wrong)."""
    if not isinstance(msg.router, str) or not msg.router:
        raise ValueError(f"router id is not a non-empty string: {msg.router!r}")
    if not isinstance(msg.peers, dict) or not isinstance(msg.conns, dict):
        raise ValueError(f"router {msg.router}: peers and conns must be maps")
    peers: Dict[str, int] = {}
    for peer, cost in msg.peers.items():
        if not isinstance(peer, str) or type(cost) is not int or not 1 <= cost <= MAX_LINK_COST:
            raise ValueError(f"router {msg.router}: bad peer {peer!r} cost {cost!r} "
                             f"(a router id and an int 1..{MAX_LINK_COST})")
        if peer != msg.router:
            peers[peer] = cost
    conns: Dict[str, int] = {}
    for peer, conn_id in msg.conns.items():
        if not isinstance(peer, str) or type(conn_id) is not int:
            raise ValueError(f"router {msg.router}: bad neighbour connection {peer!r}: "
                             f"{conn_id!r}")
        conns[peer] = conn_id
    index = _opt_int(msg.index, "index")
    ls_seq = _opt_int(msg.ls_seq, "ls_seq")
    return RouterEntry(_opt_int(msg.instance, "instance"), _opt_int(msg.pv, "pv"),
                       0 if index is None else index, 0 if ls_seq is None else ls_seq,
                       peers, conns)


class RouteTable:
    def __init__(self, my_id: str, area: str = "0",
                 path_computer: Optional[Callable[[str, Mapping[str, Mapping[str, int]]],
                                                  Routes]] = None) -> None:
        self.my_id = my_id
        self.area = area
        self.compute_routes = path_computer or get_path_computer()
        self.routers: Dict[str, RouterEntry] = {}    # this router included, once reported
        self.routes: Routes = _EMPTY
        self.neighbours: Dict[str, int] = {}         # neighbour id -> conn_id (routes in use)
        self.dirty = False                           # applied since the last compute
        self.reset = False                           # a TopologyReset since the last compute
        self.published: Optional[tuple] = None       # the last RouteUpdate's fields
        self.reachable_sent: Optional[List[str]] = None
        self.last_change = 0                         # wall-clock seconds of the last change
        self.last_graph: Dict[str, Dict[str, int]] = {my_id: {}}  # (0 until it first changes)

    # ---- input ---------------------------------------------------------------------------------

    def apply(self, msg: tuple) -> None:
        """Take one topology message (raise ValueError, changing nothing, if it is malformed)."""
        kind = type(msg)
        if kind is LinkState:
            entry = _entry(msg)
            if self.routers.get(msg.router) != entry:
                self.routers[msg.router] = entry
                self.dirty = True
        elif kind is RouterGone:
            if self.routers.pop(msg.router, None) is not None:
                self.dirty = True
        elif kind is TopologyReset:
            self.routers = {}
            self.dirty = self.reset = True
        else:
            raise ValueError(f"not a topology message: {kind.__name__}")

    def graph(self) -> Dict[str, Dict[str, int]]:
        """The link states the routes are computed over (see the module docstring)."""
        mine = self.routers.get(self.my_id)
        states: Dict[str, Dict[str, int]] = {self.my_id: dict(mine.peers) if mine else {}}
        for router, entry in self.routers.items():
            if router != self.my_id and entry.peers:
                states[router] = entry.peers
        return states

    def compute(self, wall_now: float) -> Tuple[Optional[RouteUpdate], Optional[Reachable]]:
        """Recompute after :meth:`apply` calls: ``(RouteUpdate or None, Reachable or None)``
        (each ``None`` when unchanged since it was last returned; nothing applied: both None)."""
        if not self.dirty:
            return None, None
        self.dirty = False
        reset, self.reset = self.reset, False
        graph = self.graph()
        self.routes = self.compute_routes(self.my_id, graph)
        mine = self.routers.get(self.my_id)
        self.neighbours = dict(mine.conns) if mine else {}
        if graph != self.last_graph:  # as 1.19: a router alone never had a topology change
            self.last_graph = graph
            self.last_change = int(round(wall_now))
        fields = (dict(self.routes.next_hop), dict(self.routes.cost),
                  {r: list(o) for r, o in self.routes.valid_origins.items()},
                  dict(self.neighbours))
        update = None
        if fields != self.published:
            self.published = fields
            update = RouteUpdate(*fields)
        reachable = sorted(self.routes.next_hop)
        answer = None
        if reset or reachable != self.reachable_sent:
            self.reachable_sent = reachable
            answer = Reachable(reachable)
        return update, answer

    # ---- management ----------------------------------------------------------------------------

    def view(self) -> List[dict]:
        """``router.node`` rows: this router first, then every other known router by id."""
        address = f"amqp:/_topo/{self.area}/"
        last = self.last_change
        routes = self.routes
        mine = self.routers.get(self.my_id)
        rows = [{"id": self.my_id, "protocolVersion": mine.pv if mine else None,
                 "instance": mine.instance if mine else None,
                 "linkState": sorted(mine.peers) if mine else [], "nextHop": "(self)",
                 "validOrigins": [], "address": address + self.my_id, "routerLink": None,
                 "cost": None, "index": 0, "lastTopoChange": last}]  # 1.19: no cost to itself
        for router in sorted(self.routers):
            if router == self.my_id:
                continue
            entry = self.routers[router]
            hop = routes.next_hop.get(router)
            link = self.neighbours.get(router)
            rows.append({
                "id": router, "protocolVersion": entry.pv, "instance": entry.instance,
                "linkState": sorted(entry.peers),
                "nextHop": None if hop is None or hop == router else hop,
                "validOrigins": list(routes.valid_origins.get(router, [])),
                "address": address + router, "routerLink": None if link is None else str(link),
                "cost": routes.cost.get(router), "index": entry.index,
                "lastTopoChange": last})
        return rows
