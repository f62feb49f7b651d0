"""How a link begins and ends in the core: what an attached link is bound to, and what dropping
one leaves behind.

Owns: attaching endpoint links (1.19's refusals, dynamic and fallback addresses, the address a
link consumes from or produces to, credit for senders now or when a destination comes) and
router links (control and data links of an inter-router connection, their priorities and
credit slices, RouterLinkUp/Down to the agent); the links the router attaches itself (AttachOut
for auto-links, link routes, edge and streaming links, and their owners' answers); detaching a
link, its routed partner or an offending one; dropping a link from its address and connection
(see transfer.fail_outbound); and the protocol errors kept for the core process to log.

Which event does what, in which state, is lifecycle.py's (its transition tables call these).

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io, agent or
supervisor.
"""
from collections import deque
from typing import Any

from router_core.addressing import CLASS_MOBILE, CLASS_ROUTER, CLASS_TOPOLOGICAL
from common.ipc import (
    DIR_IN, DIR_OUT, AttachOut, DetachLink, LinkOpen, LinkRefuse, RouterLinkDown, RouterLinkUp)
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import (
    FALLBACK_PHASE, address_of, key_of, new_temp, phase_key, unavailable, unref)
from router_core.linkroute import ROUTED_LINK_LOST, routed_attached
from router_core.records import (
    CONTROL_PRIORITY, KEY_EDGE, KEY_MOBILE, LINK_CONTROL, LINK_DATA, LOG_LINK_ATTACHED,
    MODE_INTERIOR, PRIORITIES, ROLE_INTERNAL, Connection, Link)
from router_core.ingress import has_destination
from router_core.relay import announce, credit_waiting, reachable
from router_core.streaming import drop_stream_link
from router_core.streamlinks import STREAM_LINK_PRIORITY, forget_stream_link
from router_core.transfer import fail_outbound, release_held
# --- end core parts ---

PROTOCOL_ERROR = "amqp:internal-error"
# 1.19's refusals of an endpoint attach (conditions and texts as it sends them)
COORDINATOR_REFUSED = ("amqp:precondition-failed",
                       "The router can't coordinate transactions by itself, a linkRoute to a "
                       "coordinator must be configured to use transactions.")
NODE_NOT_FOUND = ("amqp:not-found", "Node not found")
ERRORS_MAX = 100  # protocol errors kept for the core process to log, at most


def protocol_error(core: Any, text: str) -> None:
    """Keep ``text`` for the core process's log (bounded: the oldest go first)."""
    errors = core.errors
    if len(errors) >= ERRORS_MAX:
        del errors[0]
    errors.append(text)


# --- links a peer attached ----------------------------------------------------------------------
def attach_endpoint(core: Any, conn: Connection, link_id: Any, direction: int, name: str,
                    address: Any, dynamic: Any, presettled: Any, capacity: int,
                    coordinator: Any = False, fallback: bool = False) -> None:
    """An endpoint link, decided as 1.19 decides it: a receiver needs an address, and one
    that is not another router's (``_topo/0/<other>/...``); a transaction coordinator is
    refused (nothing here coordinates transactions; a link route to one was tried first); an
    address whose treatment is ``unavailable`` is refused (amqp:not-found) except on the
    agent's own connection; else the link attaches to its address (``fallback``: a terminus
    with the qd.fallback capability, the address's fallback destination for a receiver)."""
    if direction == DIR_OUT and address is None and not dynamic:
        core._emit(conn.peer, LinkRefuse(link_id, "qd:no-route-to-dest",
                                         "No route to the destination node"))
        return
    if coordinator:
        core._emit(conn.peer, LinkRefuse(link_id, COORDINATOR_REFUSED[0], COORDINATOR_REFUSED[1]))
        return
    key = None
    if dynamic:
        address, key = new_temp(core, direction == DIR_IN)
    elif address is not None:
        key = phase_key(core.rules, key_of(core, address), direction)
        if direction == DIR_OUT and key[:1] == CLASS_ROUTER:  # another router's address
            core._emit(conn.peer, LinkRefuse(link_id, "qd:no-route-to-dest",
                                             "No route to the destination node"))
            return
        if conn.role != ROLE_INTERNAL and unavailable(core, key):
            core._emit(conn.peer, LinkRefuse(link_id, NODE_NOT_FOUND[0], NODE_NOT_FOUND[1]))
            return
        if core.test_refusals and conn.role != ROLE_INTERNAL and key in core.test_refusals:
            text = core.test_refusals[key][0 if direction == DIR_IN else 1]
            if text is not None:
                core._emit(conn.peer, LinkRefuse(link_id, "qd:forbidden", text))
                return
        if fallback and direction == DIR_OUT and key[:1] == CLASS_MOBILE:
            key = CLASS_MOBILE + FALLBACK_PHASE + key[2:]  # the fallback destination
    link = Link(link_id, conn, direction, name, address, bool(presettled), capacity)
    link.rate_at = link.zero_at = core.now
    link.fallback = fallback
    if address is None and direction == DIR_IN:
        link.tenant = bool(conn_tenant(conn))
    core.links[link_id] = link
    conn.links[link_id] = link
    core._emit(conn.peer, LinkOpen(link_id, address))
    bind_endpoint(core, link, key)


