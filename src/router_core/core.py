"""The router core: message routing, credit and settlement for one router, sans-I/O.

Owns: connections, links, addresses, inbound/outbound delivery tracking and the management
counters. Takes typed commands from peers (:mod:`router_core.ipc`) and queues typed effects per peer
index; the core process loop (coreproc.py) does the I/O. This file is the pure-Python reference AND
the source of the compiled build: setup.py hands Cython a copy of this file as
``router_core._core`` next to ``cython/_core.pxd``, which augments it (pure-Python mode): the
records below become ``cdef`` classes with typed fields, the per-message methods ``cdef`` methods
with typed locals. So: no ``from __future__`` import, plain classes with ``__slots__``, commands
typed ``object`` (Cython type-checks ``tuple`` exactly: a NamedTuple is not one to it), and
``cython`` imported only for ``_COMPILED``, so the pure build runs without Cython. Keep the .pxd
in step with this file.

Hot-path habits (they cost nothing in the pure build either): router-wide counters are plain int
attributes (the management dict is built by :attr:`RouterCore.counters`); effects are built with
:func:`_effect`, not by calling the NamedTuple (its Python-level ``__new__`` costs ~0.4 µs);
pending credit is kept on the link itself; dicts are keyed by int ids.

Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.

Lifecycle rules (the settlement contract of the docs, made explicit)::

  object        event                               effect / transition
  ------------  ----------------------------------  ---------------------------------------------
  in-link       attach, targeted, address has a      LinkOpen, LinkCredit(capacity)
                consumer / anonymous
  in-link       attach, targeted, no consumer        LinkOpen; waits; LinkCredit(capacity) when
                                                     the first consumer attaches (never revoked)
  in-link       a delivery leaves the core           LinkCredit(+1) (coalesced per flush)
                (forwarded / released / dropped)
  out-link      attach                               LinkOpen; becomes a consumer of its address
  out-link      LinkFlow(limit)                      may Deliver while delivered < limit
  out-link      LinkFlow(drain), nothing to send     Drained; delivered := limit
  in-dlv        no consumer / unavailable            unsettled: UpdateIn(RELEASED, settled)
                                                     presettled: dropped (counted)
  in-dlv        consumers, none with credit          held (address queue; multicast: per link)
  out-dlv       Disposition terminal, not settled    UpdateIn(state, unsettled) (anycast)
  out-dlv       Disposition settled                  UpdateIn(state, settled); forget both
                                                     (no outcome ever given counts as ACCEPTED)
  in-dlv        SettleIn                             SettleOut to every copy; held: drop, +1 credit
  out-dlv       receiver lost, had terminal state    UpdateIn(that state, settled)
  out-dlv       receiver lost, no outcome            UpdateIn(MODIFIED failed, settled)
  in-dlv (mc)   every copy terminal or settled       UpdateIn(REJECTED>ACCEPTED>MODIFIED>RELEASED,
                                                     settled); SettleOut to unsettled copies
  in-link       lost                                 forwarded/held deliveries carry on; their
                                                     outcomes go nowhere
"""
import random
from collections import deque
from typing import Any, Optional

try:
    import cython
    _COMPILED = cython.compiled
except ImportError:  # Cython builds the compiled core; the pure build does not need it
    _COMPILED = False

from router_core.addressing import address_key, mobile_text, temp_address
from router_core.heap import HeapTrimmer
from router_core.matcher import AddressRules
from router_core.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED, ConnClosed,
    ConnOpened, ControlIn, ControlSend, Deliver, Disposition, Drained, IpcError, LinkAttach,
    LinkCredit, LinkDetach, LinkFlow, LinkOpen, LinkRefuse, LocalAddress, PeerHello,
    RemoteAddress, RouteUpdate, RouterDeliver, RouterLinkDown, RouterLinkUp, RouterTransfer,
    SettleIn, SettleOut, Transfer, UpdateIn, CloseConnection, PolicyEvent)
from router_core.policycount import RESOURCE_LIMIT_EXCEEDED, PolicyCounts
from router_core.corestate import (
    DIST_BALANCED, DIST_CLOSEST, DIST_CODES, DIST_MULTICAST, DIST_UNAVAILABLE, GONE_MAX,
    MCAST_RANK, gone_entry, management_snapshot)

_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_KEY_CACHE_MAX = 8192
_MODIFIED_FAILED = {"failed": True, "undeliverable": False}
_NO_INTERIOR = ("inter-router", "edge")
_INTER_ROUTER = "inter-router"
# LinkAttach.link_type values (from the terminus capabilities qd.router / qd.router-data)
_LINK_ENDPOINT = "endpoint"
_LINK_CONTROL = "router-control"
_LINK_DATA = "inter-router"
_CONTROL_PRIORITY = 9  # control messages travel at the highest priority
_ROUTE_CONTAINER = "route-container"
# The routing protocol's own addresses: what arrives for them goes to the agent (ControlIn).
_CONTROL_LOCAL = frozenset(["Lqdhello", "Lqdrouter", "Lqdrouter.ma"])
_CONTROL_FLOOD = frozenset(["Tqdrouter", "Tqdrouter.ma"])
_CONTROL_BACKLOG = 1000   # routing messages queued on a control link without credit, at most
# The treatment hint a router advertises with a mobile address (MAU), by distribution code
_HINT_OF_DIST = {DIST_MULTICAST: 1, DIST_CLOSEST: 2, DIST_BALANCED: 3, DIST_UNAVAILABLE: 5}
_DIST_OF_HINT = {0: DIST_MULTICAST, 1: DIST_MULTICAST, 2: DIST_CLOSEST, 3: DIST_BALANCED,
                 4: DIST_BALANCED, 5: DIST_UNAVAILABLE}
_tuple_new = tuple.__new__


def _effect(cls: type, fields: tuple) -> Any:
    """``cls(*fields)`` for an IPC NamedTuple, without running its Python-level ``__new__``."""
    if _COMPILED:  # allocate and fill in C (declared in cython/_core.pxd), ~4x cheaper
        return _named_tuple(cls, fields)  # noqa: F821 - declared in the .pxd
    return _tuple_new(cls, fields)


def _own(payload: Any) -> Any:
    """A payload the core is going to hold, as its own bytes when it is a slice of a much
    larger IPC batch frame: a held slice would keep the whole frame (every message of the
    batch) alive. Only on the holding paths; forwarding passes the slice on untouched."""
    if type(payload) is memoryview and payload.nbytes * 2 < len(payload.obj):
        return bytes(payload)
    return payload


def _fields(cmd: Any) -> tuple:
    """A command's fields, to unpack. Compiled, the NamedTuple is then unpacked as a plain tuple
    (direct item access) instead of through the iterator protocol Cython uses for subclasses."""
    if _COMPILED:
        return _as_tuple(cmd)  # noqa: F821 - declared in the .pxd
    return cmd


# ----------------------------------------------------------------------------------------------
# Records: state only, no behaviour (cdef classes in the compiled build, see cython/_core.pxd).
# corestate.management_snapshot reads them; nothing outside this module builds them.
# ----------------------------------------------------------------------------------------------
class Connection:
    __slots__ = ("peer", "conn_id", "role", "direction", "host", "container", "listener", "user",
                 "sasl", "encrypted", "link_capacity", "cost", "links", "opened_at",
                 "last_delivery_at", "data_in", "data_out", "control_in", "control_out",
                 "data_links", "router_up")

    def __init__(self, peer: int, conn_id: int, role: str, direction: str, host: str,
                 container: str, listener: str, user: str, sasl: str, encrypted: bool,
                 link_capacity: int, cost: int = 1) -> None:
        self.peer = peer
        self.conn_id = conn_id
        self.role = role
        self.direction = direction
        self.host = host
        self.container = container
        self.listener = listener
        self.user = user
        self.sasl = sasl
        self.encrypted = encrypted
        self.link_capacity = link_capacity
        self.cost = cost
        self.links = {}  # link_id -> Link, in attach order
        # inter-router: data links attached so far per direction (the k-th has priority k)
        self.data_in = 0
        self.data_out = 0
        # inter-router: the control links, the outbound data link of each priority 0..9, and
        # whether the agent was told the connection is up (both control links attached)
        self.control_in = None
        self.control_out = None
        self.data_links = [None] * 10
        self.router_up = False
        self.opened_at = 0.0         # core time of the open (for uptimeSeconds)
        self.last_delivery_at = -1.0  # core time of the last delivery in or out, -1: none yet


