"""An in-memory network of :class:`RoutingEngine` s driven by a fake clock (test helper).

No processes, sockets or clocks: every router is a RoutingEngine plus, standing for its core
process, a :class:`router_core.routetable.RouteTable` that takes the engine's ``Topology``
reports (as the IPC messages ``agent/interior.py`` makes of them), computes the routes and
answers the engine's ``set_reachable`` at once; every ``Send`` effect is delivered to the engines
it addresses after ``latency`` seconds per hop:

* HELLO (``via_link``) goes to the router at the other end of that link, on its link id;
* routed addresses (``_topo/0/<id>/...``) follow the next hops of each router's core route
  table, hop by hop from the sender, over live links; no route, a dead link or a loop
  drops the message, as the core would;
* flooded addresses (``_topo/0/all/...``) are delivered once to every live router connected to the
  sender over live links, ``latency`` x hop count later. Simplification: 1.x floods hop by hop
  along next hops with trace-based loop suppression, which in a connected network reaches the same
  routers; delivering exactly once per router is what its per-hop dedupe achieves.

Bodies cross the "wire" as the encoded dicts (with proton types), so every delivery exercises
``encode``/``decode``. A router that is *killed* goes silent without its links going down
(neighbours notice by HELLO expiry); ``disconnect`` is a clean link loss.
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from typing import Dict, Iterable, List, Optional, Set, Tuple

from agent.interior import topology_messages
from agent.routing import (Log, RemoteAddressAdded, RemoteAddressRemoved, RoutingEngine, Send,
                           Topology)
from agent.routing.messages import HELLO_ADDRESS, decode
from router_core.pathcomp_select import get_path_computer
from router_core.addressing import normalize
from router_core.routetable import RouteTable


class Network:
    def __init__(self, latency: float = 0.01, seed: int = 0, **engine_kwargs) -> None:
        self.latency = latency
        self.engine_kwargs = engine_kwargs
        self.rng = random.Random(seed)
        self.now = 0.0
        self.engines: Dict[str, RoutingEngine] = {}
        self.tables: Dict[str, RouteTable] = {}  # each router's core: topology and routes
        self.updates: Dict[str, list] = {}       # each core's RouteUpdates, in order
        self.fed: Set[str] = set()               # engines told Reachable since their last tick
        self.conn_ids: Dict[str, int] = {}       # link id -> the int a core knows it by
        self.links: List[str] = []
        self.alive: Set[str] = set()
        self.adjacent: Dict[str, Dict[str, Tuple[str, int]]] = {}  # a -> b -> (a's link id, cost)
        self.link_ends: Dict[str, Tuple[str, str, str]] = {}       # link id -> (owner, peer, peer's link)
        self.queue: list = []
        self.seq = itertools.count()
        self.deadlines: list = []                # (deadline, router, token): lazy heap
        self.tokens: Dict[str, int] = {}         # router -> token of its live heap entry
        self.token_count = itertools.count()
        self.addresses: Dict[str, Dict[str, Set[str]]] = {}        # router -> key -> routers
        self.logs: List[Tuple[str, Log]] = []
        self.dropped = 0
        self.delivered = 0
        # a loaded network, optional: each (sender, recipient) path is a FIFO that carries
        # ``bandwidth`` listed mobile addresses a second (a big MAU holds up what follows it,
        # as on a control link); ``drop(sender, send)`` True loses a message on the way
        self.bandwidth: Optional[float] = None
        self.busy_until: Dict[Tuple[str, str], float] = {}
        self.drop = None
        self.carried: List[Tuple[str, str, Send]] = []   # (sender, recipient, send) if bandwidth

    # ---- topology ------------------------------------------------------------------------------

    def add_router(self, rid: str, instance: int = 1) -> RoutingEngine:
        engine = RoutingEngine(rid, instance=instance, **self.engine_kwargs)
        self.engines[rid] = engine
        if rid not in self.tables:               # a restarted agent keeps its core
            self.tables[rid] = RouteTable(rid)
            self.updates[rid] = []
        self.alive.add(rid)
        self.adjacent.setdefault(rid, {})
        self.addresses[rid] = {}
        self._schedule(rid)
        return engine

    def connect(self, a: str, b: str, cost: int = 1) -> None:
        la, lb = f"{a}>{b}", f"{b}>{a}"
        self.adjacent[a][b] = (la, cost)
        self.adjacent[b][a] = (lb, cost)
        self.link_ends[la] = (a, b, lb)
        self.link_ends[lb] = (b, a, la)
        for rid, link in ((a, la), (b, lb)):
            if rid in self.alive:
                self.engines[rid].link_up(link, cost)
                self._schedule(rid)

    def disconnect(self, a: str, b: str) -> None:
        for x, y in ((a, b), (b, a)):
            link, _ = self.adjacent[x].pop(y)
            del self.link_ends[link]
            if x in self.alive:
                self._apply(x, self.engines[x].link_down(link))
                self._schedule(x)

    def kill(self, rid: str) -> None:
        """The router goes silent; its neighbours only notice by HELLO expiry."""
        self.alive.discard(rid)

    def restart(self, rid: str, instance: int) -> RoutingEngine:
        """A fresh engine (new instance) on the same links."""
        engine = self.add_router(rid, instance)
        for peer, (link, cost) in self.adjacent[rid].items():
            engine.link_up(link, cost)
        self._schedule(rid)
        return engine

    def true_link_states(self) -> Dict[str, Dict[str, int]]:
        return {a: {b: c for b, (_, c) in peers.items() if b in self.alive}
                for a, peers in self.adjacent.items() if a in self.alive}

    # ---- running -------------------------------------------------------------------------------

    def run(self, duration: float) -> None:
        self.run_until(lambda: False, duration)

    def run_until(self, done, timeout: float, check_every: float = 0.5) -> Optional[float]:
        """Run until ``done()`` (checked every ``check_every`` s); the time taken, or ``None``."""
        start, end = self.now, self.now + timeout
        next_check = self.now
        while True:
            if self.now >= next_check:
                if done():
                    return self.now - start
                next_check = self.now + check_every
            t = min(self._next_event(), next_check)
            if t > end:
                self.now = end
                return None
            self.now = max(self.now, t)
            self._step()

    def _next_event(self) -> float:
        while self.deadlines:
            t, rid, token = self.deadlines[0]
            if self.tokens.get(rid) == token and rid in self.alive:
                break
            heapq.heappop(self.deadlines)
        t_dead = self.deadlines[0][0] if self.deadlines else float("inf")
        t_msg = self.queue[0][0] if self.queue else float("inf")
        return min(t_dead, t_msg)

    def _schedule(self, rid: str) -> None:
        token = next(self.token_count)
        self.tokens[rid] = token
        if rid in self.fed:                      # the core answered: tick at once
            self.fed.discard(rid)
            deadline = self.now
        else:
            deadline = max(self.engines[rid].next_deadline(), self.now)
        heapq.heappush(self.deadlines, (deadline, rid, token))

    def _step(self) -> None:
        touched: Set[str] = set()
        while self.queue and self.queue[0][0] <= self.now:
            _, _, recipients, opcode, body = heapq.heappop(self.queue)
            msg = decode(opcode, body)             # once per message, for all its recipients
            for rid, link in recipients:
                if rid not in self.alive:
                    continue
                self.delivered += 1
                self._apply(rid, self.engines[rid].receive_message(link, msg, self.now))
                touched.add(rid)
        while self.deadlines and self.deadlines[0][0] <= self.now:
            _, rid, token = heapq.heappop(self.deadlines)
            if self.tokens.get(rid) == token and rid in self.alive:
                touched.add(rid)
        for rid in sorted(touched):
            self._apply(rid, self.engines[rid].tick(self.now))
            self._schedule(rid)

    # ---- effects -------------------------------------------------------------------------------

    def _apply(self, rid: str, effects: Iterable) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._send(rid, effect)
            elif isinstance(effect, RemoteAddressAdded):
                self.addresses[rid].setdefault(effect.key, set()).add(effect.router)
            elif isinstance(effect, RemoteAddressRemoved):
                routers = self.addresses[rid].get(effect.key, set())
                routers.discard(effect.router)
                if not routers:
                    self.addresses[rid].pop(effect.key, None)
            elif isinstance(effect, Log):
                self.logs.append((rid, effect))
            else:
                assert isinstance(effect, Topology)
                self.report(rid, effect)

    def conn_id(self, link: str) -> int:
        """The int a core would know link ``link`` by (``links[conn_id]`` gives it back)."""
        if link not in self.conn_ids:
            self.conn_ids[link] = len(self.links)
            self.links.append(link)
        return self.conn_ids[link]

    def neighbours(self, rid: str) -> Dict[str, str]:
        """The neighbours ``rid``'s core routes over: router id -> link id."""
        return {r: self.links[c] for r, c in self.tables[rid].neighbours.items()}

    def report(self, rid: str, report: Topology) -> None:
        """The core process of ``rid`` takes a topology report: routes, and Reachable back."""
        table = self.tables[rid]
        for msg in topology_messages(report, self.conn_id):
            table.apply(msg)
        update, reachable = table.compute(self.now)
        if update is not None:
            self.updates[rid].append(update)
        if reachable is not None:
            self.engines[rid].set_reachable(reachable.routers)
            self.fed.add(rid)                    # the engine ticks again at once

    def _enqueue(self, delay: float, recipients: List[Tuple[str, Optional[str]]],
                 send: Send, sender: str = "") -> None:
        if self.bandwidth is None:
            heapq.heappush(self.queue, (self.now + delay, next(self.seq), recipients,
                                        send.opcode, send.body))
            return
        msg = send.message
        size = len(getattr(msg, "add", ())) + len(getattr(msg, "delete", ())) + len(
            getattr(msg, "exist", ()))
        for recipient in recipients:
            path = (sender, recipient[0])
            at = max(self.now + delay, self.busy_until.get(path, 0.0)) + size / self.bandwidth
            self.busy_until[path] = at
            self.carried.append((sender, recipient[0], send))
            heapq.heappush(self.queue, (at, next(self.seq), [recipient], send.opcode, send.body))

    def _send(self, sender: str, send: Send) -> None:
        if self.drop is not None and self.drop(sender, send):
            self.dropped += 1
            return
        if send.via_link is not None:
            assert send.to == HELLO_ADDRESS
            ends = self.link_ends.get(send.via_link)
            if ends is not None:
                self._enqueue(self.latency, [(ends[1], ends[2])], send, sender)
            return
        parts = normalize(send.to).split("/")      # _topo / 0 / <router|all> / <address>
        assert parts[0] == "_topo" and parts[1] == "0", send.to
        if parts[2] == "all":
            by_distance: Dict[int, List[Tuple[str, Optional[str]]]] = {}
            for rid, hops in self._component(sender).items():
                if rid != sender:
                    by_distance.setdefault(hops, []).append((rid, None))
            for hops, recipients in by_distance.items():
                self._enqueue(self.latency * hops, recipients, send, sender)
            return
        hops = self._route(sender, parts[2])
        if hops is None:
            self.dropped += 1
        else:
            self._enqueue(self.latency * hops, [(parts[2], None)], send, sender)

    def _component(self, start: str) -> Dict[str, int]:
        hops = {start: 0}
        todo = deque([start])
        while todo:
            a = todo.popleft()
            for b in self.adjacent[a]:
                if b not in hops and b in self.alive:
                    hops[b] = hops[a] + 1
                    todo.append(b)
        return hops

    def _route(self, sender: str, target: str) -> Optional[int]:
        here, hops = sender, 0
        while here != target:
            nxt = self.tables[here].routes.next_hop.get(target)
            if nxt is None or nxt not in self.adjacent[here] or nxt not in self.alive:
                return None
            here, hops = nxt, hops + 1
            if hops > len(self.engines):
                return None
        return hops

    # ---- checks --------------------------------------------------------------------------------

    def expected_routes(self) -> Dict[str, tuple]:
        compute = get_path_computer()
        states = self.true_link_states()
        out = {}
        for rid in sorted(self.alive):
            routes = compute(rid, states)
            out[rid] = (routes.next_hop, routes.cost)
        return out

    def mismatches(self, expected: Dict[str, tuple]) -> List[str]:
        bad = []
        for rid, (next_hop, cost) in expected.items():
            routes = self.tables[rid].routes
            if dict(routes.next_hop) != next_hop or dict(routes.cost) != cost:
                bad.append(rid)
        return bad


def random_topology(n: int, extra: int, rng: random.Random, max_cost: int = 3
                    ) -> List[Tuple[str, str, int]]:
    """A random connected graph: a random spanning tree plus ``extra`` random links."""
    ids = [f"R{i:03d}" for i in range(n)]
    edges: Dict[frozenset, Tuple[str, str, int]] = {}
    for k in range(1, n):
        a, b = ids[k], ids[rng.randrange(k)]
        edges[frozenset((a, b))] = (a, b, rng.randint(1, max_cost))
    while len(edges) < n - 1 + extra:
        a, b = rng.sample(ids, 2)
        edges.setdefault(frozenset((a, b)), (a, b, rng.randint(1, max_cost)))
    return list(edges.values())