def conn_tenant(conn: Connection) -> str:
    """The vhost whose address space a multiTenant listener's connection uses ("": none),
    the 10th item of what the worker said of the connection's security at its open."""
    info = conn.encrypted
    if isinstance(info, (list, tuple)) and len(info) > 9 and isinstance(info[9], str):
        return info[9]
    return ""


def bind_endpoint(core: Any, link: Link, key: Any) -> None:
    """Make an attached endpoint link a consumer (DIR_OUT) or producer (DIR_IN) of the
    address ``key`` (None: an anonymous sender): senders get their credit now if the address
    has a destination, else they wait for one."""
    direction = link.direction
    capacity = link.capacity
    interior = core.mode == MODE_INTERIOR
    if key is None or (direction == DIR_IN and interior
                       and (key[:1] == CLASS_ROUTER or key[:1] == CLASS_TOPOLOGICAL)):
        # an anonymous sender, or one targeted at another router (routed per delivery by
        # its link address, like an anonymous sender's `to`)
        link.credited = True
        core._credit(link, capacity)
        if link.conn.role == ROLE_INTERNAL:  # the agent's replies: not a LinkCredit (and a
            credit_in_slices(link)           # wake-up of the agent) per reply
        return
    addr = address_of(core, key)
    link.addr = addr
    addr.refs += 1
    if direction == DIR_OUT:
        addr.consumers.append(link)
        if addr.waiting or addr.fallback_for is not None:
            credit_waiting(core, addr)
        if not addr.announced and interior and (addr.cls == KEY_MOBILE or addr.cls == KEY_EDGE):
            announce(core, addr, True)
        if core.edge is not None:
            core.edge.address_changed(core, addr)
        return
    if (addr.consumers or (addr.remotes and reachable(core, addr))
            or (addr.fallback is not None and not link.fallback
                and has_destination(core, addr.fallback))
            or (addr.exchange is not None and addr.exchange.has_paths())):
        link.credited = True
        core._credit(link, capacity)
    else:
        addr.waiting.append(link)
    if core.edge is not None:
        core.edge.producer_bound(core, link, addr)


