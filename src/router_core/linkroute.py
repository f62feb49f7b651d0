"""Link routing: the link-route table, route-container reachability, and routed link pairs.

Owns, as Qpid Dispatch's route_control.c and the link-route parts of connections.c and
forwarder.c do:

* the table: every configured ``linkRoute`` (a :class:`LinkRoute`) and the address each
  refers to (a :class:`RouteAddress`, keyed as 1.19 keys it: ``Cqueue``/``Dqueue`` for a
  prefix in/out, ``Ea.*.b``/``Fa.*.b`` for a pattern; link routes with the same pattern and
  direction share one), matched per attach (never per delivery) with the address rules' word
  matching (common/addrmatch);
* reachability: a ``route-container`` connection whose listener/connector name is a link
  route's ``connection`` (or whose container-id is its ``containerId``) becomes a destination
  of that route's address when it opens, and stops being one when it closes;
* attach routing: a client's attach whose target (a sender) or source (a receiver) matches an
  address with a destination is not answered by the router: the core attaches the mirror link
  on the destination's connection (same name + ``@`` + the client's container-id, the client's
  termini with the external prefix rewritten) and answers the client with the far end's
  termini once they arrive (see :func:`routed_attached`);
* the pair: the two links share a private :class:`~router_core.records.Address` whose one
  consumer is the pair's outbound link and whose forwarder is the closest one, so transfers,
  settlement and dispositions take the ordinary path with no address lookup; the inbound link
  is never credited by the core's own accounting (``credited`` stays False): its credit is
  the outbound link's (:func:`routed_flow`); a detach or a lost connection on one side
  detaches the other (the peer's condition, or 1.19's ``qd:routed-link-lost``).

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any, Optional

from common.ipc import (
    DIR_IN, DIR_OUT, TERMINUS_COORDINATOR, DeliverState, DeliverTag, DetachLink, Drained,
    LinkDrain, LinkOpen, LinkRefuse, LocalAddress)
from common.linkroutes import KEY_DIRECTION, route_key, route_pattern
from router_core.addressing import normalize as normalize_address
from router_core.corestate import DIST_CLOSEST
from router_core.matcher import AddressRules
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.records import (
    LOG_LINK_ATTACHED, MODE_EDGE, MODE_INTERIOR, ROLE_INTER_ROUTER, ROLE_ROUTE_CONTAINER, Address,
    Link)
# --- end core parts ---

NO_ROUTE = ("qd:no-route-to-dest", "No route to the destination node")
LINK_EXPIRATION = ("qd:link-expiration", "Requested link expiration not allowed")
EXPIRE_NEVER = 3  # terminus expiry-policy "never" (proton's PN_EXPIRE_NEVER)
ROUTED_LINK_LOST = ("qd:routed-link-lost", "Connectivity to the peer container was lost")
COORDINATOR_ADDRESS = "$coordinator"
HINT_LINK_BALANCED = 4  # the treatment hint 1.19 advertises with a link-route key


class LinkRoute:
    """One configured ``linkRoute``."""

    __slots__ = ("identity", "name", "direction", "pattern", "is_prefix", "key", "add_prefix",
                 "del_prefix", "connection", "container_id", "addr", "parent")

    def __init__(self, attributes: dict) -> None:
        self.identity = str(attributes.get("identity"))
        self.name = attributes.get("name")
        direction = attributes.get("direction") or attributes.get("dir")
        self.direction = DIR_IN if direction == "in" else DIR_OUT
        self.pattern = route_pattern(attributes)
        self.is_prefix = attributes.get("prefix") is not None
        self.key = route_key(self.pattern, "in" if self.direction == DIR_IN else "out")
        self.add_prefix = attributes.get("addExternalPrefix")
        self.del_prefix = attributes.get("delExternalPrefix")
        self.connection = attributes.get("connection")
        self.container_id = attributes.get("containerId")
        self.addr = None
        # a connection-scoped route (router.connection.linkRoute): the connection that
        # created it over management, its one destination; it goes when that connection does
        self.parent = None

    def serves(self, conn: Any) -> bool:
        """Does the route-container connection ``conn`` lead to this route's container?"""
        if self.parent is not None:
            return conn is self.parent
        return ((self.connection is not None and self.connection == conn.listener)
                or (self.container_id is not None and self.container_id == conn.container))


