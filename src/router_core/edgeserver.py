"""Edge mode, the interior router's end of its edge connections (1.19's edge_addr_tracking,
heartbeat_server and address_lookup_server modules), as the state holder ``core.edge`` of an
interior router: edge.py describes both ends and the wire facts.

Part of the core (compiled with the other parts, see core.py; EdgeServer stays a Python
class, off the per-message path). Must not import zmq, proton, sockets, clocks, logging
handlers, router_io or agent.
"""
from typing import Any

from router_core import edgemsg
from router_core.addressing import CLASS_EDGE, EDGE_DOWNLINK_CAPABILITY, has_capability
from router_core.corestate import DIST_BALANCED
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_REJECTED, CloseConnection, LinkOpen, LinkRefuse,
    UpdateIn)
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import address_of, key_of
from router_core.edge import (
    ADDR_LOOKUP, ADDR_TRACKING, HEARTBEAT, HEARTBEAT_CREDIT, HEARTBEAT_INTERVAL,
    HEARTBEAT_THRESHOLD, LOOKUP_CREDIT, _edge_credit, _edge_emit, _edge_log)
from router_core.linkends import bind_endpoint
from router_core.records import KEY_MOBILE, LINK_EDGE_DOWNLINK, ROLE_EDGE, Link, set_treatment
from router_core.relay import reachable
from router_core.transfer import send_router
# --- end core parts ---


def _streaming_from(core: Any, conn: Any) -> bool:
    """A message is still streaming in from ``conn`` or out to it (streaming.py's Streams and
    their copies; only looked at when a heartbeat is overdue)."""
    for stream in core.streams.values():
        if not stream.done and stream.link.conn is conn:
            return True
        for copy in stream.copies:
            if copy.link.conn is conn:
                return True
    return False


