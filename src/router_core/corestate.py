"""The core's codes and the management view of its state.

Owns: the distribution codes, the multicast outcome precedence, and :func:`management_snapshot`,
which renders a core's state with Qpid Dispatch's management attribute names (router,
router.link, router.address, connection). The records themselves (connections, links, addresses,
deliveries) live in records.py: they are the core's typed state and are compiled with it (cdef
classes in the compiled build), so this module only reads their attributes and must not build
them. It is plain Python in both builds: snapshots are taken between batches, off the hot path.

Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED)
from router_core.corelog import opened_text
from router_core.records import LINK_TYPE_NAMES, MODE_NAMES, ROLE_INTERNAL, ROLE_NAMES

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


def _routed_owning(link: Any) -> Any:
    """owningAddr of a link-routed link, as 1.19 names it for both links of the pair: the
    client's terminus address as a mobile key (``M0`` + it), null without one."""
    client = link if link.owner is None else link.peer_link
    return "M0" + client.address if client.address else None


def _held_for(link: Any) -> int:
    """The deliveries held at a consumer's address that wait for its credit, as 1.19 counts
    them in its undeliveredCount (its receivers each have a list): all of them for the one
    consumer, else spread over the consumers in turn, as 1.19 hands them out."""
    addr = link.addr
    if addr is None or not addr.held:
        return 0
    consumers = addr.consumers
    n = len(consumers)
    if n <= 1:
        return addr.held if n == 1 and consumers[0] is link else 0
    for i in range(n):
        if consumers[i] is link:
            first = addr.rr % n  # the one whose turn is next gets the first share
            return addr.held // n + (1 if (i - first) % n < addr.held % n else 0)
    return 0


def _link_view(link: Any, now: float) -> dict:
    addr = link.addr
    inbound = link.direction == DIR_IN
    if inbound:  # (1.19: what waits is counted on the link it waits for, not the sender's)
        credit = link.granted - link.received
        undelivered = 0
        unsettled = link.in_unsettled
    else:
        credit = link.limit - link.delivered
        undelivered = len(link.queue) + _held_for(link)
        unsettled = len(link.unsettled)
        sending = link.sending
        if sending:  # still arriving: undelivered until the last frame went on (1.19)
            undelivered += len(sending)
            for out_id in sending:
                if out_id in link.unsettled:
                    unsettled -= 1
    if link.router:  # router-control / inter-router: no address, a priority of its own
        priority = link.priority
    elif addr is not None and addr.priority >= 0:
        priority = addr.priority
    else:
        priority = DEFAULT_LINK_PRIORITY
    return {
        "identity": str(link.link_id), "name": link.name, "linkName": link.name,
        "linkType": LINK_TYPE_NAMES[link.link_type], "linkDir": "in" if inbound else "out",
        "owningAddr": _routed_owning(link) if link.peer_link is not None
        else addr.key if addr is not None else None, "capacity": link.capacity,
        "connectionId": link.conn.conn_id,
        "priority": priority,
        "undeliveredCount": undelivered, "unsettledCount": unsettled,
        "deliveryCount": link.delivery_count, "presettledCount": link.presettled_count,
        "droppedPresettledCount": link.dropped_presettled_count,
        "acceptedCount": link.accepted, "rejectedCount": link.rejected,
        "releasedCount": link.released, "modifiedCount": link.modified,
        "deliveriesDelayed1Sec": link.delayed_1sec, "deliveriesDelayed10Sec": link.delayed_10sec,
        "deliveriesStuck": link.stuck,
        "creditAvailable": credit if credit > 0 else 0,
        # since its attach or since the sweep saw it at zero (settlement.scan_blocked)
        "zeroCreditSeconds": int(now - link.zero_at) if credit <= 0 and link.zero_at >= 0 else 0,
        "adminStatus": "enabled", "operStatus": "up",
    }