def attach_router_link(core: Any, conn: Connection, link_id: Any, direction: int, name: str,
                       presettled: Any, capacity: int, link_type: int) -> None:
    """A control or data link on an inter-router connection (interior mode).

    Data links get their priority by attach order, per direction (the connecting side
    creates them in ascending priority order); those past the tenth (the peer's streaming
    links: streamlinks.py) get priority 4 and carry only what comes on them, as in 1.19. Inbound router links get their whole
    capacity as credit at once, given back in slices as deliveries leave the core (see
    ``credit_batch``). Once both control links are attached the agent hears RouterLinkUp and
    starts its HELLOs on the connection.
    """
    link = Link(link_id, conn, direction, name, None, bool(presettled), capacity)
    link.rate_at = link.zero_at = core.now
    link.link_type = link_type
    link.router = True
    if link_type == LINK_DATA:
        if direction == DIR_IN:
            priority = conn.data_in
            conn.data_in += 1
        else:
            priority = conn.data_out
            conn.data_out += 1
        if priority >= PRIORITIES:
            link.priority = STREAM_LINK_PRIORITY
        else:
            link.priority = priority
            if direction == DIR_OUT and conn.data_links[priority] is None:
                conn.data_links[priority] = link
    else:
        link.priority = CONTROL_PRIORITY
        if direction == DIR_IN:
            conn.control_in = link
        else:
            conn.control_out = link
    core.links[link_id] = link
    conn.links[link_id] = link
    core._emit(conn.peer, LinkOpen(link_id, None))
    if direction == DIR_IN:
        link.credited = True
        core._credit(link, capacity)
        credit_in_slices(link)  # the sending router moves deliveries in batches
    check_router_up(core, conn)


def credit_in_slices(link: Link) -> None:
    """An inbound link credited its whole window gets credit back in slices of an eighth of
    it (core._replenish), not one per delivery: its sender (another router, the agent) then
    sends in batches instead of one per credit frame, and always keeps at least 7/8 of its
    window, so nothing can stall on the owed part."""
    link.credit_batch = link.capacity // 8 if link.capacity >= 8 else 1


# --- links the router attaches itself (auto-links, link routes) ----------------------------------
def open_link(core: Any, conn: Connection, direction: int, name: str, address: Any,
              source: Any, target: Any, settle: Any, owner: Any) -> Link:
    """Attach a link on ``conn`` from the router's side (AttachOut): ``address`` is the
    router's address for it (what attached_out binds it to; None for none), ``source`` and
    ``target`` the termini the peer is offered (ipc.TERMINUS_FIELDS), ``settle`` [snd, rcv]
    settle modes, ``owner`` what it is for (kept on the link, handed back by attached_out and
    detached_out). The link is ATTACHING until the peer's LinkAttached."""
    link_id = core.next_link_id
    core.next_link_id = link_id + 1
    link = Link(link_id, conn, direction, name, address, settle[0] == 1, conn.link_capacity)
    link.rate_at = link.zero_at = core.now
    link.attaching = True
    link.owner = owner
    link.source = source
    link.target = target
    link.settle = settle
    core.links[link_id] = link
    conn.links[link_id] = link
    if core.log_info:
        core.info_logs.append((LOG_LINK_ATTACHED, link, source, target))
    core._emit(conn.peer, AttachOut(link_id, conn.conn_id, direction, name, source, target,
                                    settle, conn.link_capacity))
    return link


def attached_out(core: Any, link: Link) -> None:
    """The peer answered a link the router attached (open_link). By default the link becomes a
    consumer or producer of its address, as an attached client link does. A link route's far
    end answers its client instead (linkroute.py); an owner with an ``attached(core, link)``
    method (an auto-link: autolinks.AutoLink) decides instead when it answers True."""
    if link.peer_link is not None:
        routed_attached(core, link)
        return
    owner = link.owner
    if owner is not None:
        hook = getattr(owner, "attached", None)
        if hook is not None and hook(core, link):
            return
    address = link.address
    key = None if address is None else phase_key(core.rules, key_of(core, address),
                                                 link.direction)
    if key is None and link.direction == DIR_OUT:
        return  # nothing to consume from: it stays attached without traffic
    bind_endpoint(core, link, key)


def detached_out(core: Any, link: Link, error: Any) -> None:
    """A link the router attached for an owner is gone (the peer detached or refused it, or
    its connection closed; ``error``: the condition text, "" for none). An owner with a
    ``detached(core, link, error)`` method (an auto-link) is told; otherwise nothing."""
    hook = getattr(link.owner, "detached", None)
    if hook is not None:
        hook(core, link, error)