class RouteAddress:
    """The address of one link-route pattern and direction (``Cqueue``): its destinations."""

    __slots__ = ("key", "direction", "pattern", "add_prefix", "del_prefix", "routes", "conns",
                 "rr", "rr_remote", "remotes", "attaches", "announced")

    def __init__(self, key: str, pattern: str, add_prefix: Any, del_prefix: Any) -> None:
        self.key = key
        self.direction = DIR_IN if KEY_DIRECTION[key[:1]] == "in" else DIR_OUT
        self.pattern = pattern
        # the first route of an address gives it its external prefixes, as 1.19 does
        self.add_prefix = add_prefix
        self.del_prefix = del_prefix
        self.routes = []    # LinkRoutes referring to it
        self.conns = []     # local destinations: route-container Connections, in opening order
        self.rr = 0
        self.rr_remote = 0
        # interior: router id -> hint, routers with a destination (their MAUs): a router
        # learns a route address from them even with no linkRoute of its own, as 1.19 does
        self.remotes = {}
        self.attaches = 0   # attaches routed through it
        self.announced = False  # the agent was told this router has a destination


class LinkRouteTable:
    """Every link route and route address of one core, and the matchers per direction."""

    __slots__ = ("routes", "addrs", "matchers", "by_rule", "logs", "conn_routes", "held_states",
                 "held_tags", "answers")

    def __init__(self) -> None:
        self.logs = []              # (level, text) for the core process's log (take_logs)
        self.routes = {}            # identity -> LinkRoute, in creation order
        # connection-scoped routes: conn_id -> {identity -> LinkRoute}, in creation order
        self.conn_routes = {}
        # a sender's state for a delivery the core still holds (routed or anycast): in dlv_id ->
        # (state, info), passed on when the delivery is sent (routed_sent), gone with unhold
        self.held_states = {}
        # the client's tag of a routed delivery the core holds: in dlv_id -> tag, passed on
        # when it is sent (routed_sent), gone with unhold
        self.held_tags = {}
        # a routed link its peer detached, whose answer is its partner's peer's answer
        # (await_answer): partner link_id -> (peer, link_id, partner's conn_id)
        self.answers = {}
        self.addrs = {}             # key -> RouteAddress
        self.matchers = [None, None]  # DIR_IN / DIR_OUT -> AddressRules over the patterns
        self.by_rule = [[], []]     # DIR_* -> RouteAddress of each rule, by rule order

    def rebuild(self) -> None:
        for direction in (DIR_IN, DIR_OUT):
            addrs = [a for a in self.addrs.values() if a.direction == direction]
            self.by_rule[direction] = addrs
            self.matchers[direction] = AddressRules([{"pattern": a.pattern} for a in addrs]) \
                if addrs else None

    def take_logs(self) -> list:
        logs = self.logs
        self.logs = []
        return logs

    def note(self, text: str, route: "LinkRoute") -> None:
        """Log a route's (de)activation as 1.19 does: by its name, and the connection name or
        container id it names."""
        if route.parent is not None:  # 1.19 names a client connection by its container
            where = f"container {route.parent.container}"
        else:
            where = (f"connection {route.connection}" if route.connection is not None
                     else f"container {route.container_id}")
        if len(self.logs) < 1000:
            self.logs.append(("info", f"{text} '{route.name or route.identity}' on {where}"))

    def match(self, direction: int, address: str) -> Optional[RouteAddress]:
        matcher = self.matchers[direction]
        if matcher is None:
            return None
        rule = matcher.lookup(address)
        return None if rule is None else self.by_rule[direction][rule.order]