def tracked_deliveries(core: Any) -> dict:
    """1.19's trackedDeliveries, address key -> how many unsettled deliveries of a balanced
    address this router sent on toward other routers and are not settled yet (counted at
    snapshot time from the router links' unsettled deliveries: nothing on the forwarding
    path)."""
    counts: dict = {}
    for link in core.links.values():
        if link.router and link.direction == DIR_OUT and link.unsettled:
            for out in link.unsettled.values():
                dlv = out.in_dlv
                if (dlv is not None and not dlv.settled and dlv.addr is not None
                        and dlv.addr.dist == DIST_BALANCED):
                    counts[dlv.addr.key] = counts.get(dlv.addr.key, 0) + 1
    return counts


def _address_view(addr: Any, tracked: int = 0) -> dict:
    return {
        "identity": addr.key, "name": addr.key, "key": addr.key,
        "distribution": DIST_NAMES[addr.dist], "inProcess": 0,
        "subscriberCount": len(addr.consumers), "remoteCount": len(addr.remotes),
        "remoteHostRouters": sorted(addr.remotes),
        "containerCount": addr.container_count,
        "deliveriesIngress": addr.ingress, "deliveriesEgress": addr.egress,
        "deliveriesTransit": addr.transit,
        # 1.19: to/from "container" are in-process deliveries (the agent adds those), the
        # route-container ones (brokers: auto-links, link routes) have their own counters
        "deliveriesToContainer": 0, "deliveriesFromContainer": addr.from_proc,
        "deliveriesEgressRouteContainer": addr.to_container,
        "deliveriesIngressRouteContainer": addr.from_container, "priority": addr.priority,
        "deliveriesRedirectedToFallback": addr.redirected, "trackedDeliveries": tracked,
    }


# The routing protocol's addresses as 1.19 lists them in interior mode (its routing agent
# subscribes to them in-process): key -> distribution.
CONTROL_ADDRESSES = {"Lqdhello": "flood", "Lqdrouter": "flood", "Tqdrouter": "flood",
                     "Lqdrouter.ma": "multicast", "Tqdrouter.ma": "multicast"}


def control_address_views(core: Any) -> list:
    """router.address rows of the routing protocol's addresses (interior mode): in-process,
    with the routing messages the core gave the agent (to-proc) and the agent sent
    (from-proc) on each."""
    rows = []
    for key, dist in CONTROL_ADDRESSES.items():
        to_proc, from_proc = core.control_counts.get(key, (0, 0))
        rows.append({
            "identity": key, "name": key, "key": key, "distribution": dist, "inProcess": 1,
            "subscriberCount": 0, "remoteCount": 0, "remoteHostRouters": [],
            "containerCount": 0, "deliveriesIngress": 0, "deliveriesEgress": 0,
            "deliveriesTransit": 0, "deliveriesToContainer": to_proc,
            "deliveriesFromContainer": from_proc, "deliveriesEgressRouteContainer": 0,
            "deliveriesIngressRouteContainer": 0, "priority": -1,
            "deliveriesRedirectedToFallback": 0, "trackedDeliveries": 0})
    return rows


def route_status(lr: Any) -> dict:
    """Link routes (router_core/linkroute.py table ``lr``): identity -> operStatus, ``active``
    while a route container that serves the route is connected."""
    return {identity: ("active" if any(route.serves(c) for c in route.addr.conns)
                       else "inactive")
            for identity, route in lr.routes.items()}


def conn_route_views(lr: Any) -> list:
    """The connection-scoped link routes (router.connection.linkRoute), each with the
    connection that made it (``connId``: management shows a connection only its own)."""
    return [{"identity": route.identity, "name": route.name, "pattern": route.pattern,
             "direction": "in" if route.direction == DIR_IN else "out",
             "containerId": route.parent.container, "connId": conn_id}
            for conn_id, routes in lr.conn_routes.items() for route in routes.values()]


