"""Edge mode, the edge router's end of its uplink (1.19's edge_router module and its
heartbeat and address-lookup clients), as the state holder ``core.edge`` of an edge router;
the interior router's end is edgeserver.py (both sides are described here).

On an **edge router** (:class:`EdgeUplink`): exactly one of its ``edge`` connections is the
active uplink (the first to open; when it closes the next open one takes over, as 1.19's
edge connection manager). On it the router attaches (owner: the EdgeUplink, link names
``qdlink.<16 hex>``):

* an anonymous sender, the one consumer of the key ``L_edge``: everything for another router
  (``_topo/...``, another edge's ``_edge/...``) and anonymous deliveries for addresses with no
  destination here go up it;
* the downlink, a receiver whose source is this router's id with the capability
  ``qd.router-edge-downlink``: what the network sends to ``_edge/<this id>/...``;
* the tracking receiver, source ``_$qd.edge_addr_tracking`` (credit 32, one back per update):
  the interior's ``[key, has-destination]`` updates (edgemsg.py);
* per mobile address with a consumer here (not the uplink's, not the agent's): a receiver
  with that source address (the interior sees a consumer on the edge connection); per mobile
  address with a targeted sender here: a sender with that target address, made a consumer of
  the address only while the interior says the address has a destination elsewhere. So a
  sender on an edge gets credit when a consumer exists somewhere and stalls when none is left;
* the address lookup client (a sender to ``_$qd.addr_lookup`` and a dynamic receiver for the
  answers) and a sender to the interior's ``$management`` for the link-route proxy
  (edgeroutes.py: the edge's link routes with a destination here are created on the interior
  as connection-scoped routes of the uplink).

On an **interior router** (:class:`EdgeServer`), on an edge connection: a receiver with the
downlink capability consumes ``H<edge id>`` (advertised to the network like a mobile key); a
receiver on ``_$qd.edge_addr_tracking`` gets the updates for every mobile address an edge has
a sender for: present when the address has a consumer that is not on that edge connection, or
another router with one. Other links are ordinary endpoint links; a delivery that came from an
edge connection never goes back on it (either side: no echo). Senders on
``_$qd.edge_heartbeat`` are served here: their messages are accepted and dropped.

Part of the core (functions and a class of the RouterCore ``core``; compiled with the other
parts, see core.py; EdgeUplink stays a Python class, off the per-message path). Must not
import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from router_core import edgemsg
from router_core.edgeroutes import LinkRouteProxy
from router_core.addressing import EDGE_DOWNLINK_CAPABILITY, EDGE_UPLINK_KEY, HEARTBEAT_ADDRESS
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_REJECTED, TERMINUS_SOURCE, TERMINUS_TARGET,
    LinkFlow, LinkRefuse, UpdateIn, terminus)
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import address_of, unref
from router_core.lifecycle import on_attach
from router_core.linkends import bind_endpoint, detach_own, open_link
from router_core.linkroute import RouteAddress, pair, routed_name
from router_core.records import KEY_MOBILE, ROLE_EDGE, ROLE_INTERNAL, Link
from router_core.relay import credit_waiting
from router_core.transfer import on_flow, release_held, release_queue, send_router
# --- end core parts ---

ADDR_TRACKING = "_$qd.edge_addr_tracking"
HEARTBEAT = HEARTBEAT_ADDRESS
ADDR_LOOKUP = "_$qd.addr_lookup"
MANAGEMENT = "$management"
LOOKUP_CREDIT = 32     # 1.19's address lookup server window
LOOKUP_TIMEOUT = 3.0   # 1.19's lookup client: no answer within 3 s, the edge decides alone
TRACKING_CREDIT = 32   # 1.19's edge address proxy: initial credit, one back per update
HEARTBEAT_CREDIT = 2   # 1.19's heartbeat server window
HEARTBEAT_INTERVAL = 2.0   # an edge sends one every 2 s (when it has credit)
HEARTBEAT_THRESHOLD = 8.0  # the interior closes an edge connection silent for longer
SETTLE_MIXED = [2, 0]  # snd-settle-mode mixed, rcv-settle-mode first
# the downlink capability as termini carry it (one AMQP sym8, as 1.19 puts it)
DOWNLINK_CAPS = (b"\xa3" + bytes([len(EDGE_DOWNLINK_CAPABILITY)]) + EDGE_DOWNLINK_CAPABILITY)
INVALID_UPDATE = "Edge Address Proxy: received an invalid message body, rejecting"


def _link_name(core: Any) -> str:
    return "qdlink.%016x" % core._rng.getrandbits(64)


# The core's private services, for the classes below (compiled, RouterCore's cdef members are
# reached only from functions that type ``core``: these, declared in cython/_core.pxd)
def _edge_emit(core: Any, peer: Any, effect: Any) -> None:
    core._emit(peer, effect)


def _edge_credit(core: Any, link: Any, credit: int) -> None:
    core._credit(link, credit)


def _local(link: Any) -> bool:
    """A client's link (not the uplink's or another edge connection's, not the agent's)."""
    role = link.conn.role
    return role != ROLE_EDGE and role != ROLE_INTERNAL


def _proxied(addr: Any) -> bool:
    """The addresses the edge proxies on its uplink: mobile, phase 0 (1.19 proxies waypoint
    phases with waypoint capabilities; not done here)."""
    return addr.cls == KEY_MOBILE and addr.key[1:2] == "0"


def _served_inside(addr: Any) -> bool:
    """The router's own agent consumes ``addr`` (1.19: the address has an in-core subscription,
    and its edge proxies no sender of it up the uplink)."""
    for link in addr.consumers:
        if link.conn.role == ROLE_INTERNAL:
            return True
    return False


def _edge_log(core: Any, text: str) -> None:
    if len(core.al_logs) < 1000:  # ROUTER_CORE info lines, logged by the core process
        core.al_logs.append(text)


class EdgeUplink:
    """The edge router's side: the active uplink and what is attached on it."""

    def __init__(self, core: Any) -> None:
        self.conn = None          # the active edge connection (None: no uplink)
        edge_addr = address_of(core, EDGE_UPLINK_KEY)
        edge_addr.refs += 1       # held for the router's life
        self.edge_addr = edge_addr
        self.anon = None
        self.downlink = None
        self.tracker = None
        self.inlinks = {}         # key -> receiver proxying a local consumer
        self.outlinks = {}        # key -> sender proxying local senders
        self.producers = {}       # key -> local targeted senders bound to it
        self.heartbeat = None     # the heartbeat sender on the uplink
        self.heartbeat_seq = 0
        self.next_heartbeat = 0.0
        # 1.19's address lookup client: a sender to the interior's _$qd.addr_lookup and a
        # dynamic receiver for the answers; client attaches waiting for their answer
        self.lookup = None
        self.replies = None
        self.reply_to = None
        self.pending = {}         # correlation id -> (peer, LinkAttach, core time asked)
        self.next_cid = 1
        self.decided = set()      # link ids whose attach the answer (or its absence) decided
        # 1.19's link-route proxy: this edge's link routes with a destination here, created on
        # the interior as routes of the uplink (edgeroutes.py), over a sender to $management
        # whose answers come on the lookup client's dynamic receiver
        self.routes = LinkRouteProxy(core.router_id)
        self.mgmt = None

    # --- the connection manager ------------------------------------------------------------
    def conn_opened(self, core: Any, conn: Any) -> None:
        if self.conn is None and conn.role == ROLE_EDGE:
            _edge_log(core, f"Edge connection (id={conn.conn_id}) to interior established")
            self.activate(core, conn)

    def conn_closed(self, core: Any, conn: Any) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        self.anon = self.downlink = self.tracker = self.heartbeat = None
        self.lookup = self.replies = self.reply_to = self.mgmt = None
        self.inlinks = {}
        self.outlinks = {}
        self.answer_all(core)  # (as 1.19: waiting attaches are decided here)
        self.routes.lost()     # the interior drops the routes of the connection it lost
        for other in core.conns.values():
            if other.role == ROLE_EDGE:
                _edge_log(core, f"Edge connection (id={conn.conn_id}) to interior lost, "
                           f"activating alternate id={other.conn_id}")
                self.activate(core, other)
                return
        _edge_log(core, f"Edge connection (id={conn.conn_id}) to interior lost, no alternate "
                   "connection available")

    def activate(self, core: Any, conn: Any) -> None:
        """``conn`` is the uplink now: attach the anonymous sender, the downlink, the
        tracking receiver and the proxies of every local mobile address."""
        self.conn = conn
        anon = open_link(core, conn, DIR_OUT, _link_name(core), None,
                         terminus(TERMINUS_SOURCE, None), terminus(TERMINUS_TARGET, None),
                         SETTLE_MIXED, self)
        self.anon = anon
        edge_addr = self.edge_addr
        anon.addr = edge_addr
        edge_addr.refs += 1
        edge_addr.consumers.append(anon)
        if edge_addr.waiting:
            credit_waiting(core, edge_addr)
        self.downlink = open_link(
            core, conn, DIR_IN, _link_name(core), None,
            terminus(TERMINUS_SOURCE, core.router_id, False, DOWNLINK_CAPS),
            terminus(TERMINUS_TARGET, None, False, DOWNLINK_CAPS), SETTLE_MIXED, self)
        self.tracker = open_link(core, conn, DIR_IN, _link_name(core), ADDR_TRACKING,
                                 terminus(TERMINUS_SOURCE, ADDR_TRACKING),
                                 terminus(TERMINUS_TARGET, None), SETTLE_MIXED, self)
        self.heartbeat = open_link(core, conn, DIR_OUT, _link_name(core), HEARTBEAT,
                                   terminus(TERMINUS_SOURCE, None),
                                   terminus(TERMINUS_TARGET, HEARTBEAT), SETTLE_MIXED, self)
        self.heartbeat.endpoint = self
        self.next_heartbeat = core.now + HEARTBEAT_INTERVAL
        self.lookup = open_link(core, conn, DIR_OUT, _link_name(core), ADDR_LOOKUP,
                                terminus(TERMINUS_SOURCE, None),
                                terminus(TERMINUS_TARGET, ADDR_LOOKUP), SETTLE_MIXED, self)
        self.lookup.endpoint = self
        self.replies = open_link(core, conn, DIR_IN, _link_name(core), None,
                                 terminus(TERMINUS_SOURCE, None, True),
                                 terminus(TERMINUS_TARGET, None), SETTLE_MIXED, self)
        self.mgmt = open_link(core, conn, DIR_OUT, _link_name(core), MANAGEMENT,
                              terminus(TERMINUS_SOURCE, None),
                              terminus(TERMINUS_TARGET, MANAGEMENT), SETTLE_MIXED, self)
        self.mgmt.endpoint = self
        for addr in list(core.addrs.values()):
            if _proxied(addr):
                self.sync(core, addr)

    # --- what the core tells it ------------------------------------------------------------
    def attach(self, core: Any, conn: Any, link_id: Any, direction: int, name: str,
               address: Any, presettled: Any, capacity: int, source: Any) -> bool:
        return False  # on an edge router every attach of a peer is an ordinary one

    def address_changed(self, core: Any, addr: Any) -> None:
        if self.conn is not None and _proxied(addr):
            self.sync(core, addr)

    def routes_changed(self, core: Any) -> None:
        return  # (an edge router has no routes)

    def route_destination(self, core: Any, key: str, present: bool) -> None:
        """Link-route address ``key`` gained its first (lost its last) destination here
        (linkroute.announce_route): its proxy on the interior is created (deleted)."""
        if present:
            self.routes.added(key)
        else:
            self.routes.removed(key)
        self.sync_routes(core)

    def sync_routes(self, core: Any) -> None:
        """Send the link-route proxy's requests, once the answers have somewhere to come
        (1.19's client waits for its receiver too); they wait on the link for credit."""
        mgmt = self.mgmt
        if mgmt is not None and self.reply_to is not None and not mgmt.closed:
            for request in self.routes.requests(self.reply_to, core.now):
                if not mgmt.queue and not mgmt.attaching and mgmt.limit > mgmt.delivered:
                    send_router(core, mgmt, None, True, request, None, -1)
                else:
                    mgmt.queue.append(request)  # sent as credit comes (transfer.drain_queue)
        if self.routes.logs:
            core.lr.logs.extend(self.routes.take_logs())

    def tick(self, core: Any, now: float) -> None:
        """Every 2 s a heartbeat on the uplink, when the interior gave credit (1.19); lookups
        unanswered for 3 s are decided here, link-route proxy requests unanswered for 10 s
        are asked again."""
        if self.routes.pending:
            self.routes.expire(now)
            self.sync_routes(core)
        if self.pending:
            for cid, (peer, cmd, asked) in list(self.pending.items()):
                if now - asked > LOOKUP_TIMEOUT:
                    del self.pending[cid]
                    self.decide(core, peer, cmd)
        link = self.heartbeat
        if link is None or now < self.next_heartbeat:
            return
        self.next_heartbeat = now + HEARTBEAT_INTERVAL
        if not link.attaching and not link.closed and link.limit > link.delivered:
            send_router(core, link, None, True, edgemsg.heartbeat(self.heartbeat_seq), None,
                        -1)
            self.heartbeat_seq += 1

    def producer_bound(self, core: Any, link: Any, addr: Any) -> None:
        if _local(link) and _proxied(addr):
            self.producers[addr.key] = self.producers.get(addr.key, 0) + 1
            if self.conn is not None:
                self.sync(core, addr)

    def producer_dropped(self, core: Any, link: Any, addr: Any) -> None:
        if _local(link) and addr.key in self.producers:
            count = self.producers[addr.key] - 1
            if count > 0:
                self.producers[addr.key] = count
            else:
                del self.producers[addr.key]
                if self.conn is not None:
                    self.sync(core, addr)

    def sync(self, core: Any, addr: Any) -> None:
        """Make the uplink's proxies of ``addr`` match its local consumers and senders."""
        key = addr.key
        consumer = False
        for link in addr.consumers:
            if _local(link):
                consumer = True
                break
        if consumer and key not in self.inlinks:
            self.inlinks[key] = open_link(core, self.conn, DIR_IN, _link_name(core), key[2:],
                                          terminus(TERMINUS_SOURCE, key[2:]),
                                          terminus(TERMINUS_TARGET, None), SETTLE_MIXED, self)
        elif not consumer and key in self.inlinks:
            detach_own(core, self.inlinks.pop(key))
        # as 1.19, no proxy for an address served in the router itself (its agent's
        # ``$management``): requests sent to it on the edge are the edge's
        producer = key in self.producers and not _served_inside(addr)
        if producer and key not in self.outlinks:
            self.outlinks[key] = open_link(core, self.conn, DIR_OUT, _link_name(core), key[2:],
                                           terminus(TERMINUS_SOURCE, None),
                                           terminus(TERMINUS_TARGET, key[2:]), SETTLE_MIXED,
                                           self)
        elif not producer and key in self.outlinks:
            detach_own(core, self.outlinks.pop(key))

    # --- owner of the links it attached (linkends.attached_out / detached_out) --------------
    def attached(self, core: Any, link: Any) -> bool:
        if link is self.replies:
            source = link.remote_source or {}
            self.reply_to = source.get("address")
            link.endpoint = self
            link.credited = True
            _edge_credit(core, link, LOOKUP_CREDIT)
            self.sync_routes(core)
        elif link is self.downlink:
            bind_endpoint(core, link, None)  # anonymous: routed by each message's address
        elif link is self.tracker:
            link.endpoint = self
            link.credited = True
            _edge_credit(core, link, TRACKING_CREDIT)
        elif link.direction == DIR_IN and self.inlinks.get(_key(link)) is link:
            bind_endpoint(core, link, _key(link))  # a producer of the local consumers' address
        return True  # the anonymous sender is bound already; an outlink waits for tracking

    def detached(self, core: Any, link: Any, error: Any) -> None:
        """The interior detached (or refused) one of the uplink's links: forgotten (not
        attached again while the address still needs it: a refusing peer would loop)."""
        key = _key(link)
        if self.inlinks.get(key) is link:
            del self.inlinks[key]
        if self.outlinks.get(key) is link:
            del self.outlinks[key]
        if link is self.heartbeat:
            self.heartbeat = None
        if link is self.lookup or link is self.replies:
            self.lookup = self.replies = self.reply_to = None
            self.answer_all(core)
            self.routes.lost()  # no answers any more (proxies wait for the next uplink)
        if link is self.mgmt:
            self.mgmt = None
            self.routes.lost()  # (not attached again: a refusing interior would loop)

    # --- 1.19's address lookup client --------------------------------------------------------
    def defer_attach(self, core: Any, peer: Any, cmd: Any) -> bool:
        """A client's attach on this edge: while the uplink can answer lookups, ask the
        interior whether its address is link-routed before attaching it (True: it waits for
        the answer, :meth:`answer`). As 1.19: only termini with an address, no local link
        route for it, never the uplink's own links."""
        link_id, conn_id, direction, name, address = cmd[0], cmd[1], cmd[2], cmd[3], cmd[4]
        if link_id in self.decided:
            self.decided.discard(link_id)
            return False
        lookup = self.lookup
        if (self.reply_to is None or lookup is None or lookup.attaching or address is None
                or cmd[5]):
            return False
        conn = core.conns.get(conn_id)
        if conn is None or conn.role == ROLE_EDGE or conn.role == ROLE_INTERNAL:
            return False
        if core.lr.addrs and core.lr.match(direction, address) is not None:
            return False  # a link route of this edge's own
        cid = self.next_cid
        self.next_cid = cid + 1
        self.pending[cid] = (peer, cmd, core.now)
        request = edgemsg.lookup_request(self.reply_to, cid, address, direction == DIR_IN)
        if not lookup.queue and lookup.limit > lookup.delivered:
            send_router(core, lookup, None, True, request, None, -1)
        else:
            lookup.queue.append(request)  # sent as credit comes (transfer.drain_queue)
        return True

    def cancel(self, link_id: Any) -> None:
        """The client detached a link whose attach still waits for its lookup: forgotten."""
        for cid, entry in list(self.pending.items()):
            if entry[1][0] == link_id:
                del self.pending[cid]

    def answer(self, core: Any, payload: Any) -> None:
        reply = edgemsg.read_lookup_reply(payload)
        if reply is None:
            return
        entry = self.pending.pop(reply[0], None)
        if entry is None:
            return  # decided already (timed out, uplink lost)
        peer, cmd = entry[0], entry[1]
        if reply[1] != edgemsg.LOOKUP_OK or not reply[2]:
            self.decide(core, peer, cmd)  # not link-routed: attached here
        elif not reply[3]:
            _edge_emit(core, peer, LinkRefuse(cmd[0], "qd:no-route-to-dest",
                                              "No route to the destination node"))
        else:
            self.route_up(core, peer, cmd)

    def decide(self, core: Any, peer: Any, cmd: Any) -> None:
        """Attach the client's link as if no lookup had been asked."""
        self.decided.add(cmd[0])
        on_attach(core, peer, cmd)

    def answer_all(self, core: Any) -> None:
        pending = self.pending
        self.pending = {}
        for peer, cmd, asked in pending.values():
            self.decide(core, peer, cmd)

    def route_up(self, core: Any, peer: Any, cmd: Any) -> None:
        """The interior routes the address as a link route: the client's link is paired
        with one on the uplink with its termini (1.19 forwards the attach as it is)."""
        (link_id, conn_id, direction, name, address, dynamic, presettled, capacity, link_type,
         source, target, settle) = cmd
        conn = core.conns.get(conn_id)
        if conn is None or self.conn is None or link_id in core.links:
            return
        link = Link(link_id, conn, direction, name, address, bool(presettled), capacity)
        link.rate_at = link.zero_at = core.now
        link.source = source
        link.target = target
        link.settle = settle
        core.links[link_id] = link
        conn.links[link_id] = link
        raddr = RouteAddress(("C" if direction == DIR_IN else "D") + str(address),
                             str(address), None, None)
        out_id = core.attach_out(self.conn.conn_id, DIR_OUT if direction == DIR_IN else DIR_IN,
                                 routed_name(conn, name), address, source, target,
                                 settle if settle is not None else [0, 0], raddr)
        out = core.links[out_id]
        out.capacity = capacity
        pair(link, out, raddr.key)

    # --- the tracking receiver: a core endpoint (ingress.on_transfer hands it over) ---------
    def transfer(self, core: Any, link: Any, dlv_id: Any, settled: bool, payload: Any) -> None:
        if link is self.replies:
            reply = edgemsg.read_management_reply(payload)
            if reply is not None and self.routes.owns(reply[0]):
                self.routes.reply(*reply)
                self.sync_routes(core)
            else:
                self.answer(core, payload)
            if not settled:
                link.in_unsettled -= 1
                _edge_emit(core, link.peer, UpdateIn(dlv_id, STATE_ACCEPTED, True, None))
            _edge_credit(core, link, 1)
            return
        update = edgemsg.read_tracking_update(payload)
        state = STATE_ACCEPTED
        if update is None:
            _edge_log(core, INVALID_UPDATE)
            state = STATE_REJECTED
        else:
            out = self.outlinks.get(update[0])
            if out is not None:
                if update[1]:
                    self.bind_out(core, out)
                else:
                    self.unbind_out(core, out)
        if not settled:
            link.in_unsettled -= 1
            _edge_emit(core, link.peer, UpdateIn(dlv_id, state, True, None))
        _edge_credit(core, link, 1)

    def bind_out(self, core: Any, link: Any) -> None:
        """The interior has a destination for the outlink's address: it becomes a consumer
        of the address here (waiting senders get credit)."""
        if link.addr is not None or link.closed:
            return
        addr = core.addrs.get(_key(link))
        if addr is None:
            return
        link.addr = addr
        addr.refs += 1
        addr.consumers.append(link)
        if addr.waiting or addr.fallback_for is not None:
            credit_waiting(core, addr)
        if addr.held and link.limit > link.delivered:
            on_flow(core, link.peer, LinkFlow(link.link_id, link.limit, False))

    def unbind_out(self, core: Any, link: Any) -> None:
        """No destination beyond the edge any more: the outlink stops being a consumer
        (what waits on it is released; senders stall at their next delivery)."""
        addr = link.addr
        if addr is None:
            return
        addr.consumers.remove(link)
        link.addr = None
        if link.queue:
            release_queue(core, link)
        if not addr.consumers and addr.held:
            release_held(core, addr)
        unref(core, addr)


def _key(link: Any) -> Any:
    """The mobile key a proxy link of the uplink stands for (its address, phase 0)."""
    return None if link.address is None else "M0" + link.address