# --- the table: management and configuration ---------------------------------------------------
def add_link_route(core: Any, attributes: dict) -> LinkRoute:
    """A new link route (attributes already validated: common/linkroutes.py); it is active at
    once if a route-container connection that serves it is open."""
    table = core.lr
    route = LinkRoute(attributes)
    if route.identity in table.routes:
        raise ValueError(f"link route {route.identity} exists")
    _add_to_address(table, route)
    table.routes[route.identity] = route
    for conn in core.conns.values():
        if conn.role == ROLE_ROUTE_CONTAINER and route.serves(conn):
            table.note("Link Route Activated", route)
            _bind(core, route.addr, conn)
    return route


def delete_link_route(core: Any, identity: str) -> bool:
    """Remove a link route; its address goes when no route refers to it any more (links
    already routed through it stay paired, as in 1.19). False if there is no such route."""
    route = core.lr.routes.pop(str(identity), None)
    if route is None:
        return False
    _drop_route(core, route)
    return True


def add_conn_link_route(core: Any, attributes: dict) -> str:
    """A connection-scoped link route (``router.connection.linkRoute``, validated by the
    agent: identity, name, pattern, direction, connId): its connection is at once its one
    destination, whatever its role. The problem as text, or "" when it was added."""
    table = core.lr
    conn = core.conns.get(attributes.get("connId"))
    if conn is None:
        return "Parent connection no longer exists"
    routes = table.conn_routes.get(conn.conn_id)
    if routes is None:
        routes = table.conn_routes[conn.conn_id] = {}
    route = LinkRoute(attributes)
    if route.identity in routes:
        return f"link route {route.identity} exists"
    route.parent = conn
    routes[route.identity] = route
    _add_to_address(table, route)
    table.note("Link Route Activated", route)
    _bind(core, route.addr, conn)
    return ""


def delete_conn_link_route(core: Any, conn_id: Any, identity: str) -> bool:
    """Remove connection ``conn_id``'s route ``identity``; False if it has none such."""
    routes = core.lr.conn_routes.get(conn_id)
    route = None if routes is None else routes.pop(str(identity), None)
    if route is None:
        return False
    if not routes:
        del core.lr.conn_routes[conn_id]
    _drop_route(core, route)
    return True


def drop_conn_routes(core: Any, conn: Any) -> None:
    """``conn`` closed: the routes it created go with it (1.19)."""
    routes = core.lr.conn_routes.pop(conn.conn_id, None)
    if routes:
        for route in routes.values():
            _drop_route(core, route)


def _add_to_address(table: LinkRouteTable, route: LinkRoute) -> None:
    addr = table.addrs.get(route.key)
    if addr is None:
        addr = table.addrs[route.key] = RouteAddress(route.key, route.pattern, route.add_prefix,
                                                     route.del_prefix)
        table.rebuild()
    elif not addr.routes:  # learned from other routers until now: this route's prefixes
        addr.add_prefix = route.add_prefix
        addr.del_prefix = route.del_prefix
    route.addr = addr
    addr.routes.append(route)


def _drop_route(core: Any, route: LinkRoute) -> None:
    table = core.lr
    addr = route.addr
    addr.routes.remove(route)
    for conn in addr.conns:
        if route.serves(conn):
            table.note("Link Route Deactivated", route)
    for conn in list(addr.conns):
        if not any(r.serves(conn) for r in addr.routes):
            _unbind(core, addr, conn)
    if not addr.routes and not addr.remotes:
        del table.addrs[addr.key]
        table.rebuild()


def _bind(core: Any, addr: RouteAddress, conn: Any) -> None:
    if conn not in addr.conns:
        addr.conns.append(conn)
        if len(addr.conns) == 1:
            announce_route(core, addr, True)


def _unbind(core: Any, addr: RouteAddress, conn: Any) -> None:
    if conn in addr.conns:
        addr.conns.remove(conn)
        if not addr.conns:
            announce_route(core, addr, False)