def detach_own(core: Any, link: Link) -> None:
    """The router detaches a link it attached itself (an auto-link deleted or gone inactive,
    an idle streaming link scrubbed): no error; the core drops it."""
    link.owner = None
    core._emit(link.peer, DetachLink(link.link_id, "", ""))
    link.closed = True
    drop_link(core, link)
    core._record_gone("link", link)


def detach_offending(core: Any, link: Link, text: str) -> None:
    """A protocol error on a link: the peer detaches it with an error, the core drops it."""
    protocol_error(core, text)
    core._emit(link.peer, DetachLink(link.link_id, PROTOCOL_ERROR, text))
    link.closed = True
    drop_link(core, link)
    core._record_gone("link", link)


def detach_partner(core: Any, link: Link, condition: str, description: str,
                   closed: bool = True) -> None:
    """``link`` of a routed pair went away: its partner is detached toward its peer with
    ``condition`` ("" for an orderly detach), closed or not as ``link`` was, and dropped."""
    other = link.peer_link
    link.peer_link = None
    other.peer_link = None
    if other.closed:
        return
    core._emit(other.peer, DetachLink(other.link_id, condition, description, closed))
    other.closed = True
    drop_link(core, other)
    core._record_gone("link", other)


def drop_link(core: Any, link: Link) -> None:
    if link.blocked:  # no longer counted; the flag stays for its closing line (corelog)
        core.links_blocked -= 1
    if core.streams:  # messages still arriving from or going to it (streaming.py)
        drop_stream_link(core, link)
    if link.peer_link is not None:  # link-routed, its connection lost (a detach unpairs first)
        detach_partner(core, link, ROUTED_LINK_LOST[0], ROUTED_LINK_LOST[1])
    core.links.pop(link.link_id, None)
    link.conn.links.pop(link.link_id, None)
    addr = link.addr
    if link.router:  # not attached to any address
        _drop_router_link(core, link)
        return
    if link.direction == DIR_IN:
        if addr is not None:
            if link in addr.waiting:
                addr.waiting.remove(link)
            if core.edge is not None:
                core.edge.producer_dropped(core, link, addr)
            unref(core, addr)
        return
    if addr is None:  # a router-attached link never bound to an address
        if link.streaming:  # (an edge connection's: streamlinks.py)
            forget_stream_link(link)
        fail_outbound(core, link)
        return
    addr.consumers.remove(link)
    fail_outbound(core, link)
    if not addr.consumers and addr.held:
        release_held(core, addr)
    if not addr.consumers and addr.announced and addr.exchange is None:
        announce(core, addr, False)
    if core.edge is not None:
        core.edge.address_changed(core, addr)
    unref(core, addr)


def _drop_router_link(core: Any, link: Link) -> None:
    conn = link.conn
    if link.link_type == LINK_CONTROL:
        if conn.control_in is link:
            conn.control_in = None
        if conn.control_out is link:
            conn.control_out = None
            link.queue = deque()  # routing messages: raw payloads, nothing to settle
        router_down(core, conn)
    elif link.streaming:
        forget_stream_link(link)
    elif link.direction == DIR_OUT and conn.data_links[link.priority] is link:
        conn.data_links[link.priority] = None
    if link.direction == DIR_OUT:
        fail_outbound(core, link)


# --- router links up and down (the agent is told; its hello: peers.py) -------------------------
def check_router_up(core: Any, conn: Connection) -> None:
    """Tell the agent once a connection has both control links (and the agent is there)."""
    if (not conn.router_up and conn.control_in is not None and conn.control_out is not None
            and core.agent_peer is not None):
        conn.router_up = True
        core.neighbour_conns[conn.container] = conn
        core._emit(core.agent_peer, RouterLinkUp(conn.conn_id, conn.cost, conn.container))


def router_down(core: Any, conn: Connection) -> None:
    if conn.router_up:
        conn.router_up = False
        if core.neighbour_conns.get(conn.container) is conn:
            del core.neighbour_conns[conn.container]
        if core.agent_peer is not None:
            core._emit(core.agent_peer, RouterLinkDown(conn.conn_id))
