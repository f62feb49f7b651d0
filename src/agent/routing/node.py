"""Node tracking and path computation: every router this router knows, and the routes to them.

Owns the table of known routers (instance, protocol version, mask-bit index, neighbour link,
pending LSR/MAR requests, when each became an orphan), the route computation over the link-state
collection (``compute_routes`` through ``router_core.pathcomp_select``) and the ``router.node``
management view. Time is the ``now`` argument. Must not import proton, zmq, sockets, clocks, or
the other engines (it is handed plain data: the link-state collection and the neighbour table).

Rules (reference doc, "Behaviour"; ``node.py`` in 1.x):

* a router is learned from a HELLO, an RA, an LSR, an LSU naming it, or a peer list; a learned
  router's link state is requested (LSR) as soon as it is reachable (a neighbour or in my routes);
* a changed ``instance`` (from HELLO or RA) means it restarted: the facade drops its link state
  and mobile addresses and asks for its link state again;
* LSR and MAR go only to reachable routers: requests wait here until the router is;
* a router with no link state of its own that is neither a neighbour nor named in anyone's peers
  is an orphan; still one ``orphan_grace`` seconds later (checked by the facade's once-a-second
  housekeeping) it is deleted and its index freed;
* routes are recomputed from scratch on every topology change (once per batch).

Resume after an agent restart (:meth:`snapshot_state` / :meth:`restore_state`): the known
routers keep their instance, protocol version and mask-bit index (so a restored router sees no
"restart" of anyone and publishes the same table); routes are computed again by the facade.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Hashable, List, Mapping, Optional, Set

from agent.routing.effects import RoutingTable
from agent.routing.messages import PROTOCOL_VERSION
from router_core.pathcomp import Routes
from router_core.pathcomp_select import get_path_computer

__all__ = ["NodeTable", "Node"]

_EMPTY = Routes(next_hop={}, cost={}, radius=0, valid_origins={})


@dataclass
class Node:
    id: str
    index: int
    instance: Optional[int] = None
    pv: Optional[int] = None
    need_lsr: bool = True
    need_mar: bool = False
    orphan_since: Optional[float] = None


class NodeTable:
    def __init__(self, my_id: str, instance: int, area: str = "0", orphan_grace: float = 3.0,
                 path_computer: Optional[Callable[..., Routes]] = None) -> None:
        self.my_id = my_id
        self.instance = instance
        self.area = area
        self.orphan_grace = float(orphan_grace)
        self.compute = path_computer or get_path_computer()
        self.nodes: Dict[str, Node] = {}
        self.free_indexes: List[int] = []
        self.next_index = 1                       # 0 is me
        self.routes: Routes = _EMPTY
        self.neighbours: Dict[str, Hashable] = {}
        self.pending: Set[str] = set()            # routers with need_lsr or need_mar
        self.generation = 0                       # bumped by every route computation
        self.pending_checked_at: tuple = (-1, -1)
        self.published: Optional[RoutingTable] = None

    # ---- membership ----------------------------------------------------------------------------

    def learn(self, router: str, pv: Optional[int] = None) -> Optional[Node]:
        """The node for ``router`` (created on first sight); ``None`` for my own id."""
        if router == self.my_id:
            return None
        node = self.nodes.get(router)
        if node is None:
            if self.free_indexes:
                index = min(self.free_indexes)
                self.free_indexes.remove(index)
            else:
                index, self.next_index = self.next_index, self.next_index + 1
            node = self.nodes[router] = Node(router, index)
            self.request(router, "LSR")           # a new router's link state is wanted
        if node.pv is None and pv is not None:
            node.pv = pv
        return node

    def observe_instance(self, router: str, instance: int, pv: int) -> bool:
        """Record ``router``'s instance; ``True`` when it changed (the router restarted)."""
        node = self.learn(router, pv)
        if node is None:
            return False
        if node.instance is None:
            node.instance = instance
            return False
        if node.instance == instance:
            return False
        node.instance, node.pv = instance, pv
        self.request(router, "LSR")
        return True

    def delete(self, router: str) -> None:
        node = self.nodes.pop(router, None)
        self.pending.discard(router)
        if node is not None:
            self.free_indexes.append(node.index)

    def find_orphans(self, now: float, with_link_state: Set[str], named: Set[str]) -> List[str]:
        """Routers orphaned for ``orphan_grace`` (the caller deletes them): not a neighbour, not in
        ``with_link_state`` (routers whose link state has peers), not in ``named`` (routers some
        link state names as a peer)."""
        gone = []
        for router, node in self.nodes.items():
            if router in self.neighbours or router in with_link_state or router in named:
                node.orphan_since = None
            elif node.orphan_since is None:
                node.orphan_since = now
            elif node.orphan_since + self.orphan_grace <= now:
                gone.append(router)
        return gone

    # ---- resume after an agent restart ----------------------------------------------------------

    def snapshot_state(self) -> dict:
        """Plain (JSON-able) data: every known router's index, instance and protocol version."""
        return {"nodes": {router: {"index": node.index, "instance": node.instance, "pv": node.pv}
                          for router, node in sorted(self.nodes.items())},
                "free_indexes": sorted(self.free_indexes), "next_index": self.next_index}

    def restore_state(self, state: dict) -> None:
        """Take back :meth:`snapshot_state` (no request pending, no route computed yet)."""
        self.nodes = {}
        for router, node in (state.get("nodes") or {}).items():
            instance, pv = node.get("instance"), node.get("pv")
            self.nodes[str(router)] = Node(str(router), int(node["index"]),
                                           None if instance is None else int(instance),
                                           None if pv is None else int(pv), need_lsr=False)
        self.free_indexes = [int(i) for i in state.get("free_indexes", ())]
        used = [n.index for n in self.nodes.values()]
        self.next_index = max([int(state.get("next_index", 1)), *[i + 1 for i in used]])
        self.pending = set()
        self.pending_checked_at = (-1, -1)
        self.routes = _EMPTY
        self.published = None

    # ---- reachability and requests -------------------------------------------------------------

    def reachable(self, router: str) -> bool:
        return router in self.neighbours or router in self.routes.next_hop

    def request(self, router: str, kind: str) -> None:
        """Ask ``router`` for its link state (``"LSR"``) or mobile addresses (``"MAR"``) as soon
        as it is reachable."""
        node = self.nodes.get(router)
        if node is None:
            return
        if kind == "LSR":
            node.need_lsr = True
        else:
            node.need_mar = True
        self.pending.add(router)
        self.pending_checked_at = (-1, -1)

    def due_requests(self, only: Optional[str] = None) -> List[tuple]:
        """``("LSR"|"MAR", router)`` for every pending request whose router is now reachable
        (of router ``only``, if given); each request is handed out once."""
        out: List[tuple] = []
        if only is None:
            if self.pending_checked_at == (self.generation, len(self.pending)):
                return out                        # nothing became reachable or pending since
            routers = sorted(self.pending)
        else:
            routers = [only] if only in self.pending else []
        for router in routers:
            node = self.nodes.get(router)
            if node is None:
                self.pending.discard(router)
                continue
            if not self.reachable(router):
                continue
            self.pending.discard(router)
            if node.need_lsr:
                node.need_lsr = False
                out.append(("LSR", router))
            if node.need_mar:
                node.need_mar = False
                out.append(("MAR", router))
        if only is None:
            self.pending_checked_at = (self.generation, len(self.pending))
        return out

    # ---- routes --------------------------------------------------------------------------------

    def recompute(self, collection: Mapping[str, Mapping[str, int]],
                  neighbours: Mapping[str, Hashable]) -> Optional[RoutingTable]:
        """Run the path computation; the new :class:`RoutingTable` if it differs from the last."""
        self.neighbours = dict(neighbours)
        self.routes = self.compute(self.my_id, collection)
        self.generation += 1
        table = RoutingTable(next_hop=self.routes.next_hop, cost=self.routes.cost,
                             valid_origins=self.routes.valid_origins, radius=self.routes.radius,
                             neighbours=dict(self.neighbours), index=self.indexes())
        if table == self.published:
            return None
        self.published = table
        return table

    def indexes(self) -> Dict[str, int]:
        return {self.my_id: 0, **{r: n.index for r, n in sorted(self.nodes.items())}}

    # ---- management ----------------------------------------------------------------------------

    def view(self, peers_of: Callable[[str], List[str]], last_topology_change: Optional[float]
             ) -> List[dict]:
        """``router.node`` entities: me first, then every known router by id."""
        address = f"amqp:/_topo/{self.area}/"
        last = int(round(last_topology_change or 0))
        rows = [{"id": self.my_id, "protocolVersion": PROTOCOL_VERSION, "instance": self.instance,
                 "linkState": peers_of(self.my_id), "nextHop": "(self)", "validOrigins": [],
                 "address": address + self.my_id, "routerLink": None, "cost": 0, "index": 0,
                 "lastTopoChange": last}]
        for router in sorted(self.nodes):
            node = self.nodes[router]
            hop = self.routes.next_hop.get(router)
            link = self.neighbours.get(router)
            rows.append({
                "id": router, "protocolVersion": node.pv, "instance": node.instance,
                "linkState": peers_of(router),
                "nextHop": None if hop is None or hop == router else hop,
                "validOrigins": list(self.routes.valid_origins.get(router, [])),
                "address": address + router, "routerLink": None if link is None else str(link),
                "cost": self.routes.cost.get(router), "index": node.index,
                "lastTopoChange": last})
        return rows