def route_address_views(lr: Any) -> list:
    """router.address rows of the link-route addresses (``Cqueue``...: 1.19 lists them with
    the others; containerCount: the connected route containers)."""
    return [{
        "identity": addr.key, "name": addr.key, "key": addr.key,
        "distribution": "linkBalanced", "inProcess": 0, "subscriberCount": 0,
        "remoteCount": len(addr.remotes), "remoteHostRouters": sorted(addr.remotes),
        "containerCount": len(addr.conns), "deliveriesIngress": 0, "deliveriesEgress": 0,
        "deliveriesTransit": 0, "deliveriesToContainer": 0, "deliveriesFromContainer": 0,
        "priority": -1, "trackedDeliveries": 0,
    } for addr in lr.addrs.values()]


def _active(core: Any, conn: Any, view: dict) -> dict:
    """1.19's connection ``active``: on an edge router an edge connection is active only
    while it is the uplink (edge.py); every other connection is."""
    edge = core.edge
    if edge is not None and getattr(edge, "conn", conn) is not conn and view["role"] == "edge":
        view["active"] = False
    return view


def _connection_view(conn: Any, now: float) -> dict:
    last = conn.last_delivery_at
    view = {
        "uptimeSeconds": int(now - conn.opened_at),
        "lastDlvSeconds": int(now - last) if last >= 0 else None,
        "identity": str(conn.conn_id), "container": conn.container, "host": conn.host,
        "dir": conn.direction, "role": ROLE_NAMES[conn.role], "sasl": conn.sasl or None,
        "user": conn.user,
        "isAuthenticated": bool(conn.sasl) and conn.sasl.upper() != "ANONYMOUS",
        "isEncrypted": bool(conn.encrypted), "opened": True, "listener": conn.listener,
        "cost": conn.cost, "ssl": bool(conn.encrypted), "sslProto": None, "sslCipher": None,
        "sslSsf": 0, "properties": {}, "allowAdminStatusUpdate": True,
        "enableProtocolTrace": False,  # (coreproc: what management turned on)
        "active": True,  # (an edge router's standby uplinks: False, see management_snapshot)
    }  # the same keys for every connection (gone_entry keeps one key tuple per kind)
    sec = conn.encrypted
    if isinstance(sec, (list, tuple)) and len(sec) >= 6:
        # from a worker (engine._security_info): [has TLS, encrypted, protocol, cipher, ssf,
        # authenticated], as 1.19 reports them (ANONYMOUS counts as authenticated there)
        view.update({"ssl": bool(sec[0]), "isEncrypted": bool(sec[1]), "sslProto": sec[2],
                     "sslCipher": sec[3], "sslSsf": int(sec[4] or 0),
                     "isAuthenticated": bool(sec[5])})
        if len(sec) >= 7 and isinstance(sec[6], dict):  # the peer's open properties
            view["properties"] = sec[6]
        if len(sec) >= 8:  # its policy group's (not a management attribute: entities.py)
            view["allowAdminStatusUpdate"] = bool(sec[7])
    return view


# "Gone" records: the final management view of an address, link or connection, taken by the core
# when it removes one (removal paths only, never per message), so a reader that samples now and
# then still sees the last counts of what went away between two samples. The core keeps the
# newest GONE_MAX of them (``core.gone``, a bounded deque of gone_entry() tuples, oldest first)
# with an increasing ``seq``; snapshots render them without consuming them (several readers).
GONE_MAX = 10000
_GONE_KEYS: dict = {}  # kind -> the view's key tuple (shared by every entry of that kind)


def gone_entry(kind: str, obj: Any, seq: int, now: float) -> tuple:
    """The compact ring entry for ``obj`` (an Address, Link or Connection) removed at ``now``:
    plain values only, so the ring keeps no record (nor what it references) alive."""
    if kind == "address":
        view = _address_view(obj)
    elif kind == "link":
        view = _link_view(obj, now)
    else:
        view = _connection_view(obj, now)
    keys = _GONE_KEYS.get(kind)
    if keys is None:
        keys = _GONE_KEYS[kind] = tuple(view)
    return (seq, kind, now, keys, tuple(view.values()))