def announce_route(core: Any, addr: RouteAddress, present: bool) -> None:
    """Interior mode: tell the agent the route address gained its first or lost its last
    local destination; it advertises the key (``Cqueue``...) in its mobile address updates
    with 1.19's link-balanced treatment hint, so other routers route matching attaches here.
    Edge mode: the edge's link-route proxy creates (deletes) the route on its interior."""
    if core.mode == MODE_EDGE:
        if core.edge is not None:
            core.edge.route_destination(core, addr.key, present)
        return
    if core.mode != MODE_INTERIOR:
        return
    addr.announced = present
    if core.agent_peer is not None:
        core._emit(core.agent_peer, LocalAddress(addr.key, present, HINT_LINK_BALANCED))


def announce_all(core: Any) -> None:
    """A (new) agent said hello: every route address with a local destination again."""
    for addr in core.lr.addrs.values():
        if addr.conns:
            announce_route(core, addr, True)


def is_route_key(key: str) -> bool:
    return key[:1] in KEY_DIRECTION


def remote_route(core: Any, key: str, router: str, present: bool) -> None:
    """RemoteAddress for a link-route key: router ``router`` has (or no longer has) a
    destination for it."""
    table = core.lr
    addr = table.addrs.get(key)
    if present:
        if addr is None:
            pattern = key[1:] + ".#" if key[:1] in "CD" else key[1:]
            addr = table.addrs[key] = RouteAddress(key, pattern, None, None)
            table.rebuild()
        addr.remotes[router] = HINT_LINK_BALANCED
    elif addr is not None and router in addr.remotes:
        del addr.remotes[router]
        if not addr.routes and not addr.remotes:
            del table.addrs[key]
            table.rebuild()


def container_opened(core: Any, conn: Any) -> None:
    """A route-container connection opened: it is a destination of every route it serves."""
    for route in core.lr.routes.values():
        if route.serves(conn):
            core.lr.note("Link Route Activated", route)
            _bind(core, route.addr, conn)


def container_closed(core: Any, conn: Any) -> None:
    for route in core.lr.routes.values():
        if route.serves(conn):
            core.lr.note("Link Route Deactivated", route)
    for addr in core.lr.addrs.values():
        _unbind(core, addr, conn)


# --- attach routing -----------------------------------------------------------------------------
def terminus_address(address: Any, coordinator: bool) -> Optional[str]:
    """What an attach is matched on: the terminus address (``amqp:`` forms normalised), or
    ``$coordinator`` for a coordinator target, whose address is null (1.19's rule)."""
    if coordinator:
        return COORDINATOR_ADDRESS
    if address is None:
        return None
    return normalize_address(address)


def rewrite_prefix(address: Any, strip: Any, insert: Any) -> Any:
    """``address`` with the prefix ``strip`` removed (if it starts with it) and ``insert``
    put in front (if given)."""
    if address is None:
        return None
    if strip and address.startswith(strip):
        address = address[len(strip):]
    if insert:
        address = insert + address
    return address


def pick_destination(core: Any, addr: RouteAddress, arrived_on: Any) -> Any:
    """The connection for the next routed attach: a local route container (rotated among
    them), else the inter-router connection toward a router with a destination (rotated
    among the reachable ones, as 1.19 rotates), never back where the attach came from."""
    conns = addr.conns
    if conns:
        if addr.rr >= len(conns):
            addr.rr = 0
        conn = conns[addr.rr]
        addr.rr += 1
        return conn
    if not addr.remotes or not core.routers:
        return None
    hops = []
    for router_id in sorted(addr.remotes):
        router = core.routers.get(router_id)
        if router is not None and router.conn is not None and router.conn is not arrived_on:
            hops.append(router.conn)
    if not hops:
        return None
    if addr.rr_remote >= len(hops):
        addr.rr_remote = 0
    conn = hops[addr.rr_remote]
    addr.rr_remote += 1
    return conn


def routed_name(conn: Any, name: str) -> str:
    """1.19 makes a routed link's name unique per hop: ``name@container`` (not on
    inter-router connections, where the name already carries it)."""
    if conn.role == ROLE_INTER_ROUTER:
        return name
    return f"{name}@{conn.container}"


