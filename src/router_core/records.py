"""The core's records and codes: connections, links, addresses, deliveries (state, no behaviour).

Owns: the integer codes the core compares on its per-message path (connection roles, link types,
router modes, address-key classes: strings at the IPC edge, converted once when a connection
opens, a link attaches or an address is created), the records, and the small helpers every part
of the core uses to build effects and records. Part of the core: setup.py compiles this file
together with the other parts (see core.py) into ``router_core._core``, where the records are
final cdef classes (``cython/_core.pxd``). So: plain classes with ``__slots__``, no
``from __future__`` import, and every attribute declared in the .pxd too.

corestate.management_snapshot reads the records (and turns the codes back into the names
management shows); nothing outside the core builds them.

Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from collections import deque
from typing import Any, Optional

try:
    import cython
    _COMPILED = cython.compiled
except ImportError:  # Cython builds the compiled core; the pure build does not need it
    _COMPILED = False

from router_core import addressing
from common.ipc import DIR_IN

# ----------------------------------------------------------------------------------------------
# Codes (declared as C ints in cython/_core.pxd; the names are what the IPC and management use)
# ----------------------------------------------------------------------------------------------
# Connection roles (ConnOpened.role)
ROLE_NORMAL = 0
ROLE_INTER_ROUTER = 1
ROLE_ROUTE_CONTAINER = 2
ROLE_EDGE = 3
ROLE_INTERNAL = 4
ROLE_CODES = {"normal": ROLE_NORMAL, "inter-router": ROLE_INTER_ROUTER,
              "route-container": ROLE_ROUTE_CONTAINER, "edge": ROLE_EDGE,
              "internal": ROLE_INTERNAL}
ROLE_NAMES = {code: name for name, code in ROLE_CODES.items()}
# what core.info_logs records (ROUTER_CORE info lines, written by router_core/corelog.py)
LOG_CONN_OPENED = 0
LOG_CONN_CLOSED = 1
LOG_LINK_ATTACHED = 2
LOG_LINK_DETACHED = 3
LOG_LINK_LOST = 4   # closed with its connection
LOG_LINK_STUCK = 5  # the link's first stuck delivery (settlement.scan_stuck)
LOG_LINK_BLOCKED = 6  # the link found blocked with zero credit (settlement.scan_blocked)

# Link types (LinkAttach.link_type, from the terminus capabilities qd.router / qd.router-data)
LINK_ENDPOINT = 0
LINK_CONTROL = 1
LINK_DATA = 2
# an interior's downlink to an edge (edgeserver.py): never asked for by a worker, named only
LINK_EDGE_DOWNLINK = 3
LINK_TYPE_CODES = {"endpoint": LINK_ENDPOINT, "router-control": LINK_CONTROL,
                   "inter-router": LINK_DATA}
LINK_TYPE_NAMES = {code: name for name, code in LINK_TYPE_CODES.items()}
LINK_TYPE_NAMES[LINK_EDGE_DOWNLINK] = "edge-downlink"

# A targeted sender's stall (transfer.stall; 1.19's drain when its address has no path):
# none; stalled (drain flag set, no credit given back); restoring (the address has a
# destination again, drain cleared: the worker's LinkUnstalled says the credit the sender has)
STALL_NONE = 0
STALL_ON = 1
STALL_RESTORING = 2

# Router modes (router.mode)
MODE_STANDALONE = 0
MODE_INTERIOR = 1
MODE_EDGE = 2
MODE_CODES = {"standalone": MODE_STANDALONE, "interior": MODE_INTERIOR, "edge": MODE_EDGE}
MODE_NAMES = {code: name for name, code in MODE_CODES.items()}

# Address-key classes: the first character of a hash key (addressing.CLASS_*)
KEY_MOBILE = 0
KEY_LOCAL = 1
KEY_TOPOLOGICAL = 2
KEY_ROUTER = 3
KEY_AREA = 4
KEY_OTHER = 5  # not a key this router makes (e.g. a remote router's MAU naming a new class)
KEY_EDGE = 6   # interior: H<edge id>, an edge router's own addresses (edge.py)
KEY_CLASSES = {addressing.CLASS_MOBILE: KEY_MOBILE, addressing.CLASS_LOCAL: KEY_LOCAL,
               addressing.CLASS_TOPOLOGICAL: KEY_TOPOLOGICAL,
               addressing.CLASS_ROUTER: KEY_ROUTER, addressing.CLASS_AREA: KEY_AREA,
               addressing.CLASS_EDGE: KEY_EDGE}

CONTROL_PRIORITY = 9  # control messages travel at the highest priority
PRIORITIES = 10       # message priorities 0..9: one data link and one held queue each

_tuple_new = tuple.__new__


def _effect(cls: type, fields: tuple) -> Any:
    """``cls(*fields)`` for an IPC NamedTuple, without running its Python-level ``__new__``
    (~0.4 µs)."""
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
# Records
# ----------------------------------------------------------------------------------------------
class Connection:
    __slots__ = ("peer", "conn_id", "role", "direction", "host", "container", "listener", "user",
                 "sasl", "encrypted", "link_capacity", "cost", "links", "opened_at",
                 "last_delivery_at", "data_in", "data_out", "control_in", "control_out",
                 "data_links", "router_up", "streaming_links", "stream_links")

    def __init__(self, peer: int, conn_id: int, role: int, direction: str, host: str,
                 container: str, listener: str, user: str, sasl: str, encrypted: bool,
                 link_capacity: int, cost: int = 1) -> None:
        self.peer = peer
        self.conn_id = conn_id
        self.role = role  # ROLE_*
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
        self.data_links = [None] * PRIORITIES
        self.router_up = False
        # inter-router: the peer offered qd.streaming-links, and the outbound streaming links
        # opened on the connection so far, busy or idle (streamlinks.py)
        self.streaming_links = False
        self.stream_links = []
        self.opened_at = 0.0         # core time of the open (for uptimeSeconds)
        self.last_delivery_at = -1.0  # core time of the last delivery in or out, -1: none yet


class Link:
    __slots__ = ("link_id", "conn", "peer", "direction", "name", "address", "addr", "capacity",
                 "presettled", "closed", "from_container", "to_container",
                 # LINK_*; router: a control or data link on an inter-router connection (it
                 # carries other routers' traffic, client messages included, and has no
                 # address); priority: of a router link, else -1
                 "link_type", "router", "priority",
                 # inbound: credit granted in total, deliveries received, held in the core,
                 # unsettled inbound deliveries; credited once the initial window was granted;
                 # credit not yet flushed and the slot of its LinkCredit in the peer's effects
                 "granted", "received", "held", "in_unsettled", "credited", "credit_pending",
                 "credit_slot",
                 # replenished credit not granted yet, and how much is granted at once (1 for
                 # client links; a slice of the window on inter-router links)
                 "credit_owed", "credit_batch",
                 # settle_credit: an unsettled delivery's credit comes back when it is settled,
                 # not when it leaves the core (1.19's endpoint links: linkCapacity bounds a
                 # sender's unsettled deliveries); settle_owed: those that left and are not
                 # settled yet (their credit is still out)
                 "settle_credit", "settle_owed",
                 # outbound: credit limit from the receiver, deliveries sent (delivery count),
                 # per-link queue (multicast copies; on a router link also anycast deliveries
                 # and routing messages), unsettled outbound deliveries out_id -> OutDelivery
                 "limit", "delivered", "queue", "unsettled",
                 # management counters
                 "delivery_count", "presettled_count", "dropped_presettled_count", "accepted",
                 "rejected", "released", "modified",
                 # deliveriesDelayed1Sec/10Sec: unsettled deliveries settled more than 1 s
                 # (10 s) after they came in (settlement.count_delay)
                 "delayed_1sec", "delayed_10sec",
                 # deliveriesStuck: its deliveries found stuck and not settled since; the core
                 # time of its attach or of its last accepted/rejected settlement (1.19's
                 # core_ticks: a delivery is stuck when nothing settled for STUCK_AGE)
                 "stuck", "rate_at",
                 # 1.19's blocked links (settlement.scan_blocked): the core time since which
                 # its credit has been zero (its attach; -1.0: credit seen), and whether the
                 # sweep found it blocked (counted in the router's linksBlocked)
                 "zero_at", "blocked",
                 # termini and [snd, rcv] settle modes: of a peer-attached link as the peer
                 # sent them; of a link the router attached (AttachOut) what it asked for,
                 # and the peer's answer in remote_*; attaching: that answer is still due;
                 # owner: what the router attached it for (an auto-link, a link route), or None
                 "source", "target", "settle", "remote_source", "remote_target",
                 "remote_settle", "attaching", "owner",
                 # an auto-link's link for a fallback destination (autolinks.py): what comes
                 # in on it is never redirected to the fallback again, nor counted as ingress
                 "fallback",
                 # an anonymous sender of a multiTenant connection: toward another router its
                 # deliveries carry the tenant's address in x-opt-qd.to (forwarders.py)
                 "tenant",
                 # a link-routed link: the other link of its pair (linkroute.py), else None
                 "peer_link",
                 # inbound, targeted: STALL_* (transfer.stall: its address had no path), and
                 # the LinkStall offs whose LinkUnstalled answer is still due
                 "stall", "stall_offs",
                 # an outbound streaming link (streamlinks.py), and whether a message still
                 # arriving is on it (not idle)
                 "streaming", "stream_busy",
                 # outbound: out_ids of the copies of messages still arriving whose last
                 # frame has not been passed on (streaming.py), None when there are none;
                 # management counts them undelivered, not yet in deliveryCount (1.19)
                 "sending",
                 # a core endpoint (edge.py: address tracking, heartbeats): the object that
                 # takes what arrives on it (``transfer``) or whose raw messages wait in
                 # ``queue``; None for every other link
                 "endpoint")

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
        container = conn.role == ROLE_ROUTE_CONTAINER
        self.from_container = container and direction == DIR_IN
        self.to_container = container and direction != DIR_IN
        self.link_type = LINK_ENDPOINT
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
        # 1.19 gives an unsettled delivery's credit back at once on inter-router and edge
        # links (and the agent's in-process ones); link-routed links pass credit through
        self.settle_credit = direction == DIR_IN and conn.role in (ROLE_NORMAL,
                                                                   ROLE_ROUTE_CONTAINER)
        self.settle_owed = 0
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
        self.delayed_1sec = 0
        self.delayed_10sec = 0
        self.stuck = 0
        self.rate_at = 0.0
        self.zero_at = -1.0
        self.blocked = False
        self.source = None
        self.target = None
        self.settle = None
        self.remote_source = None
        self.remote_target = None
        self.remote_settle = None
        self.attaching = False
        self.owner = None
        self.fallback = False
        self.tenant = False
        self.peer_link = None
        self.stall = STALL_NONE
        self.stall_offs = 0
        self.streaming = False
        self.stream_busy = False
        self.sending = None
        self.endpoint = None


class Address:
    __slots__ = ("key", "cls", "phase", "dist", "fwd", "priority", "consumers", "waiting",
                 "queues", "held", "rr", "refs", "container_count", "ingress", "egress",
                 "to_container", "from_container", "remotes", "transit", "announced",
                 "fallback", "fallback_for", "redirected", "from_proc", "exchange")

    def __init__(self, key: str, dist: int, priority: int) -> None:
        self.key = key
        cls = KEY_CLASSES.get(key[:1], KEY_OTHER)
        self.cls = cls              # KEY_*
        # the phase of a mobile key (``M1queue``: 1), else 0
        self.phase = ord(key[1]) - 48 if cls == KEY_MOBILE and len(key) > 1 else 0
        self.dist = dist            # DIST_* (corestate)
        self.fwd = FORWARDERS[dist]  # the Forwarder of ``dist``: see set_treatment
        self.priority = priority
        self.consumers = []         # outbound links, in attach order
        self.waiting = []           # targeted inbound links not yet given credit
        # anycast deliveries held for want of credit, one FIFO per priority 0..9; allocated by
        # the first delivery held (most addresses, e.g. those learned from other routers, never
        # hold one)
        self.queues = None
        self.held = 0
        self.rr = 0
        self.refs = 0               # links whose terminus resolves to this address
        self.container_count = 0    # containerCount: route-container connections of link routes
        self.ingress = 0
        self.egress = 0
        self.to_container = 0
        self.from_container = 0
        self.from_proc = 0          # deliveries from the router's own agent (not ingress)
        self.remotes = {}           # interior: router id -> hint, routers with a destination
        self.transit = 0
        self.announced = False      # interior: the agent was told we have a local destination
        # an address with ``enableFallback``: its fallback destination (the MF<address> key;
        # addrkeys.setup_fallback), which has ``fallback_for`` pointing back; ``redirected``:
        # deliveries that went there for want of a destination here
        self.fallback = None
        self.fallback_for = None
        self.redirected = 0
        # the exchange that owns this address (exchanges.py; its forwarder is then the
        # exchange's, whatever the distribution says), else None
        self.exchange = None


# The Forwarder of each distribution code (DIST_*), one stateless instance each: filled in by
# forwarders.py when it is imported (core.py imports it before any address exists); the last
# is an exchange's (exchanges.py), for the addresses exchanges own.
EXCHANGE_FORWARDER = 4
FORWARDERS = [None, None, None, None, None]


def set_treatment(addr: Address, dist: int, priority: int) -> None:
    """Give ``addr`` a distribution (and with it its forwarder) and a priority: when it is
    created, and when the address rules or another router's advertisement change them."""
    addr.dist = dist
    addr.fwd = FORWARDERS[dist] if addr.exchange is None else FORWARDERS[EXCHANGE_FORWARDER]
    addr.priority = priority


