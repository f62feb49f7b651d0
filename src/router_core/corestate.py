"""The records the router core keeps, and the management view of them.

Owns: the slot classes for connections, links, addresses and deliveries (state only, no
behaviour), the distribution codes, and :func:`management_snapshot`, which renders a core's state
with Qpid Dispatch's management attribute names (router, router.link, router.address,
connection). The behaviour lives in core.py; both the pure and the compiled core use these classes
(they are plain attribute bags, compiling them would not make them faster).

Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from collections import deque
from typing import Any, Optional

from router_core.ipc import (
    DIR_IN, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED)

DIST_CLOSEST = 0
DIST_BALANCED = 1
DIST_MULTICAST = 2
DIST_UNAVAILABLE = 3
DIST_CODES = {"closest": DIST_CLOSEST, "balanced": DIST_BALANCED, "multicast": DIST_MULTICAST,
              "unavailable": DIST_UNAVAILABLE}
DIST_NAMES = {code: name for name, code in DIST_CODES.items()}

# Multicast outcome precedence (docs, "multicast settlement"): higher wins.
MCAST_RANK = {STATE_RELEASED: 1, STATE_MODIFIED: 2, STATE_ACCEPTED: 3, STATE_REJECTED: 4}

DEFAULT_LINK_PRIORITY = 4
_ROUTE_CONTAINER = "route-container"


class Connection:
    __slots__ = ("peer", "conn_id", "role", "direction", "host", "container", "listener", "user",
                 "sasl", "encrypted", "link_capacity", "links")

    def __init__(self, peer: int, conn_id: int, role: str, direction: str, host: str,
                 container: str, listener: str, user: str, sasl: str, encrypted: bool,
                 link_capacity: int) -> None:
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
        self.links: dict = {}  # link_id -> Link, in attach order


class Link:
    __slots__ = ("link_id", "conn", "peer", "direction", "name", "address", "addr", "capacity",
                 "presettled", "closed", "from_container", "to_container",
                 # inbound: credit granted in total, deliveries received, held in the core,
                 # unsettled inbound deliveries; credited once the initial window was granted
                 "granted", "received", "held", "in_unsettled", "credited",
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
        self.granted = 0
        self.received = 0
        self.held = 0
        self.in_unsettled = 0
        self.credited = False
        self.limit = 0
        self.delivered = 0
        self.queue: deque = deque()
        self.unsettled: dict = {}
        self.delivery_count = 0
        self.presettled_count = 0
        self.dropped_presettled_count = 0
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0


class Address:
    __slots__ = ("key", "dist", "priority", "consumers", "waiting", "queues", "held", "rr", "refs",
                 "container_count", "ingress", "egress", "to_container", "from_container")

    def __init__(self, key: str, dist: int, priority: int) -> None:
        self.key = key
        self.dist = dist
        self.priority = priority
        self.consumers: list = []   # outbound links, in attach order
        self.waiting: list = []     # targeted inbound links not yet given credit
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


class InDelivery:
    """An inbound delivery the core still has to hold or settle."""

    __slots__ = ("dlv_id", "link", "settled", "payload", "addr", "multicast", "priority",
                 "pending", "out", "open", "copies", "outcome", "info")

    def __init__(self, dlv_id: int, link: Link, settled: bool, payload: Any, addr: Address,
                 multicast: bool) -> None:
        self.dlv_id = dlv_id
        self.link = link
        self.settled = settled
        self.payload = payload
        self.addr = addr
        self.multicast = multicast
        self.priority = 0
        self.pending = 0        # copies still queued in the core (not yet sent)
        self.out = None         # anycast: the OutDelivery
        self.open = 0           # multicast: copies without an outcome yet
        self.copies = None      # multicast: OutDelivery of every copy sent
        self.outcome = 0        # multicast: aggregated outcome so far
        self.info = None


class OutDelivery:
    __slots__ = ("out_id", "link", "in_dlv", "state", "info", "done")

    def __init__(self, out_id: int, link: Link, in_dlv: InDelivery) -> None:
        self.out_id = out_id
        self.link = link
        self.in_dlv = in_dlv
        self.state = 0     # last terminal state from the receiver (0 = none)
        self.info = None
        self.done = False  # multicast: this copy's outcome was already counted


def _link_view(link: Link) -> dict:
    addr = link.addr
    inbound = link.direction == DIR_IN
    if inbound:
        credit = link.granted - link.received
        undelivered = link.held
        unsettled = link.in_unsettled
    else:
        credit = link.limit - link.delivered
        undelivered = len(link.queue)
        unsettled = len(link.unsettled)
    return {
        "identity": str(link.link_id), "name": link.name, "linkName": link.name,
        "linkType": "endpoint", "linkDir": "in" if inbound else "out",
        "owningAddr": addr.key if addr is not None else None, "capacity": link.capacity,
        "connectionId": link.conn.conn_id,
        "priority": addr.priority if addr is not None and addr.priority >= 0
        else DEFAULT_LINK_PRIORITY,
        "undeliveredCount": undelivered, "unsettledCount": unsettled,
        "deliveryCount": link.delivery_count, "presettledCount": link.presettled_count,
        "droppedPresettledCount": link.dropped_presettled_count,
        "acceptedCount": link.accepted, "rejectedCount": link.rejected,
        "releasedCount": link.released, "modifiedCount": link.modified,
        "creditAvailable": credit if credit > 0 else 0,
        "adminStatus": "enabled", "operStatus": "up",
    }


def _address_view(addr: Address) -> dict:
    return {
        "identity": addr.key, "name": addr.key, "key": addr.key,
        "distribution": DIST_NAMES[addr.dist], "inProcess": 0,
        "subscriberCount": len(addr.consumers), "remoteCount": 0,
        "containerCount": addr.container_count,
        "deliveriesIngress": addr.ingress, "deliveriesEgress": addr.egress,
        "deliveriesTransit": 0, "deliveriesToContainer": addr.to_container,
        "deliveriesFromContainer": addr.from_container, "priority": addr.priority,
    }


def _connection_view(conn: Connection) -> dict:
    return {
        "identity": str(conn.conn_id), "container": conn.container, "host": conn.host,
        "dir": conn.direction, "role": conn.role, "sasl": conn.sasl, "user": conn.user,
        "isAuthenticated": bool(conn.sasl) and conn.sasl.upper() != "ANONYMOUS",
        "isEncrypted": bool(conn.encrypted), "opened": True, "listener": conn.listener,
    }


def management_snapshot(core: Any) -> dict:
    """One consistent view of ``core`` (call it between batches, never during one)."""
    router = {"id": core.router_id, "area": core.area, "mode": "standalone",
              "addrCount": len(core.addrs), "linkCount": len(core.links),
              "connectionCount": len(core.conns)}
    router.update(core.counters)
    return {
        "router": router,
        "links": [_link_view(link) for link in core.links.values()],
        "addresses": [_address_view(addr) for addr in core.addrs.values()],
        "connections": [_connection_view(conn) for conn in core.conns.values()],
    }