class Link:
    __slots__ = ("link_id", "conn", "peer", "direction", "name", "address", "addr", "capacity",
                 "presettled", "closed", "from_container", "to_container",
                 # endpoint | router-control | inter-router; router: one of the last two
                 # (never routes client traffic yet); priority: of an inter-router link, else -1
                 "link_type", "router", "priority",
                 # inbound: credit granted in total, deliveries received, held in the core,
                 # unsettled inbound deliveries; credited once the initial window was granted;
                 # credit not yet flushed and the slot of its LinkCredit in the peer's effects
                 "granted", "received", "held", "in_unsettled", "credited", "credit_pending",
                 "credit_slot",
                 # replenished credit not granted yet, and how much is granted at once (1 for
                 # client links; a slice of the window on inter-router links)
                 "credit_owed", "credit_batch",
                 # outbound: credit limit from the receiver, deliveries sent (delivery count),
                 # per-link queue (multicast), unsettled outbound deliveries out_id -> OutDelivery
                 "limit", "delivered", "queue", "unsettled",
                 # management counters
                 "delivery_count", "presettled_count", "dropped_presettled_count", "accepted",
                 "rejected", "released", "modified")

    def __init__(self, link_id: int, conn: Connection, direction: int, name: str,
                 address: Optional[str], presettled: bool, capacity: int) -> None:
        self.link_id = link_id
        self.conn = conn
        self.peer = conn.peer
        self.direction = direction
        self.name = name
        self.address = address
        self.addr = None
        self.capacity = capacity
        self.presettled = presettled
        self.closed = False
        container = conn.role == _ROUTE_CONTAINER
        self.from_container = container and direction == DIR_IN
        self.to_container = container and direction != DIR_IN
        self.link_type = _LINK_ENDPOINT
        self.router = False
        self.priority = -1
        self.granted = 0
        self.received = 0
        self.held = 0
        self.in_unsettled = 0
        self.credited = False
        self.credit_pending = 0
        self.credit_slot = -1   # -1: no LinkCredit placeholder in this flush
        self.credit_owed = 0
        self.credit_batch = 1
        self.limit = 0
        self.delivered = 0
        self.queue = deque()
        self.unsettled = {}
        self.delivery_count = 0
        self.presettled_count = 0
        self.dropped_presettled_count = 0
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0


class Address:
    __slots__ = ("key", "dist", "priority", "consumers", "waiting", "queues", "held", "rr", "refs",
                 "container_count", "ingress", "egress", "to_container", "from_container",
                 "remotes", "transit", "announced")

    def __init__(self, key: str, dist: int, priority: int) -> None:
        self.key = key
        self.dist = dist
        self.priority = priority
        self.consumers = []         # outbound links, in attach order
        self.waiting = []           # targeted inbound links not yet given credit
        # anycast deliveries held for want of credit, one FIFO per priority 0..9
        self.queues = [deque() for _ in range(10)]
        self.held = 0
        self.rr = 0
        self.refs = 0               # links whose terminus resolves to this address
        self.container_count = 0
        self.ingress = 0
        self.egress = 0
        self.to_container = 0
        self.from_container = 0
        self.remotes = {}           # interior: router id -> hint, routers with a destination
        self.transit = 0
        self.announced = False      # interior: the agent was told we have a local destination


class RemoteRouter:
    """Another router of the network, as the last route computation (RouteUpdate) gave it."""

    __slots__ = ("router_id", "next_hop", "conn", "cost", "valid_origins")

    def __init__(self, router_id: str, next_hop: str, conn: Any, cost: int,
                 valid_origins: Any) -> None:
        self.router_id = router_id
        self.next_hop = next_hop      # the neighbour router id toward it
        self.conn = conn              # the inter-router Connection to that neighbour (or None)
        self.cost = cost
        self.valid_origins = valid_origins  # frozenset of router ids


# The two per-message records are built by a function rather than ``__init__``: compiled,
# ``cls.__new__(cls)`` is a direct allocation (from a free list) with no argument tuple.
class InDelivery:
    """An inbound delivery the core still has to hold or settle. Built by :func:`_in_delivery`."""

    __slots__ = ("dlv_id", "link", "settled", "payload", "addr", "multicast", "priority",
                 "pending", "out", "open", "copies", "outcome", "info", "targets", "to_override",
                 "phase")


def _in_delivery(dlv_id: int, link: Link, settled: bool, payload: Any, addr: Address,
                 multicast: bool) -> InDelivery:
    dlv = InDelivery.__new__(InDelivery)
    dlv.dlv_id = dlv_id
    dlv.link = link
    dlv.settled = settled
    dlv.payload = payload
    dlv.addr = addr
    dlv.multicast = multicast
    dlv.priority = 0
    dlv.pending = 0        # copies still queued in the core (not yet sent)
    dlv.out = None         # anycast: the OutDelivery
    dlv.open = 0           # multicast: copies without an outcome yet
    dlv.copies = None      # multicast: OutDelivery of every copy sent
    dlv.outcome = 0        # multicast: aggregated outcome so far
    dlv.info = None
    dlv.targets = None     # multicast: the links its copies go to
    dlv.to_override = None  # toward another router: x-opt-qd.to to set (None: keep)
    dlv.phase = -1          # toward another router: x-opt-qd.phase to set (-1: keep)
    return dlv


class OutDelivery:
    """One copy of an inbound delivery sent on an outbound link. Built by :func:`_out_delivery`."""

    __slots__ = ("out_id", "link", "in_dlv", "state", "info", "done")


def _out_delivery(out_id: int, link: Link, in_dlv: InDelivery) -> OutDelivery:
    out = OutDelivery.__new__(OutDelivery)
    out.out_id = out_id
    out.link = link
    out.in_dlv = in_dlv
    out.state = 0     # last terminal state from the receiver (0 = none)
    out.info = None
    out.done = False  # multicast: this copy's outcome was already counted
    return out


def _phase_key(rules: Any, key: Any, direction: int) -> Any:
    """The phased key of a mobile address for a link in ``direction``.

    Addresses are phase 0 (``M0x``) unless a configured rule says otherwise: a waypoint address
    is entered at its ingress phase (default 0, e.g. towards a broker queue's autoLink) and left
    at its egress phase (default 1, e.g. from the broker back to receivers); explicit
    ``ingressPhase``/``egressPhase`` set them for any address.
    """
    if key is None or not len(rules) or key[:2] != "M0":
        return key
    rule = rules.lookup(key[2:])
    if rule is None:
        return key
    if direction == DIR_IN:
        phase = rule.ingress_phase if rule.ingress_phase is not None else 0
    else:
        phase = rule.egress_phase if rule.egress_phase is not None else (1 if rule.waypoint else 0)
    phase = int(phase)
    return key if phase == 0 else f"M{phase}{key[2:]}"


