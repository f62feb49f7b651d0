"""The core's codes and the management view of its state.

Owns: the distribution codes, the multicast outcome precedence, and :func:`management_snapshot`,
which renders a core's state with Qpid Dispatch's management attribute names (router,
router.link, router.address, connection). The records themselves (connections, links, addresses,
deliveries) live in core.py: they are the core's typed state and are compiled with it (cdef
classes in the compiled build), so this module only reads their attributes and must not build
them. It is plain Python in both builds: snapshots are taken between batches, off the hot path.

Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

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


def _link_view(link: Any) -> dict:
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
    if link.router:  # router-control / inter-router: no address, a priority of its own
        priority = link.priority
    elif addr is not None and addr.priority >= 0:
        priority = addr.priority
    else:
        priority = DEFAULT_LINK_PRIORITY
    return {
        "identity": str(link.link_id), "name": link.name, "linkName": link.name,
        "linkType": link.link_type, "linkDir": "in" if inbound else "out",
        "owningAddr": addr.key if addr is not None else None, "capacity": link.capacity,
        "connectionId": link.conn.conn_id,
        "priority": priority,
        "undeliveredCount": undelivered, "unsettledCount": unsettled,
        "deliveryCount": link.delivery_count, "presettledCount": link.presettled_count,
        "droppedPresettledCount": link.dropped_presettled_count,
        "acceptedCount": link.accepted, "rejectedCount": link.rejected,
        "releasedCount": link.released, "modifiedCount": link.modified,
        "creditAvailable": credit if credit > 0 else 0,
        "adminStatus": "enabled", "operStatus": "up",
    }


def _address_view(addr: Any) -> dict:
    return {
        "identity": addr.key, "name": addr.key, "key": addr.key,
        "distribution": DIST_NAMES[addr.dist], "inProcess": 0,
        "subscriberCount": len(addr.consumers), "remoteCount": len(addr.remotes),
        "remoteHostRouters": sorted(addr.remotes),
        "containerCount": addr.container_count,
        "deliveriesIngress": addr.ingress, "deliveriesEgress": addr.egress,
        "deliveriesTransit": addr.transit, "deliveriesToContainer": addr.to_container,
        "deliveriesFromContainer": addr.from_container, "priority": addr.priority,
    }


def _connection_view(conn: Any, now: float) -> dict:
    last = conn.last_delivery_at
    return {
        "uptimeSeconds": int(now - conn.opened_at),
        "lastDlvSeconds": int(now - last) if last >= 0 else None,
        "identity": str(conn.conn_id), "container": conn.container, "host": conn.host,
        "dir": conn.direction, "role": conn.role, "sasl": conn.sasl, "user": conn.user,
        "isAuthenticated": bool(conn.sasl) and conn.sasl.upper() != "ANONYMOUS",
        "isEncrypted": bool(conn.encrypted), "opened": True, "listener": conn.listener,
        "cost": conn.cost,
    }


def management_snapshot(core: Any) -> dict:
    """One consistent view of ``core`` (call it between batches, never during one)."""
    router = {"id": core.router_id, "area": core.area, "mode": core.mode,
              "addrCount": len(core.addrs), "linkCount": len(core.links),
              "connectionCount": len(core.conns)}
    router.update(core.counters)
    return {
        "router": router,
        "links": [_link_view(link) for link in core.links.values()],
        "addresses": [_address_view(addr) for addr in core.addrs.values()],
        "connections": [_connection_view(conn, core.now) for conn in core.conns.values()],
    }