def gone_view(entry: tuple) -> dict:
    """A ring entry as a dict: ``seq``, ``kind``, ``goneAt`` (the core's clock at removal) and
    the same fields as that kind's entries in the snapshot's addresses/links/connections."""
    seq, kind, now, keys, values = entry
    view = dict(zip(keys, values))
    view["seq"] = seq
    view["kind"] = kind
    view["goneAt"] = now
    return view


def router_view(core: Any, controls: int) -> dict:
    """The snapshot's ``router`` section: identity, mode, counts and counters (O(1));
    ``controls``: how many routing-protocol addresses it lists."""
    router = {"id": core.router_id, "area": core.area, "mode": MODE_NAMES[core.mode],
              "addrCount": len(core.addrs) + len(core.lr.addrs) + controls,
              "linkCount": len(core.links),
              "connectionCount": len(core.conns)}
    router.update(core.counters)
    return router


def management_snapshot(core: Any, gone_after: Any = None) -> dict:
    """One consistent view of ``core`` (call it between batches, never during one).

    ``gone``: what the core removed lately (see GONE_MAX) with a seq above ``gone_after``,
    oldest first, as gone_view dicts (None: none; only the metrics sink asks, and it asks for
    what it has not seen, so a snapshot stays small); reading them does not remove them.
    ``goneSeq``: the newest seq (lower than a reader's last one: the core restarted)."""
    lr = core.lr
    control = control_address_views(core) if MODE_NAMES[core.mode] == "interior" else []
    router = router_view(core, len(control))
    tracked = tracked_deliveries(core)
    return {
        "router": router,
        "links": [_link_view(link, core.now) for link in core.links.values()],
        "addresses": ([_address_view(addr, tracked.get(addr.key, 0))
                       for addr in core.addrs.values()]
                      + route_address_views(lr) + control),
        # link routes: identity -> operStatus (router.config.linkRoute)
        "linkRoutes": route_status(lr),
        "connLinkRoutes": conn_route_views(lr),
        # connections whose vhost policy forbids connection-scoped link routes
        "noDynamicLinkRoutes": [
            conn.conn_id for conn in core.conns.values()
            if isinstance(conn.encrypted, (list, tuple)) and len(conn.encrypted) >= 9
            and conn.encrypted[8] is False],
        "connections": [_active(core, conn, _connection_view(conn, core.now))
                        for conn in core.conns.values()],
        "connectors": connector_views(core),
        "gone": ([] if gone_after is None else
                 [gone_view(entry) for entry in core.gone if entry[0] > gone_after]),
        "goneSeq": core.gone_seq,
        "policy": core.policy_counts.view(),  # policy and vhostStats counters
        "now": core.now,  # the core's clock, the one goneAt is read on
    }


def connector_views(core: Any) -> dict:
    """Connector name -> its 1.19 ``connectionStatus`` and ``connectionMsg``: ``SUCCESS`` and
    the ``Connection Opened`` text while it has an open connection, else what its worker last
    reported (ConnectorStatus: ``CONNECTING`` and the last failure); ``failoverUrls`` as its
    worker last reported them (absent before it said any)."""
    out = {name: {"connectionStatus": status, "connectionMsg": message or None}
           for name, (status, message, _) in core.connector_status.items()}
    for conn in core.conns.values():
        if conn.direction == "out" and conn.listener and conn.role != ROLE_INTERNAL:
            out[conn.listener] = {"connectionStatus": "SUCCESS",
                                  "connectionMsg": opened_text(conn)}
    for name, (_, _, urls) in core.connector_status.items():
        if urls and name in out:
            out[name]["failoverUrls"] = urls
    return out