def refuse_no_route(core: Any, conn: Any, link_id: Any) -> None:
    core._emit(conn.peer, LinkRefuse(link_id, NO_ROUTE[0], NO_ROUTE[1]))


def split_condition(error: str) -> tuple:
    """The worker's ``name: description`` condition text as (name, description)."""
    if not error:
        return "", ""
    name, sep, description = error.partition(": ")
    return name, description if sep else ""


def resumable(term: Any) -> bool:
    """A terminus that outlives its link (1.19's survives-disconnect): a non-zero timeout or
    the expiry-policy "never"."""
    return term is not None and (bool(term.get("timeout")) or term.get("expiry") == EXPIRE_NEVER)


def route_attach(core: Any, conn: Any, link_id: Any, direction: int, name: str, address: Any,
                 dynamic: Any, presettled: Any, capacity: int, source: Any, target: Any,
                 settle: Any) -> bool:
    """A client's attach: route it if its terminus matches a link route (True: handled, the
    attach is routed or refused; False: not link-routed, the caller attaches it)."""
    term = target if direction == DIR_IN else source
    coordinator = (direction == DIR_IN and term is not None
                   and term.get("type") == TERMINUS_COORDINATOR)
    if dynamic and not coordinator:
        # a dynamic terminus is link-routed by the address in its dynamic-node-properties
        # (x-opt-qd.address, read by the worker), else message-routed (a temporary address)
        dnp = term.get("dnp_address") if term is not None else None
        if dnp is None:
            return False
        address = dnp
    text = terminus_address(address, coordinator)
    if text is None:
        return False
    raddr = core.lr.match(direction, text)
    if raddr is None:
        return False
    dest = pick_destination(core, raddr, conn)
    if dest is None:
        refuse_no_route(core, conn, link_id)
        return True
    if not core.allow_resumable_lr and resumable(term):
        core._emit(conn.peer, LinkRefuse(link_id, LINK_EXPIRATION[0], LINK_EXPIRATION[1]))
        return True
    link = Link(link_id, conn, direction, name, address, bool(presettled), capacity)
    link.rate_at = link.zero_at = core.now
    link.source = source
    link.target = target
    link.settle = settle
    # the far end gets the client's termini, the routed one with the external prefix rewritten
    # by the router that hands it to the container (as 1.19: a router forwarding the attach to
    # another router keeps the client's address, which that router matches and rewrites).
    # ``address`` is the terminus's own, or on a multiTenant connection the tenant's
    # (``<vhost>/<address>``, put by the worker): 1.19 sends that one on, either way.
    out_source = source
    out_target = target
    if not coordinator and term is not None and not dynamic:
        routed_address = address
        if dest.role != ROLE_INTER_ROUTER:
            routed_address = rewrite_prefix(address, raddr.del_prefix, raddr.add_prefix)
        if routed_address != term.get("address"):
            routed = dict(term)
            routed["address"] = routed_address
            if direction == DIR_IN:
                out_target = routed
            else:
                out_source = routed
    core.links[link_id] = link
    conn.links[link_id] = link
    if core.log_info:  # the client's link; its far end is logged by open_link
        core.info_logs.append((LOG_LINK_ATTACHED, link, source, target))
    out_id = core.attach_out(dest.conn_id, DIR_OUT if direction == DIR_IN else DIR_IN,
                             routed_name(conn, name), address, out_source, out_target,
                             settle if settle is not None else [0, 0], raddr)
    out = core.links[out_id]
    out.capacity = capacity  # the client's window: credit is mirrored, never invented
    pair(link, out, raddr.key)
    raddr.attaches += 1
    return True


def pair(client: Link, out: Link, key: str) -> None:
    """Tie a routed pair: one private closest address whose one consumer is the pair's
    outbound link; the inbound link is never credited by the core's own accounting."""
    addr = Address(key, DIST_CLOSEST, -1)
    client.peer_link = out
    out.peer_link = client
    client.settle_credit = out.settle_credit = False  # credit passes through (mirror_credit)
    consumer = client if client.direction == DIR_OUT else out
    addr.consumers.append(consumer)
    if consumer.to_container:
        addr.container_count += 1
    client.addr = addr
    out.addr = addr
    addr.refs = 2


