"""The routing-protocol facade: one object per router that the control plane drives.

Owns the wiring of the engines (:mod:`hello`, :mod:`linkstate`, :mod:`node`, :mod:`mobile`), the
decoding of received control messages at the edge, the "once per router id" logging of messages at
an unknown protocol version, and the batch discipline: :meth:`receive` applies a message and
returns only immediate replies; everything derived from the new state (``ls_seq`` bump + RA,
a :class:`Topology` report for the core, LSR/MAR to routers that became reachable) happens in
the next :meth:`tick`, which :meth:`next_deadline` asks for at once. Call ``tick`` after each
batch of ``receive`` calls, and whenever ``next_deadline()`` has passed.

Sans-I/O: time is always the caller's ``now`` (seconds, any epoch, monotonic); nothing here reads
a clock, opens a socket, imports zmq or a proton Container, or logs (it returns :class:`Log`).

Usage from the control plane (the adapter to the core)::

    engine = RoutingEngine("R1", instance=int(time.time()), **router_entity_timers)
    engine.link_up(link_id, cost)                  # control link attached (cost from the conn)
    effects = engine.receive(link_id, opcode, body, now)     # a control message arrived
    effects = engine.tick(now)                      # at engine.next_deadline() / after a batch
    engine.add_local("M0orders", hint=3)            # core: first local destination appeared
    engine.set_reachable(routers)                   # core: its routes after a Topology report
    # effects: Send -> put on the wire (via_link for HELLO, else route by .to);
    #          Topology / RemoteAddressAdded / RemoteAddressRemoved -> tell the core;
    #          Log -> the router log.

The routes are the core's (``router_core/routetable.py`` computes them from the Topology
reports); this engine learns back only which routers the core reaches (:meth:`set_reachable`),
which decides when an LSR or MAR can go to a router that is not a neighbour. The core floods
(RA, MAU) to the routers it reaches, so a router that just became reachable missed our earlier
RAs: the next tick sends one, and a differential MAU due in that tick goes after it (as with
1.19, whose MAU leaves on its own tick, a new neighbour hears HELLO and RA before any MAU).

Resume after an agent restart (the core and the other routers carry on meanwhile)::

    state = engine.snapshot_state()                 # plain JSON-able data; the caller saves it
    engine = RoutingEngine("R1", instance=same_instance, ...)   # in the new agent
    effects = engine.restore_state(state, now)      # before any input

A restored engine keeps its instance (so no router sees it restart), its link-state database, node
table and mobile addresses; its first Topology report (at the first tick) is a full one from which
the core computes the same routes as before. Then, as the protocol already provides: my ``ls_seq``
+ 1 goes out in an RA at once; my ``mobile_seq`` + 2 makes every router ask a MAR (absolute MAU);
every known router is asked for its link state (LSR) and mobile addresses (MAR), which brings back
what changed while the agent was down; restored neighbours are provisional (see ``hello``).
"""
from __future__ import annotations

from typing import Any, Dict, Hashable, List, Mapping, Optional, Set

from agent.routing.effects import Effect, Log, RemoteAddressAdded
from agent.routing.errors import ProtocolError
from agent.routing.hello import (DuplicateRouterId, HelloEngine, InstanceSeen, NeighbourDown,
                                 NeighbourUp)
from agent.routing.linkstate import LinkStateEngine
from agent.routing.messages import (LSR, LSU, MAR, MAU, RA, Hello, Message, decode,
                                    sender_and_version)
from agent.routing.mobile import DEFAULT_HINT, MobileSync
from agent.routing.node import NodeTable

__all__ = ["RoutingEngine", "TIMER_DEFAULTS"]

#: Stale link states and orphaned routers are looked for once a second (1.x: once per tick).
HOUSEKEEPING_INTERVAL = 1.0

#: Version of :meth:`RoutingEngine.snapshot_state` data (another version is not restored).
STATE_VERSION = 1

#: The router entity's routing-protocol timers (seconds) and their defaults.
TIMER_DEFAULTS = {"helloIntervalSeconds": 1.0, "helloMaxAgeSeconds": 3.0,
                  "raIntervalSeconds": 30.0, "raIntervalFluxSeconds": 4.0,
                  "remoteLsMaxAgeSeconds": 60.0}


