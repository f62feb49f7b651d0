"""Node tracking: every router this router knows, and what the core is told about them.

Owns the table of known routers (instance, protocol version, mask-bit index, neighbour link,
pending LSR/MAR requests, when each became an orphan), the topology reports for the core
(:meth:`NodeTable.topology_update`: one :class:`RouterState` per known router, only those that
changed since the last report) and the set of routers the core says it can reach
(:meth:`NodeTable.set_reachable`). The routes themselves are computed by the core process
(``router_core/routetable.py``), not here. Time is the ``now`` argument. Must not import proton,
zmq, sockets, clocks, the other engines, or the route computation (``router_core.pathcomp``).

Rules (reference doc, "Behaviour"; ``node.py`` in 1.x):

* a router is learned from a HELLO, an RA, an LSR, an LSU naming it, or a peer list; a learned
  router's link state is requested (LSR) as soon as it is reachable (a neighbour or in my routes);
* a changed ``instance`` (from HELLO or RA) means it restarted: the facade drops its link state
  and mobile addresses and asks for its link state again;
* LSR and MAR go only to reachable routers (a neighbour, or a router the core's last
  ``Reachable`` named): requests wait here until the router is;
* a router with no link state of its own that is neither a neighbour nor named in anyone's peers
  is an orphan; still one ``orphan_grace`` seconds later (checked by the facade's once-a-second
  housekeeping) it is deleted and its index freed;
* every topology change (once per batch) reports to the core what changed; the first report
  of a node table (a new agent, restored or not) is a full one that replaces what the core held.

Resume after an agent restart (:meth:`snapshot_state` / :meth:`restore_state`): the known
routers keep their instance, protocol version and mask-bit index (so a restored router sees no
"restart" of anyone and the core computes the same routes from its full report).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Hashable, Iterable, List, Mapping, Optional, Set

from agent.routing.effects import RouterState, Topology
from agent.routing.messages import PROTOCOL_VERSION

__all__ = ["NodeTable", "Node"]


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
    def __init__(self, my_id: str, instance: int, area: str = "0",
                 orphan_grace: float = 3.0) -> None:
        self.my_id = my_id
        self.instance = instance
        self.area = area
        self.orphan_grace = float(orphan_grace)
        self.nodes: Dict[str, Node] = {}
        self.free_indexes: List[int] = []
        self.next_index = 1                       # 0 is me
        self.reachable_routers: FrozenSet[str] = frozenset()   # the core's last Reachable
        self.neighbours: Dict[str, Hashable] = {}
        self.pending: Set[str] = set()            # routers with need_lsr or need_mar
        self.generation = 0                       # bumped when reachability may have grown
        self.pending_checked_at: tuple = (-1, -1)
        self.sent: Optional[Dict[str, RouterState]] = None     # None: the next report is full

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
        self.reachable_routers = frozenset()
        self.sent = None

    # ---- reachability and requests -------------------------------------------------------------

    def reachable(self, router: str) -> bool:
        return router in self.neighbours or router in self.reachable_routers

    def set_reachable(self, routers: Iterable[str]) -> None:
        """The core's answer to a topology report: every router it now has a route to."""
        routers = frozenset(str(r) for r in routers)
        if routers != self.reachable_routers:
            self.reachable_routers = routers
            self.generation += 1

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

    def indexes(self) -> Dict[str, int]:
        """The mask-bit index of every known router (0 is me)."""
        return {self.my_id: 0, **{r: n.index for r, n in sorted(self.nodes.items())}}

    # ---- topology reports for the core ---------------------------------------------------------

    def topology_update(self, my_ls_seq: int, my_peers: Mapping[str, int],
                        remote: Mapping[str, tuple],
                        neighbours: Mapping[str, Hashable]) -> Optional[Topology]:
        """What the core must be told after a topology change, ``None`` if nothing changed.

        ``my_ls_seq``/``my_peers``: my link state; ``remote``: ``{router: (ls_seq, peers)}``
        of the link states held; ``neighbours``: neighbour id -> the control link (the core's
        conn_id) it is reached over. Every known router gets a :class:`RouterState` (one
        without link state has ``ls_seq`` 0 and no peers)."""
        self.neighbours = dict(neighbours)
        self.generation += 1                      # a neighbour may have come: requests are due
        states = {self.my_id: RouterState(self.my_id, self.instance, PROTOCOL_VERSION, 0,
                                          my_ls_seq, dict(my_peers), dict(self.neighbours))}
        for router, node in self.nodes.items():
            ls_seq, peers = remote.get(router, (0, {}))
            states[router] = RouterState(router, node.instance, node.pv, node.index, ls_seq,
                                         dict(peers), {})
        sent = self.sent
        self.sent = states
        if sent is None:
            return Topology(True, tuple(states[r] for r in sorted(states)), ())
        changed = tuple(states[r] for r in sorted(states) if sent.get(r) != states[r])
        gone = tuple(sorted(r for r in sent if r not in states))
        if not changed and not gone:
            return None
        return Topology(False, changed, gone)