class RouterCore:
    """One router's routing and settlement state. Feed commands with :meth:`handle`, collect
    effects with :meth:`take_effects`."""

    def __init__(self, router_id: str, *, default_distribution: str = "balanced",
                 addresses: Optional[list] = None, area: str = "0",
                 seed: Optional[int] = None, mode: str = "standalone") -> None:
        if default_distribution not in DIST_CODES:
            raise ValueError(f"unknown distribution {default_distribution!r}")
        self.router_id = router_id
        self.area = area
        self.mode = mode  # inter-router connections and their links only in "interior"
        self.default_distribution = DIST_CODES[default_distribution]
        self.rules = AddressRules(addresses)
        self.peers = {}          # peer index -> kind
        self.conns = {}          # conn_id -> Connection
        self.links = {}          # link_id -> Link
        self.addrs = {}          # key -> Address
        self.in_unsettled = {}   # inbound dlv_id -> InDelivery (unsettled, not yet final)
        self.out_unsettled = {}  # outbound dlv_id -> OutDelivery
        # router-wide management counters (see the ``counters`` property for their names)
        self.presettled = 0
        self.dropped_presettled = 0
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0
        self.ingress = 0
        self.egress = 0
        self.transit = 0
        self.ingress_container = 0
        self.egress_container = 0
        self._next_out = 1
        self._key_cache = {}
        self._rng = random.Random(seed)
        self._heap = HeapTrimmer()  # freed memory back to the OS (see tick)
        self.now = 0.0  # the time given with the latest command batch or tick
        self._effects = {}       # peer -> [effect]
        self._credited = []      # links with a LinkCredit placeholder in _effects (coalesced)
        # interior mode: the agent's peer index, and every other router the routing protocol
        # reaches (router id -> RemoteRouter), from its latest RouteUpdate
        self.agent_peer = None
        self.routers = {}
        self.neighbour_conns = {}  # router id -> its inter-router Connection with control links
        # the final view of what was removed lately (corestate.gone_entry; snapshot["gone"])
        self.gone = deque(maxlen=GONE_MAX)
        self.gone_seq = 0
        # Commands off the per-message path (the per-message ones are tested first in _handle).
        self._dispatch = {LinkAttach: self._on_attach, LinkDetach: self._on_detach,
                          ConnOpened: self._on_conn_opened, ConnClosed: self._on_conn_closed,
                          PeerHello: self._on_hello, ControlSend: self._on_control_send,
                          RouteUpdate: self._on_route_update,
                          RemoteAddress: self._on_remote_address,
                          PolicyEvent: self._on_policy_event}
        # router-wide policy connection counts and denial counters (policycount.py)
        self.policy_counts = PolicyCounts()

    # ------------------------------------------------------------------------------------------
    # Public API
    # ------------------------------------------------------------------------------------------
    def handle(self, peer: int, cmd: Any, now: float) -> None:
        self.now = now
        self._handle(peer, cmd)

    def handle_batch(self, peer: int, cmds: Any, now: float) -> None:
        """``handle`` for every command of one peer's batch, in order."""
        self.now = now
        for cmd in cmds:
            self._handle(peer, cmd)

    def _handle(self, peer: Any, cmd: Any) -> None:
        kind = type(cmd)
        # In order of frequency: two or three per message, then credit, then the rest.
        if kind is Transfer:
            self._on_transfer(peer, cmd)
        elif kind is Disposition:
            self._on_disposition(peer, cmd)
        elif kind is LinkFlow:
            self._on_flow(peer, cmd)
        elif kind is SettleIn:
            self._on_settle_in(peer, cmd)
        elif kind is RouterTransfer:
            self._on_router_transfer(peer, cmd)
        else:
            handler = self._dispatch.get(kind)
            if handler is None:
                raise IpcError(f"the core does not handle {kind.__name__}")
            handler(peer, cmd)

    def tick(self, now: float) -> None:
        """Called by the core process's loop. Once a second, heap memory freed since (closed
        connections, released deliveries) goes back to the OS (router_core.heap)."""
        self.now = now
        self._heap.maybe_trim(now)

    def take_effects(self) -> dict:
        """Every effect queued since the last call, as ``{peer: [effect, ...]}``."""
        effects = self._effects
        for link in self._credited:
            effects[link.peer][link.credit_slot] = LinkCredit(link.link_id, link.credit_pending)
            link.credit_pending = 0
            link.credit_slot = -1
        self._credited = []
        self._effects = {}
        return effects

    def peer_lost(self, peer: int) -> None:
        """A peer went away: every connection it owned is closed."""
        for conn_id in [c.conn_id for c in self.conns.values() if c.peer == peer]:
            self._on_conn_closed(peer, ConnClosed(conn_id, "peer lost"))
        self.peers.pop(peer, None)
        if peer == self.agent_peer:  # until the restarted agent says hello (it is told then)
            self.agent_peer = None

    def snapshot(self, gone_after: Optional[int] = None) -> dict:
        """management_snapshot(); ``gone_after``: include the removed entities with a greater
        seq (the metrics sink), None: none of them (management, /metrics)."""
        return management_snapshot(self, gone_after)

    @property
    def counters(self) -> dict:
        """The router-wide delivery counters, by their management attribute names."""
        return {"presettledDeliveries": self.presettled,
                "droppedPresettledDeliveries": self.dropped_presettled,
                "acceptedDeliveries": self.accepted, "rejectedDeliveries": self.rejected,
                "releasedDeliveries": self.released, "modifiedDeliveries": self.modified,
                "deliveriesIngress": self.ingress, "deliveriesEgress": self.egress,
                "deliveriesTransit": self.transit,
                "deliveriesIngressRouteContainer": self.ingress_container,
                "deliveriesEgressRouteContainer": self.egress_container}

    def set_address_config(self, addresses: list) -> None:
        """Replace the configured ``address`` rules (same dicts as the constructor's
        ``addresses=``).

        Applied at once: every existing mobile address takes the distribution and priority the
        new rules give it (or the defaults), as a new address would. Deliveries already held or
        sent keep going: held anycast deliveries still drain to consumers with credit whatever
        the new distribution (even multicast or unavailable), queued multicast copies still go
        to their links, and each delivery keeps the priority queue it was held in. Invalid
        rules raise before anything changes.
        """
        self.rules = AddressRules(addresses)
        for addr in self.addrs.values():
            if mobile_text(addr.key) is not None:
                addr.dist, addr.priority = self._treatment(addr.key)

    # ------------------------------------------------------------------------------------------
    # Effects
    # ------------------------------------------------------------------------------------------
    def _emit(self, peer: int, effect: Any) -> None:
        lst = self._effects.get(peer)
        if lst is None:
            lst = self._effects[peer] = []
        lst.append(effect)

    def _credit(self, link: Link, credit: int) -> None:
        link.granted += credit
        link.credit_pending += credit
        if link.credit_slot < 0:
            lst = self._effects.get(link.peer)
            if lst is None:
                lst = self._effects[link.peer] = []
            link.credit_slot = len(lst)
            lst.append(None)  # placeholder, filled in by take_effects
            self._credited.append(link)

    def _replenish(self, link: Link) -> None:
        if link.credited and not link.closed:
            owed = link.credit_owed + 1
            if owed >= link.credit_batch:
                link.credit_owed = 0
                self._credit(link, owed)
            else:
                link.credit_owed = owed

    # ------------------------------------------------------------------------------------------
    # Addresses
    # ------------------------------------------------------------------------------------------
    def _key(self, address: str) -> str:
        key = self._key_cache.get(address)
        if key is None:
            if len(self._key_cache) >= _KEY_CACHE_MAX:
                self._key_cache.clear()
            key = address_key(address, self.router_id, 0, self.area)
            self._key_cache[address] = key
        return key

    def _address(self, key: str) -> Address:
        addr = self.addrs.get(key)
        if addr is None:
            dist, priority = self._treatment(key)
            addr = Address(key, dist, priority)
            self.addrs[key] = addr
        return addr

    def _treatment(self, key: str) -> tuple:
        """(distribution, priority) of the address ``key`` under the configured rules."""
        dist = self.default_distribution
        priority = -1
        text = mobile_text(key)
        if text is not None:
            rule = self.rules.lookup(text)
            if rule is not None:
                dist = DIST_CODES.get(rule.distribution, dist)
                priority = rule.priority
            elif text == "$management":  # the agent: the nearest one answers (as in 1.x)
                dist = DIST_CLOSEST
        elif key[0] == "T":
            dist = DIST_MULTICAST
        else:
            dist = DIST_CLOSEST
        return dist, priority

    def _unref(self, addr: Address) -> None:
        addr.refs -= 1
        if (addr.refs <= 0 and addr.held == 0 and not addr.remotes
                and self.addrs.get(addr.key) is addr):
            del self.addrs[addr.key]
            self._record_gone("address", addr)

    def _record_gone(self, kind: str, obj: Any) -> None:
        """Keep the final counts of a removed address, link or connection (removal paths only)."""
        self.gone_seq += 1
        self.gone.append(gone_entry(kind, obj, self.gone_seq, self.now))

    def _new_temp(self, target: bool) -> tuple:
        rng = self._rng
        while True:
            rand = "".join([_TEMP_ALPHABET[rng.getrandbits(6) % 62] for _ in range(16)])
            address = temp_address(self.router_id, rand, target)
            key = self._key(address)
            if key not in self.addrs:
                return address, key

    # ------------------------------------------------------------------------------------------
    # Connections and links
    # ------------------------------------------------------------------------------------------
    def _on_hello(self, peer: int, cmd: Any) -> None:
        self.peers[peer] = cmd[1]
        if cmd[1] == "agent":
            self.agent_peer = peer
            # what happened before the agent was there (workers may start first), and for a
            # restarted agent the router links its predecessor had been told of
            for conn in self.conns.values():
                if conn.router_up:
                    self._emit(peer, RouterLinkUp(conn.conn_id, conn.cost, conn.container))
                else:
                    self._check_router_up(conn)
            for addr in self.addrs.values():
                if addr.consumers and self.mode == "interior" and addr.key[0] == "M":
                    self._announce(addr, True)

    def _on_conn_opened(self, peer: int, cmd: Any) -> None:
        old = self.conns.get(cmd[0])
        if old is not None:
            self._on_conn_closed(peer, ConnClosed(cmd[0], "reopened"))
        if cmd[11] is not None:  # policy: counted router-wide here; a denied one is closed
            reason = self.policy_counts.admit(cmd[0], cmd[3], cmd[11])  # and never registered
            if reason is not None:
                self._emit(peer, CloseConnection(cmd[0], RESOURCE_LIMIT_EXCEEDED, reason))
                return
        conn = Connection(peer, *cmd[:11])
        conn.opened_at = self.now
        self.conns[cmd[0]] = conn

    def _on_policy_event(self, peer: int, cmd: Any) -> None:
        self.policy_counts.event(cmd[0], cmd[1], cmd[2])

    def _on_conn_closed(self, peer: int, cmd: Any) -> None:
        self.policy_counts.release(cmd[0])
        conn = self.conns.pop(cmd[0], None)
        if conn is None:
            return
        links = list(conn.links.values())
        for link in links:  # first, so no effect goes to a link of this connection
            link.closed = True
        for link in links:
            self._drop_link(link)
            self._record_gone("link", link)
        self._router_down(conn)
        self._record_gone("connection", conn)

    def _on_attach(self, peer: int, cmd: Any) -> None:
        link_id, conn_id, direction, name, address, dynamic, presettled, capacity, link_type = cmd
        conn = self.conns.get(conn_id)
        if conn is None:
            self._emit(peer, LinkRefuse(link_id, "amqp:not-found", "unknown connection"))
            return
        router_link = link_type == _LINK_CONTROL or link_type == _LINK_DATA
        if conn.role == _INTER_ROUTER and self.mode == "interior":
            if not router_link:
                self._emit(conn.peer, LinkRefuse(
                    link_id, "amqp:not-allowed",
                    "endpoint links are not allowed on inter-router connections"))
                return
            self._attach_router_link(conn, link_id, direction, name, presettled, capacity,
                                     link_type)
            return
        if conn.role in _NO_INTERIOR:
            self._emit(conn.peer, LinkRefuse(
                link_id, "amqp:not-allowed",
                f"links on {conn.role} connections are not supported by this router"))
            return
        if router_link:
            self._emit(conn.peer, LinkRefuse(
                link_id, "amqp:not-allowed",
                f"{link_type} links are only allowed on inter-router connections"))
            return
        if link_id in self.links:
            self._emit(conn.peer, LinkRefuse(link_id, "amqp:internal-error", "duplicate link id"))
            return
        if direction == DIR_OUT and address is None and not dynamic:
            self._emit(conn.peer, LinkRefuse(link_id, "qd:no-route-to-dest",
                                             "No route to the destination node"))
            return
        link = Link(link_id, conn, direction, name, address, bool(presettled), capacity)
        if dynamic:
            address, key = self._new_temp(direction == DIR_IN)
            link.address = address
        elif address is not None:
            key = _phase_key(self.rules, self._key(address), direction)
        else:
            key = None
        self.links[link_id] = link
        conn.links[link_id] = link
        self._emit(conn.peer, LinkOpen(link_id, address))
        if key is None or (direction == DIR_IN and (key[0] == "R" or key[0] == "T")
                           and self.mode == "interior"):
            # an anonymous sender, or one targeted at another router (routed per delivery by
            # its link address, like an anonymous sender's `to`)
            link.credited = True
            self._credit(link, capacity)
            return
        addr = self._address(key)
        link.addr = addr
        addr.refs += 1
        if direction == DIR_OUT:
            addr.consumers.append(link)
            if link.to_container:
                addr.container_count += 1
            if addr.waiting:
                self._credit_waiting(addr)
            if not addr.announced and self.mode == "interior" and key[0] == "M":
                self._announce(addr, True)
        elif addr.consumers or (addr.remotes and self._reachable(addr)):
            link.credited = True
            self._credit(link, capacity)
        else:
            addr.waiting.append(link)

    def _attach_router_link(self, conn: Connection, link_id: Any, direction: int, name: str,
                            presettled: Any, capacity: int, link_type: str) -> None:
        """A control or data link on an inter-router connection (interior mode).

        Data links get their priority by attach order, per direction (the connecting side
        creates them in ascending priority order). Inbound router links get their whole
        capacity as credit at once, given back in slices as deliveries leave the core (see
        ``credit_batch``). Once both control links
        are attached the agent hears RouterLinkUp and starts its HELLOs on the connection.
        """
        if link_id in self.links:
            self._emit(conn.peer, LinkRefuse(link_id, "amqp:internal-error", "duplicate link id"))
            return
        link = Link(link_id, conn, direction, name, None, bool(presettled), capacity)
        link.link_type = link_type
        link.router = True
        if link_type == _LINK_DATA:
            if direction == DIR_IN:
                priority = conn.data_in
                conn.data_in += 1
            else:
                priority = conn.data_out
                conn.data_out += 1
            link.priority = priority if priority < 9 else 9
            if direction == DIR_OUT and conn.data_links[link.priority] is None:
                conn.data_links[link.priority] = link
        else:
            link.priority = _CONTROL_PRIORITY
            if direction == DIR_IN:
                conn.control_in = link
            else:
                conn.control_out = link
        self.links[link_id] = link
        conn.links[link_id] = link
        self._emit(conn.peer, LinkOpen(link_id, None))
        if direction == DIR_IN:
            link.credited = True
            self._credit(link, capacity)
            # Credit comes back in slices of an eighth of the window: the sending router then
            # moves deliveries in batches instead of one per credit frame (the sender always
            # keeps at least 7/8 of its window, so nothing can stall on the owed part).
            link.credit_batch = capacity // 8 if capacity >= 8 else 1
        self._check_router_up(conn)

    def _check_router_up(self, conn: Connection) -> None:
        """Tell the agent once a connection has both control links (and the agent is there)."""
        if (not conn.router_up and conn.control_in is not None and conn.control_out is not None
                and self.agent_peer is not None):
            conn.router_up = True
            self.neighbour_conns[conn.container] = conn
            self._emit(self.agent_peer, RouterLinkUp(conn.conn_id, conn.cost, conn.container))

    def _router_down(self, conn: Connection) -> None:
        if conn.router_up:
            conn.router_up = False
            if self.neighbour_conns.get(conn.container) is conn:
                del self.neighbour_conns[conn.container]
            if self.agent_peer is not None:
                self._emit(self.agent_peer, RouterLinkDown(conn.conn_id))

    def _on_detach(self, peer: int, cmd: Any) -> None:
        link = self.links.get(cmd[0])
        if link is None:
            return
        link.closed = True
        self._drop_link(link)
        self._record_gone("link", link)

    def _drop_link(self, link: Link) -> None:
        self.links.pop(link.link_id, None)
        link.conn.links.pop(link.link_id, None)
        addr = link.addr
        if link.router:  # not attached to any address
            self._drop_router_link(link)
            return
        if link.direction == DIR_IN:
            if addr is not None:
                if link in addr.waiting:
                    addr.waiting.remove(link)
                self._unref(addr)
            return
        addr.consumers.remove(link)
        if link.to_container:
            addr.container_count -= 1
        self._fail_outbound(link)
        if not addr.consumers and addr.held:
            self._release_held(addr)
        if not addr.consumers and addr.announced:
            self._announce(addr, False)
        self._unref(addr)

    def _drop_router_link(self, link: Link) -> None:
        conn = link.conn
        if link.link_type == _LINK_CONTROL:
            if conn.control_in is link:
                conn.control_in = None
            if conn.control_out is link:
                conn.control_out = None
                link.queue = deque()  # routing messages: raw payloads, nothing to settle
            self._router_down(conn)
        elif link.direction == DIR_OUT and conn.data_links[link.priority] is link:
            conn.data_links[link.priority] = None
        if link.direction == DIR_OUT:
            self._fail_outbound(link)

    def _fail_outbound(self, link: Link) -> None:
        """An outbound link is gone: what was queued for it is released (an anycast delivery
        toward another router), what was sent and not settled gets the receiver's outcome if it
        gave one, else MODIFIED (in doubt)."""
        self._release_queue(link)
        # Sent and unsettled: the receiver's outcome if it gave one, else in doubt (MODIFIED).
        for out in list(link.unsettled.values()):
            if out.out_id not in self.out_unsettled:
                continue
            self._forget_out(out)
            dlv = out.in_dlv
            if out.state:
                state, info = out.state, out.info
            else:
                state, info = STATE_MODIFIED, dict(_MODIFIED_FAILED)  # effects are not shared
            if dlv.multicast:
                if not out.done:
                    out.done = True
                    self._copy_done(dlv, state, info)
            else:
                self._settle_in(dlv, state, info)

    def _release_queue(self, link: Link) -> None:
        """Everything queued on an outbound link (not sent yet) is released: unsettled
        deliveries go back RELEASED, pre-settled ones are dropped; their senders get the
        credit back."""
        queue = link.queue
        link.queue = deque()
        for dlv in queue:
            if dlv.multicast:
                self._copy_unqueued(dlv)
                if not dlv.settled:
                    self._copy_done(dlv, STATE_RELEASED, None)
            else:
                self._release_waiting(dlv)

    # ------------------------------------------------------------------------------------------
    # Deliveries
    # ------------------------------------------------------------------------------------------
    def _on_transfer(self, peer: int, cmd: Any) -> None:
        dlv_id, link_id, to, settled, priority, payload = _fields(cmd)
        link = self.links.get(link_id)
        if link is None or link.direction != DIR_IN:
            if not settled:
                self._emit(peer, _effect(UpdateIn, (dlv_id, STATE_RELEASED, True, None)))
            return
        if link.router:  # a worker that reports router links as plain transfers
            self._on_router_transfer(peer, RouterTransfer(dlv_id, link_id, to, settled, priority,
                                                          0, None, [], payload))
            return
        link.received += 1
        link.delivery_count += 1
        link.conn.last_delivery_at = self.now
        self.ingress += 1
        if link.from_container:
            self.ingress_container += 1
        addr = link.addr
        key = None
        if addr is None:
            if to is None:  # a sender targeted at a topological address (see _on_attach)
                to = link.address
            if to is not None:
                key = _phase_key(self.rules, self._key(to), DIR_IN)
                addr = self.addrs.get(key)
        if settled:
            link.presettled_count += 1
            self.presettled += 1
        else:
            link.in_unsettled += 1
        if addr is not None:
            addr.ingress += 1
            if link.from_container:
                addr.from_container += 1
        self._route(link, dlv_id, settled, priority, payload, addr, key, None, None)

    def _route(self, link: Link, dlv_id: Any, settled: bool, priority: int, payload: Any,
               addr: Optional[Address], key: Any, origin: Any, exclude: Any) -> None:
        """Forward one inbound delivery (counted already) to its consumers: local links, and in
        a network other routers. ``origin``: the ingress router id of a delivery that came from
        another router (None: this one); ``exclude``: router ids in its trace."""
        if self.routers:  # interior, with other routers known
            if addr is None:
                if key is not None and (key[0] == "R" or key[0] == "T"):
                    self._route_topo(link, dlv_id, settled, priority, payload, key, exclude)
                    return
            elif addr.remotes and addr.dist != DIST_UNAVAILABLE and (
                    addr.dist != DIST_CLOSEST or not addr.consumers):
                self._route_remote(link, dlv_id, settled, priority, payload, addr, origin,
                                   exclude)
                return
        if addr is None or not addr.consumers or addr.dist == DIST_UNAVAILABLE:
            self._unroutable(link, dlv_id, settled)
            return
        if addr.dist == DIST_MULTICAST:
            dlv = _in_delivery(dlv_id, link, settled, payload, addr, True)
            self._forward_multicast(addr.consumers, dlv)
            return
        target = self._pick(addr)
        if target is not None:
            self._send_local(link, target, dlv_id, settled, payload, addr)
            return
        self._hold(link, dlv_id, settled, priority, payload, addr)

    def _send_local(self, link: Link, target: Link, dlv_id: Any, settled: bool, payload: Any,
                    addr: Address) -> None:
        """One anycast delivery to the local consumer ``target`` (which has credit)."""
        if settled:
            self._send(target, None, True, payload)
        else:
            dlv = _in_delivery(dlv_id, link, False, None, addr, False)
            self.in_unsettled[dlv_id] = dlv
            dlv.out = self._send(target, dlv, False, payload)
        self._replenish(link)

    def _unroutable(self, link: Link, dlv_id: Any, settled: bool) -> None:
        """No destination: a pre-settled delivery is dropped, an unsettled one RELEASED."""
        if settled:
            link.dropped_presettled_count += 1
            self.dropped_presettled += 1
        else:
            link.in_unsettled -= 1
            self._count_outcome(link, STATE_RELEASED, True)
            if not link.closed:
                self._emit(link.peer, _effect(UpdateIn, (dlv_id, STATE_RELEASED, True, None)))
        self._replenish(link)

    def _hold(self, link: Link, dlv_id: Any, settled: bool, priority: int, payload: Any,
              addr: Address) -> None:
        """Local consumers, none with credit: hold the delivery at the address."""
        dlv = _in_delivery(dlv_id, link, settled, _own(payload), addr, False)
        if not settled:
            self.in_unsettled[dlv_id] = dlv
        if addr.priority >= 0:
            priority = addr.priority
        dlv.priority = 9 if priority > 9 else (0 if priority < 0 else priority)
        addr.queues[dlv.priority].append(dlv)
        addr.held += 1
        dlv.pending = 1
        link.held += 1

    def _pick(self, addr: Address) -> Optional[Link]:
        """The consumer link for one anycast delivery, or None if no consumer has credit."""
        consumers = addr.consumers
        n = len(consumers)
        if n == 1:
            link = consumers[0]
            return link if link.limit > link.delivered else None
        start = addr.rr % n if n else 0
        if addr.dist == DIST_CLOSEST:
            for k in range(n):
                i = (start + k) % n
                link = consumers[i]
                if link.limit > link.delivered:
                    addr.rr = i + 1
                    return link
            return None
        best = None
        best_i = 0
        best_out = 0
        best_cap = 1
        for k in range(n):
            i = (start + k) % n
            link = consumers[i]
            if link.limit > link.delivered:
                out = len(link.unsettled) + len(link.queue)
                cap = link.capacity if link.capacity > 0 else 1
                if best is None or out * best_cap < best_out * cap:
                    best, best_i, best_out, best_cap = link, i, out, cap
        if best is not None:
            addr.rr = best_i + 1
        return best

    def _send(self, link: Link, dlv: Optional[InDelivery], settled: bool,
              payload: Any) -> Optional[OutDelivery]:
        out_id = self._next_out
        self._next_out = out_id + 1
        link.delivered += 1
        link.delivery_count += 1
        link.conn.last_delivery_at = self.now
        addr = link.addr
        addr.egress += 1
        self.egress += 1
        if link.to_container:
            addr.to_container += 1
            self.egress_container += 1
        self._emit(link.peer, _effect(Deliver, (out_id, link.link_id, settled, payload)))
        return self._track_out(link, dlv, settled, out_id)

    def _track_out(self, link: Link, dlv: Any, settled: bool, out_id: Any) -> Any:
        """After sending ``out_id`` on ``link``: count it (pre-settled) or remember it until
        the receiver settles it."""
        if settled:
            link.presettled_count += 1
            return None
        out = _out_delivery(out_id, link, dlv)
        self.out_unsettled[out_id] = out
        link.unsettled[out_id] = out
        return out

    def _forward_multicast(self, targets: list, dlv: InDelivery) -> None:
        """One copy of ``dlv`` to every link of ``targets`` (local consumers, and one data
        link per next-hop router), queued on a link without credit."""
        settled = dlv.settled
        dlv.targets = targets
        if not settled:
            self.in_unsettled[dlv.dlv_id] = dlv
            dlv.open = len(targets)
            dlv.copies = []
        for link in targets:
            if link.queue or link.limit <= link.delivered:
                if not dlv.pending:
                    dlv.payload = _own(dlv.payload)
                link.queue.append(dlv)
                dlv.pending += 1
            else:
                out = self._send_copy(link, dlv)
                if not settled:
                    dlv.copies.append(out)
        if dlv.pending:
            dlv.link.held += 1
        else:
            dlv.payload = None
            self._replenish(dlv.link)

    def _copy_unqueued(self, dlv: InDelivery) -> None:
        """One queued multicast copy left its queue (sent or dropped)."""
        dlv.pending -= 1
        if dlv.pending == 0:
            dlv.payload = None
            dlv.link.held -= 1
            self._replenish(dlv.link)

    def _on_flow(self, peer: int, cmd: Any) -> None:
        link_id, limit, drain = _fields(cmd)
        link = self.links.get(link_id)
        if link is None or link.direction != DIR_OUT:
            return
        link.limit = limit
        addr = link.addr
        if addr is None:  # a router link
            if link.queue:
                self._drain_queue(link)
            if drain and (link.limit > link.delivered or not link.queue):
                self._emit(link.peer, Drained(link_id))
                if link.limit > link.delivered:
                    link.delivered = link.limit
            return
        if link.queue:
            self._drain_queue(link)
        elif addr.held:  # anycast deliveries held at the address (whatever its dist is now)
            queues = addr.queues
            while addr.held and link.limit > link.delivered:
                for p in range(9, -1, -1):
                    if queues[p]:
                        dlv = queues[p].popleft()
                        break
                addr.held -= 1
                if dlv.settled:
                    self._send(link, None, True, dlv.payload)
                else:
                    dlv.out = self._send(link, dlv, False, dlv.payload)
                self._unhold(dlv)
        if drain and (link.limit > link.delivered or not (link.queue or addr.held)):
            self._emit(link.peer, Drained(link_id))
            if link.limit > link.delivered:
                link.delivered = link.limit

    def _release_held(self, addr: Address) -> None:
        """No consumer left: every delivery held at the address is released or dropped."""
        for queue in addr.queues:
            while queue:
                addr.held -= 1
                self._release_waiting(queue.popleft())

    def _unhold(self, dlv: InDelivery) -> None:
        """An anycast delivery the core held (at its address, or queued toward another router)
        stops waiting: sent, settled by its sender, or released. Its sender gets the credit."""
        dlv.pending = 0
        dlv.payload = None
        dlv.link.held -= 1
        self._replenish(dlv.link)

    def _release_waiting(self, dlv: InDelivery) -> None:
        """A held anycast delivery can go nowhere: RELEASED if unsettled, else dropped."""
        if dlv.settled:
            dlv.link.dropped_presettled_count += 1
            self.dropped_presettled += 1
        else:
            self._settle_in(dlv, STATE_RELEASED, None)
        self._unhold(dlv)

    # ------------------------------------------------------------------------------------------
    # Settlement
    # ------------------------------------------------------------------------------------------
    def _count_outcome(self, link: Link, state: int, router_wide: bool) -> None:
        if state == STATE_ACCEPTED:
            link.accepted += 1
            if router_wide:
                self.accepted += 1
        elif state == STATE_RELEASED:
            link.released += 1
            if router_wide:
                self.released += 1
        elif state == STATE_MODIFIED:
            link.modified += 1
            if router_wide:
                self.modified += 1
        elif state == STATE_REJECTED:
            link.rejected += 1
            if router_wide:
                self.rejected += 1

    def _settle_in(self, dlv: InDelivery, state: int, info: Any) -> None:
        """Final outcome of an unsettled inbound delivery: tell its sender (if still there)."""
        if self.in_unsettled.pop(dlv.dlv_id, None) is None:
            return
        link = dlv.link
        link.in_unsettled -= 1
        self._count_outcome(link, state, True)
        if not link.closed:
            self._emit(link.peer, _effect(UpdateIn, (dlv.dlv_id, state, True, info)))

    def _forget_out(self, out: OutDelivery) -> None:
        del self.out_unsettled[out.out_id]
        del out.link.unsettled[out.out_id]
        dlv = out.in_dlv
        if dlv.out is out:  # anycast: break the dlv <-> out cycle, or only the GC frees them
            dlv.out = None
        if out.state:
            self._count_outcome(out.link, out.state, False)

    def _copy_done(self, dlv: InDelivery, state: int, info: Any) -> None:
        """One copy of an unsettled multicast delivery reached its outcome."""
        if MCAST_RANK.get(state, 3) > MCAST_RANK.get(dlv.outcome, 0):
            dlv.outcome = state if state in MCAST_RANK else STATE_ACCEPTED
            dlv.info = info
        dlv.open -= 1
        if dlv.open > 0:
            return
        self._settle_in(dlv, dlv.outcome, dlv.info)
        for out in dlv.copies:
            if out.out_id in self.out_unsettled:
                self._forget_out(out)
                if not out.link.closed:
                    self._emit(out.link.peer, _effect(SettleOut, (out.out_id, out.state)))
        dlv.copies = []

    def _on_disposition(self, peer: int, cmd: Any) -> None:
        out_id, state, settled, info = _fields(cmd)
        out = self.out_unsettled.get(out_id)
        if out is None:
            return
        terminal = state in MCAST_RANK
        if terminal:
            out.state = state
            out.info = info
        dlv = out.in_dlv
        if dlv.multicast:
            if settled:
                if not out.state:
                    out.state = STATE_ACCEPTED
                self._forget_out(out)
            if not out.done and (terminal or settled):
                out.done = True
                self._copy_done(dlv, out.state, out.info)
            return
        if settled:
            # Settled with no outcome ever given: the receiver consumed it (its default outcome).
            if not out.state:
                out.state = STATE_ACCEPTED
            self._forget_out(out)
            self._settle_in(dlv, out.state, out.info)
        elif terminal:
            if dlv.link.closed:  # nobody upstream will ever settle: settle here
                self._forget_out(out)
                self._settle_in(dlv, state, info)
                self._emit(out.link.peer, _effect(SettleOut, (out_id, state)))
            else:
                self._emit(dlv.link.peer, _effect(UpdateIn, (dlv.dlv_id, state, False, info)))

    def _on_settle_in(self, peer: int, cmd: Any) -> None:
        dlv_id, state = _fields(cmd)
        dlv = self.in_unsettled.pop(dlv_id, None)
        if dlv is None:
            return
        link = dlv.link
        link.in_unsettled -= 1
        self._count_outcome(link, state, True)
        if dlv.pending:
            if dlv.multicast:
                for consumer in dlv.targets:
                    queue = consumer.queue
                    while dlv in queue:
                        queue.remove(dlv)
                        self._copy_unqueued(dlv)
            else:
                held = dlv.addr.queues[dlv.priority] if dlv.addr is not None else ()
                if dlv in held:
                    held.remove(dlv)
                    dlv.addr.held -= 1
                else:
                    for out_link in list(self.links.values()):  # queued toward another router
                        if out_link.router and dlv in out_link.queue:
                            out_link.queue.remove(dlv)
                            break
                self._unhold(dlv)
        outs = dlv.copies if dlv.multicast else ([dlv.out] if dlv.out is not None else [])
        for out in outs:
            if out.out_id in self.out_unsettled:
                self._forget_out(out)
                if not out.link.closed:
                    self._emit(out.link.peer, _effect(SettleOut, (out.out_id, state)))
        dlv.copies = []
        dlv.out = None

    # ------------------------------------------------------------------------------------------
    # Interior mode: other routers (routing table from the agent) and inter-router links
    # ------------------------------------------------------------------------------------------
    def _on_router_transfer(self, peer: int, cmd: Any) -> None:
        dlv_id, link_id, to, settled, priority, phase, ingress, trace, payload = _fields(cmd)
        link = self.links.get(link_id)
        if link is None or link.direction != DIR_IN:
            if not settled:
                self._emit(peer, _effect(UpdateIn, (dlv_id, STATE_RELEASED, True, None)))
            return
        link.received += 1
        link.delivery_count += 1
        link.conn.last_delivery_at = self.now
        if settled:
            link.presettled_count += 1
            self.presettled += 1
        else:
            link.in_unsettled += 1
        if to is None:
            self._unroutable(link, dlv_id, settled)
            return
        key = self._key(to)
        exclude = _trace_ids(trace)
        if link.link_type == _LINK_CONTROL or key in _CONTROL_LOCAL or key in _CONTROL_FLOOD:
            self._control_in(link, dlv_id, settled, key, exclude, payload)
            return
        if phase and key[0] == "M":
            key = f"M{phase}{key[2:]}"
        if ingress is not None and ingress[:2] == "0/":
            origin = ingress[2:]
        else:
            origin = link.conn.container
        self._route(link, dlv_id, settled, priority, payload, self.addrs.get(key), key, origin,
                    exclude)

    def _control_in(self, link: Link, dlv_id: Any, settled: bool, key: str, exclude: Any,
                    payload: Any) -> None:
        """A routing-protocol message: to the agent if it is for this router, onward (flooded
        or toward its router) if it is for others. Always consumed here."""
        if not settled:  # routing messages are pre-settled; accept one that is not
            link.in_unsettled -= 1
            self._count_outcome(link, STATE_ACCEPTED, True)
            if not link.closed:
                self._emit(link.peer, _effect(UpdateIn, (dlv_id, STATE_ACCEPTED, True, None)))
        if (key in _CONTROL_LOCAL or key in _CONTROL_FLOOD) and self.agent_peer is not None:
            self._emit(self.agent_peer, ControlIn(link.conn.conn_id, payload))
        if key[0] == "T":
            self._flood_control(payload, exclude)
        elif key[0] == "R":
            self._control_toward(key[1:], payload, exclude)
        self._replenish(link)

    def _control_toward(self, router_id: str, payload: Any, exclude: Any) -> None:
        """A routing message for one router: straight to it if it is a neighbour (even while
        the routes still say otherwise, e.g. an LSR answering a neighbour's RA right after a
        topology change), else along the next hop."""
        conn = self.neighbour_conns.get(router_id)
        if conn is None:
            router = self.routers.get(router_id)
            if router is None or router.next_hop in exclude:
                return
            conn = router.conn
        if conn is not None:
            self._send_control(conn.control_out, payload)

    def _on_control_send(self, peer: int, cmd: Any) -> None:
        conn_id, to, payload = cmd
        if conn_id >= 0:
            conn = self.conns.get(conn_id)
            if conn is not None:
                self._send_control(conn.control_out, payload)
            return
        key = self._key(to)
        if key[0] == "T":
            self._flood_control(payload, ())
        elif key[0] == "R":
            self._control_toward(key[1:], payload, ())

    def _flood_control(self, payload: Any, exclude: Any) -> None:
        """One copy on the control link of every distinct next hop, except routers in the
        trace."""
        done = set()
        for router in self.routers.values():
            conn = router.conn
            if conn is None or router.next_hop in exclude or conn.conn_id in done:
                continue
            done.add(conn.conn_id)
            self._send_control(conn.control_out, payload)

    def _send_control(self, link: Any, payload: Any) -> None:
        if link is None or link.closed:
            return
        if not link.queue and link.limit > link.delivered:
            self._send_router(link, None, True, payload, None, -1)
        elif len(link.queue) < _CONTROL_BACKLOG:
            link.queue.append(_own(payload))

    def _route_topo(self, link: Link, dlv_id: Any, settled: bool, priority: int, payload: Any,
                    key: str, exclude: Any) -> None:
        """``_topo/0/<router>/...`` (key ``R<router>``): toward that router; ``_topo/0/all/...``
        (``T...``): one copy to every next hop."""
        prio = 9 if priority > 9 else (0 if priority < 0 else priority)
        # a sender targeted at the address: the next router reads it from x-opt-qd.to
        to_override = None if link.router else link.address
        if key[0] == "R":
            router = self.routers.get(key[1:])
            if router is None or (exclude and router.next_hop in exclude):
                self._unroutable(link, dlv_id, settled)
                return
            out = self._data_link(router.conn, prio)
            if out is None:
                self._unroutable(link, dlv_id, settled)
                return
            self._send_anycast_remote(link, dlv_id, settled, payload, None, out, to_override, -1)
            return
        targets = self._next_hop_links(self.routers, exclude, prio)
        if not targets:
            self._unroutable(link, dlv_id, settled)
            return
        dlv = _in_delivery(dlv_id, link, settled, payload, None, True)
        dlv.to_override = to_override
        self._forward_multicast(targets, dlv)

    def _route_remote(self, link: Link, dlv_id: Any, settled: bool, priority: int, payload: Any,
                      addr: Address, origin: Any, exclude: Any) -> None:
        """A mobile address with destinations on other routers (and maybe here)."""
        prio = addr.priority if addr.priority >= 0 else priority
        prio = 9 if prio > 9 else (0 if prio < 0 else prio)
        to_override = None
        phase = -1
        if not link.router and link.addr is not None:
            # a targeted sender: the next router cannot read the address from the message
            to_override = mobile_text(addr.key)
            if to_override is None:
                to_override = link.address
            if addr.key[0] == "M" and addr.key[1] != "0":  # a waypoint phase travels along
                phase = ord(addr.key[1]) - 48
        if addr.dist == DIST_MULTICAST:
            targets = list(addr.consumers)
            remote = self._next_hop_links(addr.remotes, exclude, prio)
            if remote:
                addr.transit += 1  # deliveriesTransit: sent on toward other routers
                targets.extend(remote)
            if not targets:
                self._unroutable(link, dlv_id, settled)
                return
            dlv = _in_delivery(dlv_id, link, settled, payload, addr, True)
            dlv.to_override = to_override
            dlv.phase = phase
            self._forward_multicast(targets, dlv)
            return
        local = self._pick(addr) if addr.consumers else None
        remote = self._pick_remote(addr, origin, exclude, prio)
        if local is not None and remote is not None and addr.dist != DIST_CLOSEST:
            local_score = len(local.unsettled) + len(local.queue)
            router = self.routers[remote[1]]
            if local_score > router.cost + len(remote[0].unsettled) + len(remote[0].queue):
                local = None
        if local is not None:
            self._send_local(link, local, dlv_id, settled, payload, addr)
            return
        if remote is not None:
            addr.transit += 1
            self._send_anycast_remote(link, dlv_id, settled, payload, addr, remote[0],
                                      to_override, phase)
            return
        if addr.consumers:
            self._hold(link, dlv_id, settled, priority, payload, addr)
        else:
            self._unroutable(link, dlv_id, settled)

    def _pick_remote(self, addr: Address, origin: Any, exclude: Any, prio: int) -> Any:
        """(data link, router id) toward the best other router with a destination for
        ``addr``: least cost for closest; for balanced least cost plus what is outstanding on
        the link, among routers for which the delivery's ingress router is a valid origin."""
        closest = addr.dist == DIST_CLOSEST
        best = None
        best_id = None
        best_score = 0
        for router_id in addr.remotes:
            router = self.routers.get(router_id)
            if router is None or (exclude and router.next_hop in exclude):
                continue
            if (not closest and origin is not None and origin != self.router_id
                    and origin not in router.valid_origins):
                continue
            out = self._data_link(router.conn, prio)
            if out is None:
                continue
            score = router.cost
            if not closest:
                score += len(out.unsettled) + len(out.queue)
            if best is None or score < best_score or (score == best_score
                                                      and router_id < best_id):
                best, best_id, best_score = out, router_id, score
        return None if best is None else (best, best_id)

    def _next_hop_links(self, router_ids: Any, exclude: Any, prio: int) -> list:
        """The data link of every distinct next hop toward ``router_ids``, except next hops in
        the trace."""
        links = []
        done = set()
        for router_id in router_ids:
            router = self.routers.get(router_id)
            if router is None or router.conn is None:
                continue
            if (exclude and router.next_hop in exclude) or router.conn.conn_id in done:
                continue
            done.add(router.conn.conn_id)
            out = self._data_link(router.conn, prio)
            if out is not None:
                links.append(out)
        return links

    def _data_link(self, conn: Any, prio: int) -> Any:
        """The outbound data link of ``prio`` on an inter-router connection (another priority
        if that one is missing), None if there is none."""
        if conn is None:
            return None
        links = conn.data_links
        link = links[prio]
        if link is not None and not link.closed:
            return link
        for link in links:
            if link is not None and not link.closed:
                return link
        return None

    def _send_anycast_remote(self, link: Link, dlv_id: Any, settled: bool, payload: Any,
                             addr: Any, out: Link, to_override: Any, phase: int) -> None:
        """One delivery to another router on ``out``, queued there without credit."""
        dlv = None
        if not settled:
            dlv = _in_delivery(dlv_id, link, False, None, addr, False)
            self.in_unsettled[dlv_id] = dlv
        if not out.queue and out.limit > out.delivered:
            sent = self._send_router(out, dlv, settled, payload, to_override, phase)
            if dlv is not None:
                dlv.out = sent
            self._replenish(link)
            return
        if dlv is None:
            dlv = _in_delivery(dlv_id, link, True, None, addr, False)
        dlv.payload = _own(payload)
        dlv.to_override = to_override
        dlv.phase = phase
        dlv.pending = 1
        link.held += 1
        out.queue.append(dlv)

    def _drain_queue(self, link: Link) -> None:
        """Send what waits on an outbound link, as far as its credit goes: multicast copies
        (client or router link), anycast deliveries toward another router, or raw routing
        messages on a control link."""
        queue = link.queue
        if link.link_type == _LINK_CONTROL:
            while queue and link.limit > link.delivered:
                self._send_router(link, None, True, queue.popleft(), None, -1)
            return
        while queue and link.limit > link.delivered:
            dlv = queue.popleft()
            sent = self._send_copy(link, dlv)
            if dlv.multicast:
                if not dlv.settled:
                    dlv.copies.append(sent)
                self._copy_unqueued(dlv)
            else:
                if not dlv.settled:
                    dlv.out = sent
                self._unhold(dlv)

    def _send_copy(self, link: Link, dlv: InDelivery) -> Any:
        """``dlv``'s message on ``link``, a client link or one toward another router; the
        OutDelivery to track (None when pre-settled)."""
        track = None if dlv.settled else dlv
        if link.router:
            return self._send_router(link, track, dlv.settled, dlv.payload, dlv.to_override,
                                     dlv.phase)
        return self._send(link, track, dlv.settled, dlv.payload)

    def _send_router(self, link: Link, dlv: Any, settled: bool, payload: Any,
                     to_override: Any, phase: int) -> Any:
        out_id = self._next_out
        self._next_out = out_id + 1
        link.delivered += 1
        link.delivery_count += 1
        link.conn.last_delivery_at = self.now
        if link.link_type == _LINK_DATA:
            self.transit += 1
        self._emit(link.peer, _effect(RouterDeliver, (out_id, link.link_id, settled, to_override,
                                                      phase, payload)))
        return self._track_out(link, dlv, settled, out_id)

    def _on_route_update(self, peer: int, cmd: Any) -> None:
        next_hop, cost, valid_origins, neighbours = cmd
        routers = {}
        for router_id, hop in next_hop.items():
            if router_id == self.router_id:
                continue
            conn = self.conns.get(neighbours.get(hop, -1))
            routers[router_id] = RemoteRouter(router_id, hop, conn, int(cost.get(router_id, 1)),
                                              frozenset(valid_origins.get(router_id, ())))
        self.routers = routers
        # A neighbour the routing protocol lost (no HELLO for helloMaxAge) while its connection
        # stays up, e.g. a frozen router: what waits on its data links would wait (and hold its
        # senders' credit) until the connection times out. Release it; new traffic takes the
        # new routes.
        reachable = set(neighbours.values())
        for conn in self.conns.values():
            if conn.router_up and conn.conn_id not in reachable:
                for link in conn.data_links:
                    if link is not None and link.queue:
                        self._release_queue(link)
        for addr in list(self.addrs.values()):
            if addr.waiting and self._reachable(addr):
                self._credit_waiting(addr)

    def _on_remote_address(self, peer: int, cmd: Any) -> None:
        key, router, present, hint = cmd
        addr = self.addrs.get(key)
        if present:
            if addr is None:
                addr = self._address(key)
                text = mobile_text(key)
                if (hint in _DIST_OF_HINT and text is not None
                        and (not len(self.rules) or self.rules.lookup(text) is None)):
                    addr.dist = _DIST_OF_HINT[hint]
            addr.remotes[router] = hint
            if addr.waiting and router in self.routers:
                self._credit_waiting(addr)
        elif addr is not None and router in addr.remotes:
            del addr.remotes[router]
            if addr.refs <= 0 and addr.held == 0 and not addr.remotes:
                del self.addrs[key]
                self._record_gone("address", addr)

    def _reachable(self, addr: Address) -> bool:
        for router_id in addr.remotes:
            if router_id in self.routers:
                return True
        return False

    def _credit_waiting(self, addr: Address) -> None:
        waiting = addr.waiting
        addr.waiting = []
        for sender in waiting:
            sender.credited = True
            self._credit(sender, sender.capacity)

    def _announce(self, addr: Address, present: bool) -> None:
        """Tell the agent a mobile address gained its first / lost its last local destination
        (it advertises them to the other routers in MAUs)."""
        addr.announced = present
        if self.agent_peer is not None:
            self._emit(self.agent_peer, LocalAddress(addr.key, present,
                                                     _HINT_OF_DIST.get(addr.dist, 3)))


def _trace_ids(trace: Any) -> Any:
    """The router ids of an ``x-opt-qd.trace`` list (``0/<id>`` entries)."""
    if not trace:
        return ()
    return frozenset([t[2:] if t[:2] == "0/" else t for t in trace])