def _held_queues() -> list:
    return [deque() for _ in range(PRIORITIES)]


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
                 "phase", "queued_on", "at", "stuck", "credit_back")


def _in_delivery(dlv_id: int, link: Link, settled: bool, payload: Any, addr: Address,
                 multicast: bool, at: float) -> InDelivery:
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
    dlv.queued_on = None    # anycast toward another router: the data link it waits on
    dlv.at = at             # core time it came in (deliveriesDelayed1Sec/10Sec)
    dlv.stuck = False       # counted in deliveriesStuck (settlement.scan_stuck)
    dlv.credit_back = False  # held pre-settled: its sender had its credit back at once
    return dlv


class OutDelivery:
    """One copy of an inbound delivery sent on an outbound link. Built by :func:`_out_delivery`."""

    __slots__ = ("out_id", "link", "in_dlv", "state", "info", "done", "stuck")


def _out_delivery(out_id: int, link: Link, in_dlv: InDelivery) -> OutDelivery:
    out = OutDelivery.__new__(OutDelivery)
    out.out_id = out_id
    out.link = link
    out.in_dlv = in_dlv
    out.state = 0     # last terminal state from the receiver (0 = none)
    out.info = None
    out.done = False  # multicast: this copy's outcome was already counted
    out.stuck = False  # counted in deliveriesStuck (settlement.scan_stuck)
    return out