class RoutingEngine:
    def __init__(self, my_id: str, instance: int, area: str = "0", *,
                 helloIntervalSeconds: float = 1.0, helloMaxAgeSeconds: float = 3.0,
                 raIntervalSeconds: float = 30.0, raIntervalFluxSeconds: float = 4.0,
                 remoteLsMaxAgeSeconds: float = 60.0, route_holdoff: float = 0.0) -> None:
        self.my_id = my_id
        self.instance = int(instance)
        self.area = area
        self.hello = HelloEngine(my_id, self.instance, helloIntervalSeconds, helloMaxAgeSeconds,
                                 area)
        self.linkstate = LinkStateEngine(my_id, self.instance, raIntervalSeconds,
                                         raIntervalFluxSeconds, remoteLsMaxAgeSeconds, area)
        self.nodes = NodeTable(my_id, self.instance, area, orphan_grace=3 * helloIntervalSeconds)
        self.mobile = MobileSync(my_id, area)
        self.route_holdoff = float(route_holdoff)
        self.neighbours: Dict[str, Hashable] = {}
        self.incompatible: Set[str] = set()      # HELLO/RA/LSR/LSU senders logged (1.x Python)
        self.incompatible_ma: Set[str] = set()   # MAU/MAR senders logged (1.x C, per router)
        # the core needs a topology report since then (at once for a new engine: its first,
        # full report replaces whatever the core held)
        self.dirty_since: Optional[float] = float("-inf")
        self.last_now = float("-inf")
        self.housekeeping_at = float("-inf")
        # routers the core floods to, and whether one of them joined since our last RA: it
        # hears an RA before any MAU (1.19 sends its MAU on its own tick, after HELLO and RA)
        # (None after a restore: the core kept its routes, so every router there had our RAs)
        self.reachable: Optional[frozenset] = frozenset()
        self.ra_owed = False
        self.mar_answers_owed: Dict[str, MAR] = {}   # MARs from routers I have no route to

    @classmethod
    def from_router_entity(cls, my_id: str, instance: int, entity: Mapping[str, Any],
                           area: str = "0") -> "RoutingEngine":
        """Build from a ``router`` entity (only the timer attributes are read)."""
        timers = {k: float(entity.get(k, v)) for k, v in TIMER_DEFAULTS.items()}
        return cls(my_id, instance, area, **timers)

    # ---- inputs --------------------------------------------------------------------------------

    def link_up(self, link_id: Hashable, cost: int) -> List[Effect]:
        """A control link to a (yet unknown) router attached; its first HELLO goes at next tick."""
        self.hello.link_up(link_id, int(cost))
        return []

    def link_down(self, link_id: Hashable) -> List[Effect]:
        """A control link detached: its neighbour goes at once (effects follow at next tick)."""
        return self._hello_events(self.hello.link_down(link_id), self.last_now)

    def add_local(self, key: str, hint: int = DEFAULT_HINT) -> None:
        """The core: mobile address ``key`` gained its first local destination."""
        self.mobile.add_local(key, hint)

    def remove_local(self, key: str) -> None:
        """The core: mobile address ``key`` lost its last local destination."""
        self.mobile.remove_local(key)

    def set_reachable(self, routers: Any) -> None:
        """The core: every router it has a route to, after its latest route computation (the
        requests waiting for one of them go out at the next tick)."""
        self.nodes.set_reachable(routers)
        reachable = frozenset(str(r) for r in routers)
        if self.reachable is not None and reachable - self.reachable:
            self.ra_owed = True
        self.reachable = reachable

    def receive(self, link_id: Optional[Hashable], opcode: str, body: Any,
                now: float) -> List[Effect]:
        """A control message arrived (``link_id``: the control link, needed for HELLO)."""
        self.last_now = now
        try:
            msg = decode(opcode, body)
        except ProtocolError as exc:
            return [Log("error", "ROUTER", f"Control message error: opcode={opcode}: {exc}")]
        if msg is None:
            router, version = sender_and_version(body)
            if opcode in ("MAU", "MAR"):          # 1.x C part: known senders only, ROUTER_MA
                if router not in self.nodes.nodes:
                    return [Log("error", "ROUTER_MA", f"Received {opcode} from an unknown router "
                                                      f"with router id {router}")]
                if router in self.incompatible_ma:
                    return []
                self.incompatible_ma.add(router)
                return [Log("warning", "ROUTER_MA", f"Received {opcode} at protocol version "
                                                    f"{version} from {router}.  Ignoring.")]
            if router in self.incompatible:
                return []
            self.incompatible.add(router)
            return [Log("warning", "ROUTER", f"Received {opcode} at protocol version {version} "
                                             f"from {router}.  Ignoring.")]
        return self.receive_message(link_id, msg, now)

    def receive_message(self, link_id: Optional[Hashable], msg: Message,
                        now: float) -> List[Effect]:
        """Like :meth:`receive`, for a message already decoded (by :func:`messages.decode`,
        which returns ``None`` for another protocol version: do not pass that here)."""
        self.last_now = now
        opcode = type(msg).__name__.upper()
        if isinstance(msg, Hello):
            return self._hello_events(self.hello.receive(link_id, msg, now), now)
        if msg.id == self.my_id:
            return []                             # my own flooded RA/MAU coming back
        if isinstance(msg, RA):
            return self._on_ra(msg, now)
        if isinstance(msg, LSR):
            self.nodes.learn(msg.id, msg.pv)
            return [self.linkstate.lsu_for(msg.id, msg.area)]
        if isinstance(msg, LSU):
            self.nodes.learn(msg.id, msg.pv)
            if self.linkstate.handle_lsu(msg, now):
                for peer in msg.ls.peers:
                    self.nodes.learn(peer)
                self._dirty(now)
            return []
        if msg.id not in self.nodes.nodes:        # MAU / MAR: 1.x C drops unknown senders
            return [Log("error", "ROUTER_MA",
                        f"Received {opcode} from an unknown router with router id {msg.id}")]
        if isinstance(msg, MAU):
            return list(self.mobile.handle_mau(msg, now))
        assert isinstance(msg, MAR)
        if not self.nodes.reachable(msg.id):
            # the answer would be dropped (no route back yet): it goes when one is there
            self.mar_answers_owed[msg.id] = msg
            return []
        return list(self.mobile.handle_mar(msg))

    def tick(self, now: float) -> List[Effect]:
        self.last_now = now
        out: List[Effect] = self._hello_events(self.hello.tick(now), now)
        ls = self.linkstate
        if now >= self.housekeeping_at:
            self.housekeeping_at = now + HOUSEKEEPING_INTERVAL
            out.extend(self._housekeeping(now))
        send_ra = ls.commit(now)
        if send_ra:
            self._dirty(now)
        if self.dirty_since is not None and now >= self.dirty_since + self.route_holdoff:
            self.dirty_since = None
            ls.topology_changed(now)
            report = self.nodes.topology_update(
                ls.ls_seq, ls.peers,
                {router: (held.ls_seq, held.peers) for router, held in ls.remote.items()},
                self.neighbours)
            if report is not None:
                out.append(report)
        for router in self.mobile.overdue(now):   # a MAR's answer lost: ask again
            self.nodes.request(router, "MAR")
        for kind, router in self.nodes.due_requests():
            out.append(ls.lsr_for(router) if kind == "LSR" else self.mobile.mar_for(router, now))
        for router in [r for r in self.mar_answers_owed if self.nodes.reachable(r)]:
            out.extend(self.mobile.handle_mar(self.mar_answers_owed.pop(router)))
        seq_before = self.mobile.mobile_seq
        mobile_effects, advanced = self.mobile.tick(now)
        if self.ra_owed and mobile_effects:       # a router that just joined: RA first
            out.append(ls.ra(seq_before, now))
        out.extend(mobile_effects)                # the differential MAU goes before the RA
        if send_ra or advanced or self.ra_owed or now >= ls.next_ra_at():
            out.append(ls.ra(self.mobile.mobile_seq, now))
        self.ra_owed = False
        return out

    def next_deadline(self) -> float:
        """When :meth:`tick` must next run (a past time, or ``-inf``, means at once)."""
        if self.linkstate.own_changed or self.ra_owed:
            return self.last_now
        deadlines = [self.hello.next_deadline(), self.linkstate.next_ra_at(),
                     self.housekeeping_at, self.mobile.next_deadline(), self.mobile.next_retry()]
        if self.dirty_since is not None:
            deadlines.append(self.dirty_since + self.route_holdoff)
        return min(deadlines)

    # ---- views ---------------------------------------------------------------------------------

    def remote_addresses(self) -> Dict[str, Dict[str, Optional[int]]]:
        """``{router: {address key: hint}}`` learned from MAUs."""
        return self.mobile.remote_addresses()

    # ---- resume after an agent restart ----------------------------------------------------------

    def snapshot_state(self, remote: bool = True) -> dict:
        """Everything a new agent needs to carry on as this one (plain, JSON-able data; link ids
        must be JSON-able too: the core's connection ids are ints); without ``remote``, the
        other routers' addresses are left out (``mobile``'s ``remote``: the journal's part)."""
        return {"version": STATE_VERSION, "router": self.my_id, "instance": self.instance,
                "area": self.area,
                "neighbours": [[router, link] for router, link in sorted(self.neighbours.items())],
                "hello": self.hello.snapshot_state(),
                "linkstate": self.linkstate.snapshot_state(),
                "nodes": self.nodes.snapshot_state(),
                "mobile": self.mobile.snapshot_state(remote)}

    def restore_state(self, state: Mapping[str, Any], now: float) -> List[Effect]:
        """Carry on from :meth:`snapshot_state` of an earlier engine of this router (same id and
        instance, else nothing happens). Call before any other input. Returns a :class:`Log`
        and a :class:`RemoteAddressAdded` for every restored remote address (the core may have
        them already: telling it again is harmless)."""
        if (state.get("version") != STATE_VERSION or state.get("router") != self.my_id
                or state.get("instance") != self.instance or state.get("area", "0") != self.area):
            return [Log("warning", "ROUTER", "Routing state not restored: it belongs to another "
                                             "router, instance or version")]
        self.last_now = now
        self.hello.restore_state(state.get("hello") or {}, now)
        self.linkstate.restore_state(state.get("linkstate") or {}, now)
        self.nodes.restore_state(state.get("nodes") or {})
        self.mobile.restore_state(state.get("mobile") or {})
        self.neighbours = {str(router): link for router, link in state.get("neighbours", ())}
        self.reachable = None
        # then what a new agent does differently from the one that saved the state
        self.linkstate.resume(now)
        self.mobile.resume()
        for router in self.nodes.nodes:           # catch up on what changed meanwhile
            self.nodes.request(router, "LSR")
            self.nodes.request(router, "MAR")
        self._dirty(now)                          # routes (the same ones) at the first tick
        self.housekeeping_at = float("-inf")
        out: List[Effect] = [Log("info", "ROUTER", f"Routing state restored: "
                                                   f"{len(self.nodes.nodes)} routers, "
                                                   f"ls_seq {self.linkstate.ls_seq}, "
                                                   f"mobile_seq {self.mobile.mobile_seq}")]
        for router, keys in sorted(self.mobile.remote.items()):
            out.extend(RemoteAddressAdded(key, router, hint) for key, hint in keys.items())
        return out

    # ---- internals -----------------------------------------------------------------------------

    def _housekeeping(self, now: float) -> List[Effect]:
        """Expire stale remote link states and delete orphaned routers."""
        out: List[Effect] = []
        ls = self.linkstate
        if ls.expire(now):
            self._dirty(now)
        for router in self.nodes.find_orphans(now, ls.with_link_state(), ls.named()):
            self.nodes.delete(router)
            self.mar_answers_owed.pop(router, None)
            ls.forget(router)
            out.extend(self.mobile.flush_router(router))
            out.append(Log("debug", "ROUTER_LS", f"Node {router} deleted"))
            self._dirty(now)
        return out

    def _dirty(self, now: float) -> None:
        if self.dirty_since is None:
            self.dirty_since = now

    def _on_ra(self, msg: RA, now: float) -> List[Effect]:
        out: List[Effect] = []
        node = self.nodes.learn(msg.id, msg.pv)
        assert node is not None
        if self.nodes.observe_instance(msg.id, msg.instance, msg.pv):
            out.extend(self._restarted(msg.id, now))
        if self.linkstate.handle_ra(msg, now):
            self.nodes.request(msg.id, "LSR")
        self.mobile.advertise(msg.id, msg.mobile_seq)
        if self.mobile.seq_of(msg.id) < msg.mobile_seq and not self.mobile.awaiting(msg.id, now):
            self.nodes.request(msg.id, "MAR")
        for kind, router in self.nodes.due_requests(only=msg.id):     # reachable: ask at once
            out.append(self.linkstate.lsr_for(router) if kind == "LSR"
                       else self.mobile.mar_for(router, now))
        return out

    def _restarted(self, router: str, now: float) -> List[Effect]:
        out: List[Effect] = [Log("info", "ROUTER_LS", f"Detected Restart of Router Node {router}")]
        self.linkstate.drop(router, now)
        self._dirty(now)                          # the tick asks its link state again
        out.extend(self.mobile.flush_router(router))
        return out

    def _hello_events(self, events: list, now: float) -> List[Effect]:
        out: List[Effect] = []
        for event in events:
            if isinstance(event, NeighbourUp):
                node = self.nodes.learn(event.router)
                assert node is not None
                if self.neighbours.get(event.router) != event.link:
                    self.nodes.request(event.router, "LSR")
                self.neighbours[event.router] = event.link
                self.linkstate.set_peer(event.router, event.cost)
                self._dirty(now)
            elif isinstance(event, NeighbourDown):
                self.neighbours.pop(event.router, None)
                self.linkstate.del_peer(event.router)
                self._dirty(now)
            elif isinstance(event, InstanceSeen):
                if self.nodes.observe_instance(event.router, event.instance, event.pv):
                    out.extend(self._restarted(event.router, now))
            elif isinstance(event, DuplicateRouterId):
                out.append(Log("critical", "ROUTER_HELLO",
                               f"Detected Neighbor Router with a Duplicate ID - {event.router}"))
            else:
                out.append(event)                 # Send
        return out