def routed_attached(core: Any, out: Link) -> None:
    """The far end answered the routed attach: the client's attach is answered with the far
    end's termini (its external prefix rewritten back) and settle modes; credit may flow."""
    client = out.peer_link
    raddr = out.owner
    source = out.remote_source
    target = out.remote_target
    remote = target if client.direction == DIR_IN else source
    asked = client.target if client.direction == DIR_IN else client.source
    address = None
    # the far side is link-routed too: what the route container sends keeps its tags
    core._emit(out.peer, LinkOpen(out.link_id, None, None, None, out.remote_settle))
    if remote is not None:
        # the far end's own address for a dynamic terminus is not rewritten
        if remote.get("type") != TERMINUS_COORDINATOR and not (
                asked is not None and asked.get("dynamic")) \
                and out.conn.role != ROLE_INTER_ROUTER:  # the next router rewrote it back
            remote = dict(remote)
            remote["address"] = rewrite_prefix(remote.get("address"), raddr.add_prefix,
                                               raddr.del_prefix)
            if client.direction == DIR_IN:
                target = remote
            else:
                source = remote
        address = remote.get("address")
    core._emit(client.peer, LinkOpen(client.link_id, address, source, target,
                                     out.remote_settle))
    receiver = client if client.direction == DIR_OUT else out
    if receiver.limit > receiver.delivered:
        mirror_credit(core, receiver, False)


def mirror_credit(core: Any, receiver: Link, drain: bool) -> None:
    """The receiving end of a routed pair (the router's outbound link) reported its credit:
    the sending end (the pair's inbound link) gets exactly as much, never more; a drain is
    passed on to the sender (LinkDrain) and answered when the sender has drained."""
    sender = receiver.peer_link
    if sender.closed or sender.attaching:
        return  # routed_attached passes the credit on once the far end has answered
    available = receiver.limit - receiver.delivered - receiver.addr.held
    outstanding = sender.granted - sender.received
    if available > outstanding:
        core._credit(sender, available - outstanding)
    if drain:
        core._emit(sender.peer, LinkDrain(sender.link_id))


def on_in_drained(core: Any, peer: Any, cmd: Any) -> None:
    """InDrained: the sender of a routed pair's inbound link drained its credit; the
    receiver's drain is answered (its credit is used up)."""
    sender = core.links.get(cmd[0])
    if sender is None or sender.peer_link is None:
        return
    sender.granted = sender.received
    receiver = sender.peer_link
    if receiver is None or receiver.closed or receiver.addr.held:
        return
    core._emit(receiver.peer, Drained(receiver.link_id))
    if receiver.limit > receiver.delivered:
        receiver.delivered = receiver.limit


def on_sender_state(core: Any, peer: Any, cmd: Any) -> None:
    """SenderState: the sender of an anycast or link-routed delivery gave it a state (a
    transactional send, received, an extension state): the delivery forwarded for it gets the
    same state (DeliverState), as 1.19 moves it. A delivery the core still holds (no credit
    yet, or queued toward another router) keeps the state until it is sent
    (:func:`routed_sent`); the latest state given wins. Every multicast copy gets it too (a
    copy still queued when it is sent: :func:`copy_sent`), as 1.19 passes it on."""
    dlv = core.in_unsettled.get(cmd[0])
    if dlv is None:
        return
    if dlv.multicast:
        for out in dlv.copies or ():
            if out is not None:
                core._emit(out.link.peer, DeliverState(out.out_id, cmd[1], cmd[2]))
        if dlv.pending:  # (forgotten when its last queued copy is sent: copy_unqueued)
            core.lr.held_states[dlv.dlv_id] = (cmd[1], cmd[2])
        return
    out = dlv.out
    if out is None:
        if dlv.pending:  # held at the pair's address
            core.lr.held_states[dlv.dlv_id] = (cmd[1], cmd[2])
        return
    core._emit(out.link.peer, DeliverState(out.out_id, cmd[1], cmd[2]))