class EdgeServer:
    """The interior router's side: edge connections' downlinks, tracking and lookups (their
    heartbeats: HeartbeatServer below, as on any connection)."""

    def __init__(self, core: Any) -> None:
        self.trackers = {}   # edge connection id -> its tracking link (router -> edge)
        self.senders = {}    # mobile key -> {edge connection id: targeted senders}
        self.sent = {}       # (connection id, key) -> the last update sent

    def conn_opened(self, core: Any, conn: Any) -> None:
        return

    def conn_closed(self, core: Any, conn: Any) -> None:
        if self.trackers.pop(conn.conn_id, None) is not None:
            for entry in [e for e in self.sent if e[0] == conn.conn_id]:
                del self.sent[entry]

    def attach(self, core: Any, conn: Any, link_id: Any, direction: int, name: str,
               address: Any, presettled: Any, capacity: int, source: Any) -> bool:
        """An edge connection's link this module serves: True when it attached it (the
        downlink, the tracking receiver, a lookup sender); False: an ordinary endpoint."""
        if direction == DIR_OUT and address is not None and source is not None and \
                has_capability(source.get("capabilities"), EDGE_DOWNLINK_CAPABILITY):
            link = self._link(core, conn, link_id, direction, name, address, presettled,
                              capacity)
            link.link_type = LINK_EDGE_DOWNLINK  # (1.19's router.link linkType for it)
            key = CLASS_EDGE + address
            new = key not in core.addrs
            addr = address_of(core, key)
            if new:
                set_treatment(addr, DIST_BALANCED, -1)  # as 1.19 creates it
            bind_endpoint(core, link, key)
            return True
        if direction == DIR_OUT and address == ADDR_TRACKING:
            link = self._link(core, conn, link_id, direction, name, address, presettled,
                              capacity)
            link.endpoint = self
            self.trackers[conn.conn_id] = link
            for key, conns in self.senders.items():
                if conn.conn_id in conns:
                    addr = core.addrs.get(key)
                    if addr is not None:
                        self.update(core, conn.conn_id, key, can_send(core, addr, conn))
            return True
        if direction == DIR_IN and address == ADDR_LOOKUP:
            link = _served_link(core, conn, link_id, direction, name, address, presettled,
                                capacity)
            link.endpoint = self
            link.credited = True
            _edge_credit(core, link, LOOKUP_CREDIT)
            return True
        return False

    @staticmethod
    def _link(core: Any, conn: Any, link_id: Any, direction: int, name: str, address: Any,
              presettled: Any, capacity: int) -> Any:
        return _served_link(core, conn, link_id, direction, name, address, presettled, capacity)

    def transfer(self, core: Any, link: Any, dlv_id: Any, settled: bool, payload: Any) -> None:
        """An address lookup request (answered); its credit back."""
        state = lookup(core, link, payload)
        if not settled:
            link.in_unsettled -= 1
            _edge_emit(core, link.peer, UpdateIn(dlv_id, state, True, None))
        _edge_credit(core, link, 1)

    def tick(self, core: Any, now: float) -> None:
        return  # (heartbeats: HeartbeatServer, every mode)

    def producer_bound(self, core: Any, link: Any, addr: Any) -> None:
        conn = link.conn
        if conn.role != ROLE_EDGE or addr.cls != KEY_MOBILE:
            return
        conns = self.senders.setdefault(addr.key, {})
        conns[conn.conn_id] = conns.get(conn.conn_id, 0) + 1
        self.update(core, conn.conn_id, addr.key, can_send(core, addr, conn))

    def producer_dropped(self, core: Any, link: Any, addr: Any) -> None:
        conn = link.conn
        conns = self.senders.get(addr.key)
        if conns is None or conn.conn_id not in conns:
            return
        count = conns[conn.conn_id] - 1
        if count > 0:
            conns[conn.conn_id] = count
            return
        del conns[conn.conn_id]
        if not conns:
            del self.senders[addr.key]
        self.sent.pop((conn.conn_id, addr.key), None)

    def address_changed(self, core: Any, addr: Any) -> None:
        conns = self.senders.get(addr.key)
        if conns:
            for conn_id in list(conns):
                conn = core.conns.get(conn_id)
                if conn is not None:
                    self.update(core, conn_id, addr.key, can_send(core, addr, conn))

    def routes_changed(self, core: Any) -> None:
        for key in list(self.senders):
            addr = core.addrs.get(key)
            if addr is not None:
                self.address_changed(core, addr)

    def update(self, core: Any, conn_id: Any, key: str, present: bool) -> None:
        """Tell edge connection ``conn_id`` whether ``key`` has a destination beyond it (only
        a change; before the edge's tracking receiver is there, nothing: it gets the state
        when it attaches)."""
        link = self.trackers.get(conn_id)
        # (no destination is what an edge assumes until told: 1.19 sends nothing then)
        if link is None or link.closed or self.sent.get((conn_id, key), False) is present:
            return
        self.sent[(conn_id, key)] = present
        payload = edgemsg.tracking_update(key, present)
        if not link.queue and link.limit > link.delivered:
            send_router(core, link, None, True, payload, None, -1)
        else:
            link.queue.append(payload)  # sent as credit comes (transfer.drain_queue)


def _served_link(core: Any, conn: Any, link_id: Any, direction: int, name: str, address: Any,
                 presettled: Any, capacity: int) -> Any:
    """A link the core itself serves on ``conn``, attached."""
    link = Link(link_id, conn, direction, name, address, bool(presettled), capacity)
    link.rate_at = link.zero_at = core.now
    core.links[link_id] = link
    conn.links[link_id] = link
    _edge_emit(core, conn.peer, LinkOpen(link_id, address))
    return link