def routed_sent(core: Any, dlv: Any) -> None:
    """A delivery the core held was sent: the state its sender gave it meanwhile follows it
    (DeliverState)."""
    state = core.lr.held_states.pop(dlv.dlv_id, None)
    if state is not None and dlv.out is not None:
        core._emit(dlv.out.link.peer, DeliverState(dlv.out.out_id, state[0], state[1]))


def copy_sent(core: Any, dlv: Any, out: Any) -> None:
    """A multicast copy that waited in the core was sent: the state its sender gave the
    delivery meanwhile follows it (DeliverState)."""
    state = core.lr.held_states.get(dlv.dlv_id)
    if state is not None and out is not None:
        core._emit(out.link.peer, DeliverState(out.out_id, state[0], state[1]))


def await_answer(core: Any, link: Link, partner: Link) -> None:
    """``link``'s peer detached it; its worker answers only when told (DetachLink): with what
    ``partner``'s peer answers to the detach passed on to it, as 1.19 relays it."""
    if not partner.closed:
        core.lr.answers[partner.link_id] = (link.peer, link.link_id, partner.conn.conn_id)


def answer_detach(core: Any, link_id: Any, closed: bool, error: str, lost: bool) -> bool:
    """The peer's answer (LinkDetach, or LinkLost) for a partner detached by
    :func:`await_answer`: passed on to the link that waits for it. False: none waits."""
    entry = core.lr.answers.pop(link_id, None)
    if entry is None:
        return False
    if lost:
        condition, description, closed = ROUTED_LINK_LOST[0], ROUTED_LINK_LOST[1], True
    else:
        condition, description = split_condition(error)
    core._emit(entry[0], DetachLink(entry[1], condition, description, closed))
    return True


def answers_lost(core: Any, conn: Any) -> None:
    """``conn`` closed: the links waiting for an answer from it get qd:routed-link-lost."""
    for link_id, entry in list(core.lr.answers.items()):
        if entry[2] == conn.conn_id:
            del core.lr.answers[link_id]
            core._emit(entry[0], DetachLink(entry[1], ROUTED_LINK_LOST[0], ROUTED_LINK_LOST[1],
                                            True))


def on_delivery_tag(core: Any, peer: Any, cmd: Any) -> None:
    """DeliveryTag: the client's tag of the routed delivery whose transfer comes next from the
    same worker; kept until that transfer is forwarded (:func:`tag_next`) or held."""
    link = core.links.get(cmd[1])
    if link is None or link.peer_link is None:
        return
    core.routed_tag = (link, cmd[0], cmd[2])


def tag_next(core: Any, link: Link, target: Link, dlv_id: Any) -> None:
    """A delivery is sent now to ``target`` (send_local): when it is the routed one whose tag
    came last, the receiver's worker gets the tag first (DeliverTag, for the out id the send
    takes). A tag whose transfer went elsewhere (refused, dropped) is forgotten here."""
    pending = core.routed_tag
    core.routed_tag = None
    if pending[0] is link and pending[1] == dlv_id:
        core._emit(target.peer, DeliverTag(core._next_out, pending[2]))


def tag_held(core: Any, link: Link, dlv_id: Any) -> None:
    """The routed delivery whose tag came last is held (its receiver has no credit): its tag
    waits with it (held_tags) until it is sent (:func:`held_tag_out`)."""
    pending = core.routed_tag
    core.routed_tag = None
    if pending[0] is link and pending[1] == dlv_id:
        core.lr.held_tags[dlv_id] = pending[2]


def held_tag_out(core: Any, target: Link, dlv: Any) -> None:
    """A held routed delivery is sent now to ``target``: its tag goes first (DeliverTag)."""
    tag = core.lr.held_tags.pop(dlv.dlv_id, None)
    if tag is not None:
        core._emit(target.peer, DeliverTag(core._next_out, tag))