class HeartbeatServer:
    """1.19's heartbeat server, bound to ``_$qd.edge_heartbeat`` in every router mode (an
    edge's uplink sends there; so may any client): a sender gets a window of 2 and each
    heartbeat is accepted and dropped; a receiver is refused; a connection whose heartbeat
    sender has been silent for more than 8 s is closed (checked every 2 s)."""

    def __init__(self, core: Any) -> None:
        self.heartbeats = {}  # heartbeat link id -> core time of its last heartbeat
        self.next_check = 0.0
        addr = address_of(core, key_of(core, HEARTBEAT))  # listed as 1.19 lists it
        set_treatment(addr, DIST_BALANCED, -1)
        addr.refs += 1  # held for the router's life

    def attach(self, core: Any, conn: Any, link_id: Any, direction: int, name: str,
               presettled: Any, capacity: int) -> None:
        who = f"(container={conn.container})"
        if direction == DIR_OUT:
            _edge_log(core, f"Attempt to attach to heartbeat server rejected {who}")
            _edge_emit(core, conn.peer, LinkRefuse(
                link_id, "amqp:not-allowed", f"{HEARTBEAT} takes heartbeats: no receivers"))
            return
        link = _served_link(core, conn, link_id, direction, name, HEARTBEAT, presettled,
                            capacity)
        link.endpoint = self
        link.credited = True
        _edge_credit(core, link, HEARTBEAT_CREDIT)
        self.heartbeats[link_id] = core.now
        _edge_log(core, f"[C{conn.conn_id}] Client attached to heartbeat server {who}")

    def transfer(self, core: Any, link: Any, dlv_id: Any, settled: bool, payload: Any) -> None:
        """A heartbeat: accepted and dropped, its credit back."""
        if link.link_id in self.heartbeats:
            self.heartbeats[link.link_id] = core.now
        if not settled:
            link.in_unsettled -= 1
            _edge_emit(core, link.peer, UpdateIn(dlv_id, STATE_ACCEPTED, True, None))
        _edge_credit(core, link, 1)

    def tick(self, core: Any, now: float) -> None:
        if now < self.next_check or not self.heartbeats:
            return
        self.next_check = now + HEARTBEAT_INTERVAL
        for link_id, last in list(self.heartbeats.items()):
            link = core.links.get(link_id)
            if link is None or link.closed:
                del self.heartbeats[link_id]
            elif now - last > HEARTBEAT_THRESHOLD:
                conn = link.conn
                if _streaming_from(core, conn):
                    # a worker may have stopped reading one end (a streamed message past its
                    # window, Q2): the heartbeats (or the credit for them) wait behind that
                    # message's bytes. 1.19 never stops reading a connection.
                    self.heartbeats[link_id] = now
                    continue
                del self.heartbeats[link_id]
                _edge_log(core, f"[C{conn.conn_id}] Lost heartbeat from container "
                                f"{conn.container}, closing connection")
                _edge_emit(core, conn.peer, CloseConnection(conn.conn_id, "", ""))


def can_send(core: Any, addr: Any, conn: Any) -> bool:
    """Whether ``addr`` has a destination that is not on the edge connection ``conn``."""
    for link in addr.consumers:
        if link.conn is not conn:
            return True
    return bool(addr.remotes) and reachable(core, addr)


def lookup(core: Any, link: Any, payload: Any) -> int:
    """1.19's address lookup server: an edge asks whether an address is link-routed (and
    whether the route has a destination) before it attaches a client's link; the answer goes
    to the request's reply-to (the edge's own address, its downlink). The request's outcome:
    ACCEPTED when answered, REJECTED (and logged as 1.19 logs it) when it cannot be."""
    request = edgemsg.read_lookup_request(payload)
    who = f"(container={link.conn.container})"
    if request is None:
        _edge_log(core, f"Invalid address lookup request - no properties {who}")
        return STATE_REJECTED
    reply_to, cid, version, opcode, address, receiver = request
    if version != edgemsg.LOOKUP_VERSION:
        _edge_log(core, f"Invalid address lookup request - unknown version {who}")
        return STATE_REJECTED
    if opcode != edgemsg.OPCODE_LINK_ROUTE_LOOKUP:
        _edge_log(core, f"Invalid address lookup request - invalid opcode {who}")
        return STATE_REJECTED
    if address is None:
        _edge_log(core, f"Link route address lookup failed - invalid request body {who}")
        return STATE_REJECTED
    if not reply_to or cid is None:
        _edge_log(core, "Link route address reply failed - invalid request message properties "
                        + who)
        return STATE_REJECTED
    # (1.19: true is the router's receiver role, a client's sender)
    route = core.lr.match(DIR_IN if receiver else DIR_OUT, address) if core.lr.addrs else None
    has_dest = route is not None and bool(route.conns or route.remotes)
    reply = edgemsg.lookup_reply(
        reply_to, cid, edgemsg.LOOKUP_OK if route is not None else edgemsg.LOOKUP_NOT_FOUND,
        route is not None, has_dest)
    addr = core.addrs.get(key_of(core, reply_to))
    if addr is None or not addr.consumers:
        return STATE_ACCEPTED  # nowhere to answer (the asker is gone): as 1.19, dropped
    out = addr.consumers[0]
    for consumer in addr.consumers:
        if consumer.limit > consumer.delivered:
            out = consumer
            break
    send_router(core, out, None, True, reply, None, -1)  # (waits in proton without credit)
    return STATE_ACCEPTED
