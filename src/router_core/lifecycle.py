"""Lifecycles of connections and links: open/close, attach/detach, as explicit transition tables.

Owns: what each ConnOpened, ConnClosed, LinkAttach, LinkDetach and LinkLost does, looked up in
the tables below by the state of the object it names and the event; which links a connection
of each role may attach (ATTACH_RULES); opening and closing connections. What an attached link
is bound to and what dropping one leaves behind (endpoint and router links, the links the router
attaches itself, detaching) is linkends.py's: the tables' actions call it.

A (state, event) without an entry, or a role or link type the core has no code for, is a
protocol error of the peer that sent it: the offending link is refused (or detached) or the
offending connection closed, with ``amqp:internal-error`` and a description, and the text is
kept for the core process to log (``core.errors``). It never raises: no peer input may stop
the core. The tables are complete for every code the IPC schema defines (tests check that).

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io, agent or
supervisor.
"""
from typing import Any

from router_core.addressing import FALLBACK_CAPABILITY, HEARTBEAT_ADDRESS, has_capability
from common.ipc import DIR_IN, TERMINUS_COORDINATOR, CloseConnection, DetachLink, LinkRefuse
from router_core.corelog import opened_text
from router_core.policycount import RESOURCE_LIMIT_EXCEEDED
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.linkroute import (
    answer_detach, answers_lost, await_answer, container_closed, container_opened,
    drop_conn_routes, route_attach, split_condition)
from router_core.records import (
    LINK_CONTROL, LINK_DATA, LINK_ENDPOINT, LINK_TYPE_CODES, LINK_TYPE_NAMES, LOG_CONN_CLOSED,
    LOG_CONN_OPENED, LOG_LINK_ATTACHED, LOG_LINK_DETACHED, LOG_LINK_LOST, MODE_EDGE, MODE_INTERIOR,
    ROLE_CODES, ROLE_EDGE, ROLE_INTER_ROUTER, ROLE_INTERNAL, ROLE_NAMES, ROLE_NORMAL,
    ROLE_ROUTE_CONTAINER, Connection)
from router_core.linkends import (
    PROTOCOL_ERROR, attach_endpoint, attach_router_link, attached_out, detach_offending,
    detach_partner, detached_out, drop_link, protocol_error, router_down)
from router_core.streaming import drop_stream_link
# --- end core parts ---

# qdrouterd -T: 1.19's test endpoints refuse these attaches (qd:forbidden) from clients; key ->
# (text for a sender, text for a receiver), None: allowed (agent/testhooks.py serves them)
_TEST = "M0org.apache.qpid.dispatch.router/test/"
_DENY = "Connectivity to the deny node is forbidden"
TEST_REFUSALS = {
    _TEST + "deny": (_DENY, _DENY),
    _TEST + "sink": (None, "Sink function only accepts incoming links"),
    _TEST + "discard": (None, "Discard function only accepts incoming links"),
    _TEST + "source": ("Source function only accepts outgoing links", None),
    _TEST + "source_ps": ("Source function only accepts outgoing links", None),
}


# Object states
ABSENT = 0      # the core has no such connection / link (never opened, or gone)
OPEN = 1        # a connection the core knows
ATTACHED = 1    # a link the core knows
ATTACHING = 2   # a link the router attached (AttachOut), the peer's attach not in yet
CONN_STATES = {ABSENT: "absent", OPEN: "open"}
LINK_STATES = {ABSENT: "absent", ATTACHED: "attached", ATTACHING: "attaching"}

# Events (the command that names the object)
EV_OPENED = 0   # ConnOpened
EV_CLOSED = 1   # ConnClosed
EV_ATTACH = 2   # LinkAttach
EV_DETACH = 3   # LinkDetach
EV_ATTACHED = 4  # LinkAttached (the peer's answer to an AttachOut)

# Actions
A_OPEN = 1               # register the connection (policy may deny it: CloseConnection)
A_REOPEN = 2             # a known id opened again: close the old one first, then A_OPEN
A_CLOSE = 3              # drop every link of it (their deliveries settle), router link down
A_FORGET = 4             # not known (denied by policy, closed already): release policy counts
A_ATTACH = 5             # go on to the link's own table
A_REFUSE_NO_CONN = 6     # LinkRefuse amqp:not-found
A_REFUSE_DUPLICATE = 7   # LinkRefuse amqp:internal-error
A_ATTACH_ENDPOINT = 8    # an endpoint link (attach_endpoint)
A_ATTACH_ROUTER = 9      # a control or data link of an inter-router connection
A_REFUSE_ROLE = 10       # LinkRefuse amqp:not-allowed: no links on such connections here
A_REFUSE_ROUTER_LINK = 11  # LinkRefuse amqp:not-allowed: router links on a client connection
A_REFUSE_ENDPOINT = 12   # LinkRefuse amqp:not-allowed: endpoint link on an inter-router one
A_DETACH = 13            # drop the link
A_IGNORE = 14            # nothing (a link refused at attach, or gone with its connection)
A_ATTACHED_OUT = 15      # the peer answered the router's attach: attached_out
A_DETACH_DUPLICATE = 16  # a second answer to the router's attach: detach, amqp:internal-error
A_ATTACH_EDGE = 17       # interior: an edge connection's link (edge.py first, else an endpoint)

# Connection: (state, event) -> action
CONN_TRANSITIONS = {
    (ABSENT, EV_OPENED): A_OPEN,
    (OPEN, EV_OPENED): A_REOPEN,
    (OPEN, EV_CLOSED): A_CLOSE,
    (ABSENT, EV_CLOSED): A_FORGET,
    (OPEN, EV_ATTACH): A_ATTACH,
    (ABSENT, EV_ATTACH): A_REFUSE_NO_CONN,
}

# Link: (state, event) -> action
LINK_TRANSITIONS = {
    (ABSENT, EV_ATTACH): A_ATTACH,   # -> ATTACH_RULES
    (ATTACHED, EV_ATTACH): A_REFUSE_DUPLICATE,
    (ATTACHED, EV_DETACH): A_DETACH,
    (ABSENT, EV_DETACH): A_IGNORE,
    (ATTACHING, EV_ATTACH): A_REFUSE_DUPLICATE,
    (ATTACHING, EV_ATTACHED): A_ATTACHED_OUT,
    (ATTACHING, EV_DETACH): A_DETACH,        # refused by the peer, or its connection failed
    (ABSENT, EV_ATTACHED): A_IGNORE,         # the router detached it before the answer came
    (ATTACHED, EV_ATTACHED): A_DETACH_DUPLICATE,
}

# Attach: (connection role, link type, interior mode) -> action
_CLIENT_ROLES = (ROLE_NORMAL, ROLE_ROUTE_CONTAINER, ROLE_INTERNAL)
ATTACH_RULES = {}
for _interior in (False, True):
    for _role in _CLIENT_ROLES:
        ATTACH_RULES[(_role, LINK_ENDPOINT, _interior)] = A_ATTACH_ENDPOINT
        ATTACH_RULES[(_role, LINK_CONTROL, _interior)] = A_REFUSE_ROUTER_LINK
        ATTACH_RULES[(_role, LINK_DATA, _interior)] = A_REFUSE_ROUTER_LINK
    # edge connections (1.19): endpoint links only; on an interior router edge.py serves
    # the downlink, address tracking and heartbeats first
    ATTACH_RULES[(ROLE_EDGE, LINK_ENDPOINT, _interior)] = (A_ATTACH_EDGE if _interior
                                                           else A_ATTACH_ENDPOINT)
    ATTACH_RULES[(ROLE_EDGE, LINK_CONTROL, _interior)] = A_REFUSE_ROUTER_LINK
    ATTACH_RULES[(ROLE_EDGE, LINK_DATA, _interior)] = A_REFUSE_ROUTER_LINK
ATTACH_RULES[(ROLE_INTER_ROUTER, LINK_ENDPOINT, True)] = A_REFUSE_ENDPOINT
ATTACH_RULES[(ROLE_INTER_ROUTER, LINK_CONTROL, True)] = A_ATTACH_ROUTER
ATTACH_RULES[(ROLE_INTER_ROUTER, LINK_DATA, True)] = A_ATTACH_ROUTER
ATTACH_RULES[(ROLE_INTER_ROUTER, LINK_ENDPOINT, False)] = A_REFUSE_ROLE
ATTACH_RULES[(ROLE_INTER_ROUTER, LINK_CONTROL, False)] = A_REFUSE_ROLE
ATTACH_RULES[(ROLE_INTER_ROUTER, LINK_DATA, False)] = A_REFUSE_ROLE


# --- connections ---------------------------------------------------------------------------------
def on_conn_opened(core: Any, peer: Any, cmd: Any) -> None:
    conn_id = cmd[0]
    state = OPEN if conn_id in core.conns else ABSENT
    action = CONN_TRANSITIONS.get((state, EV_OPENED))
    if action == A_REOPEN:
        _close(core, core.conns[conn_id])
    elif action != A_OPEN:
        _close_offending(core, peer, conn_id, f"ConnOpened for connection {conn_id} "
                                              f"({CONN_STATES[state]})")
        return
    role = ROLE_CODES.get(cmd[1], -1)
    if role < 0:
        _close_offending(core, peer, conn_id, f"connection {conn_id}: unknown role {cmd[1]!r}")
        return
    if cmd[11] is not None:  # policy: counted router-wide here; a denied one is closed
        reason = core.policy_counts.admit(conn_id, cmd[3], cmd[11])  # and never registered
        if reason is not None:
            core._emit(peer, CloseConnection(conn_id, RESOURCE_LIMIT_EXCEEDED, reason))
            return
    conn = Connection(peer, conn_id, role, *cmd[2:11])
    conn.opened_at = core.now
    conn.streaming_links = (role == ROLE_INTER_ROUTER or role == ROLE_EDGE) and bool(cmd[12])
    core.conns[conn_id] = conn
    if role == ROLE_INTERNAL:  # management hides them and finds them without a scan
        core.internal_conns[conn_id] = conn
    if core.log_info:
        core.info_logs.append((LOG_CONN_OPENED, conn, None, None))
    if role == ROLE_ROUTE_CONTAINER:
        container_opened(core, conn)
    if core.edge is not None:
        core.edge.conn_opened(core, conn)


def on_conn_closed(core: Any, peer: Any, cmd: Any) -> None:
    conn_id = cmd[0]
    conn = core.conns.get(conn_id)
    action = CONN_TRANSITIONS.get((ABSENT if conn is None else OPEN, EV_CLOSED))
    if action == A_FORGET:
        core.policy_counts.release(conn_id)
    elif action == A_CLOSE:
        _close(core, conn, bool(cmd[1]))  # an error: the connection was lost, not closed
    else:
        _close_offending(core, peer, conn_id, f"ConnClosed for connection {conn_id} "
                                              f"({CONN_STATES[ABSENT if conn is None else OPEN]})")


def _close(core: Any, conn: Connection, lost: bool = False) -> None:
    """Forget ``conn``: its links are dropped (their deliveries settle as for a lost receiver
    or sender), the agent hears RouterLinkDown, its policy counts are released."""
    core.policy_counts.release(conn.conn_id)
    del core.conns[conn.conn_id]
    core.internal_conns.pop(conn.conn_id, None)
    if conn.direction == "out" and conn.listener in core.connector_status:
        # a connector's connection: as 1.19, its connectionMsg stays the Connection Opened text
        # until an attempt fails (the worker's report after this keeps it, see below)
        core.connector_status[conn.listener] = ("CONNECTING", opened_text(conn),
                                                core.connector_status[conn.listener][2])
    links = list(conn.links.values())
    for link in links:  # first, so no effect goes to a link of this connection
        link.closed = True
    for link in links:
        drop_link(core, link)
        core._record_gone("link", link)
        if core.log_info:
            core.info_logs.append((LOG_LINK_LOST, link, lost, None))
    for link in links:
        if link.owner is not None:
            detached_out(core, link, "connection closed")
    router_down(core, conn)
    if core.lr.conn_routes:
        drop_conn_routes(core, conn)
    if core.lr.answers:
        answers_lost(core, conn)
    if conn.role == ROLE_ROUTE_CONTAINER:
        container_closed(core, conn)
    if core.edge is not None:
        core.edge.conn_closed(core, conn)
    core._record_gone("connection", conn)
    if core.log_info:
        core.info_logs.append((LOG_CONN_CLOSED, conn, None, None))


def _close_offending(core: Any, peer: Any, conn_id: Any, text: str) -> None:
    """A protocol error on a connection: the peer closes it (CloseConnection), the core
    forgets it now (its links' deliveries settle as for a lost connection)."""
    protocol_error(core, text)
    conn = core.conns.get(conn_id)
    core._emit(peer if conn is None else conn.peer,
               CloseConnection(conn_id, PROTOCOL_ERROR, text))
    if conn is not None:
        _close(core, conn)


def close_connection_of(core: Any, peer: Any, cmd: Any, text: str) -> None:
    """A command the core could not handle (coreproc caught the exception): close the
    connection it concerns, if it names one the core knows (by connection or link id)."""
    conn_id = None
    fields = getattr(type(cmd), "_fields", ())
    if fields[:1] == ("conn_id",):
        conn_id = cmd[0]
    elif fields[:2] == ("link_id", "conn_id"):
        conn_id = cmd[1]
    elif "link_id" in fields:
        link = core.links.get(cmd[fields.index("link_id")])
        if link is not None:
            conn_id = link.conn.conn_id
    if conn_id is not None and conn_id in core.conns:
        _close_offending(core, peer, conn_id, text)
    else:
        protocol_error(core, text)


# --- links ---------------------------------------------------------------------------------------
def link_state(link: Any) -> int:
    """ABSENT, ATTACHING or ATTACHED: the row of LINK_TRANSITIONS for ``link`` (None: absent)."""
    if link is None:
        return ABSENT
    return ATTACHING if link.attaching else ATTACHED


def on_attach(core: Any, peer: Any, cmd: Any) -> None:
    (link_id, conn_id, direction, name, address, dynamic, presettled, capacity, link_type,
     source, target, settle) = cmd
    conn = core.conns.get(conn_id)
    conn_state = ABSENT if conn is None else OPEN
    action = CONN_TRANSITIONS.get((conn_state, EV_ATTACH))
    if action == A_REFUSE_NO_CONN:
        core._emit(peer, LinkRefuse(link_id, "amqp:not-found", "unknown connection"))
        return
    if action != A_ATTACH:
        _refuse_offending(core, peer, link_id, f"LinkAttach {link_id} on connection {conn_id} "
                                               f"({CONN_STATES[conn_state]})")
        return
    state = link_state(core.links.get(link_id))
    action = LINK_TRANSITIONS.get((state, EV_ATTACH))
    if action == A_REFUSE_DUPLICATE:
        core._emit(conn.peer, LinkRefuse(link_id, "amqp:internal-error", "duplicate link id"))
        return
    if action != A_ATTACH:
        _refuse_offending(core, conn.peer, link_id, f"LinkAttach {link_id} "
                                                    f"({LINK_STATES[state]})")
        return
    type_code = LINK_TYPE_CODES.get(link_type, -1)
    action = ATTACH_RULES.get((conn.role, type_code, core.mode == MODE_INTERIOR), 0)
    if action == A_ATTACH_ENDPOINT and conn.role == ROLE_EDGE and core.mode != MODE_EDGE:
        action = A_REFUSE_ROLE  # a standalone router has no edge connections (1.19)
    if address == HEARTBEAT_ADDRESS and (action == A_ATTACH_ENDPOINT or action == A_ATTACH_EDGE):
        core.heartbeats.attach(core, conn, link_id, direction, name, presettled, capacity)
        return  # 1.19's heartbeat server, bound in every mode (edgeserver.py)
    if action == A_ATTACH_EDGE:
        if core.edge is not None and core.edge.attach(core, conn, link_id, direction, name,
                                                      address, presettled, capacity, source):
            link = core.links.get(link_id)
            if link is not None:
                link.source = source
                link.target = target
                link.settle = settle
                if core.log_info:
                    core.info_logs.append((LOG_LINK_ATTACHED, link, source, target))
            return
        action = A_ATTACH_ENDPOINT
    if action == A_ATTACH_ENDPOINT:
        if core.mode == MODE_EDGE and core.edge.defer_attach(core, peer, cmd):
            return  # an edge asks its interior first whether the address is link-routed
        if core.lr.addrs and route_attach(core, conn, link_id, direction, name, address,
                                          dynamic, presettled, capacity, source, target,
                                          settle):
            return  # link-routed (or refused: a route without destination)
        # 1.19: a terminus with the qd.fallback capability (the policy's allowFallbackLinks
        # was checked by the worker) is a fallback destination's receiver, or a sender whose
        # deliveries are never redirected
        terminus = target if direction == DIR_IN else source
        fallback = (terminus is not None and terminus.get("capabilities") is not None
                    and has_capability(terminus.get("capabilities"), FALLBACK_CAPABILITY))
        attach_endpoint(core, conn, link_id, direction, name, address, dynamic, presettled,
                        capacity, direction == DIR_IN and target is not None
                        and target.get("type") == TERMINUS_COORDINATOR, fallback)
        link = core.links.get(link_id)
        if link is not None:  # the peer's termini, as it sent them
            link.source = source
            link.target = target
            link.settle = settle
            if core.log_info:
                core.info_logs.append((LOG_LINK_ATTACHED, link, source, target))
    elif action == A_ATTACH_ROUTER:
        attach_router_link(core, conn, link_id, direction, name, presettled, capacity,
                           type_code)
        if core.log_info and link_id in core.links:
            core.info_logs.append((LOG_LINK_ATTACHED, core.links[link_id], source, target))
    elif action == A_REFUSE_ENDPOINT:
        if core.lr.addrs and route_attach(core, conn, link_id, direction, name, address,
                                          dynamic, presettled, capacity, source, target,
                                          settle):
            return  # a link-routed attach from another router (1.19 allows these only)
        core._emit(conn.peer, LinkRefuse(
            link_id, "amqp:not-allowed",
            "endpoint links are not allowed on inter-router connections"))
    elif action == A_REFUSE_ROLE:
        core._emit(conn.peer, LinkRefuse(
            link_id, "amqp:not-allowed",
            f"links on {ROLE_NAMES[conn.role]} connections are not supported by this router"))
    elif action == A_REFUSE_ROUTER_LINK:
        core._emit(conn.peer, LinkRefuse(
            link_id, "amqp:not-allowed",
            f"{LINK_TYPE_NAMES[type_code]} links are only allowed on inter-router connections"))
    else:
        _refuse_offending(core, conn.peer, link_id,
                          f"link {link_id}: no attach rule for a {link_type!r} link on a "
                          f"{ROLE_NAMES.get(conn.role, conn.role)} connection")


def _refuse_offending(core: Any, peer: Any, link_id: Any, text: str) -> None:
    """A protocol error in an attach: the link is refused with amqp:internal-error."""
    protocol_error(core, text)
    core._emit(peer, LinkRefuse(link_id, PROTOCOL_ERROR, text))


def on_detach(core: Any, peer: Any, cmd: Any) -> None:
    _link_gone(core, peer, cmd[0], bool(cmd[1]), cmd[2], False)


def on_link_lost(core: Any, peer: Any, cmd: Any) -> None:
    """LinkLost: the peer ended the session of the link, so no detach comes for it. Dropped as
    at a detach, except that a link-routed partner is detached with qd:routed-link-lost
    (drop_link does it), as 1.19 treats the links of a session its peer ended."""
    _link_gone(core, peer, cmd[0], True, "", True)


def _link_gone(core: Any, peer: Any, link_id: Any, closed: bool, error: str,
               lost: bool) -> None:
    link = core.links.get(link_id)
    state = link_state(link)
    action = LINK_TRANSITIONS.get((state, EV_DETACH))
    if action == A_DETACH:
        link.closed = True
        if link.peer_link is not None and not lost:  # link-routed: the other side gets it
            if core.streams:  # a message still arriving is aborted before the detach (1.19)
                drop_stream_link(core, link)
            await_answer(core, link, link.peer_link)  # (answered with the partner's answer)
            condition, description = split_condition(error)
            detach_partner(core, link, condition, description, closed)
        drop_link(core, link)
        core._record_gone("link", link)
        if core.log_info:
            core.info_logs.append((LOG_LINK_DETACHED, link, None, None))
        if link.owner is not None:
            detached_out(core, link, error)
    elif action == A_IGNORE:
        if core.lr.answers and answer_detach(core, link_id, closed, error, lost):
            return  # the answer to a detach passed on to it (linkroute.await_answer)
        if core.mode == MODE_EDGE:  # a client's attach may still wait for a lookup (edge.py)
            core.edge.cancel(link_id)
    else:
        text = f"{'LinkLost' if lost else 'LinkDetach'} {link_id} ({LINK_STATES[state]})"
        if link is None:  # nothing to drop; the peer detaches it if it has it
            protocol_error(core, text)
            core._emit(peer, DetachLink(link_id, PROTOCOL_ERROR, text))
        else:
            detach_offending(core, link, text)


def on_attached(core: Any, peer: Any, cmd: Any) -> None:
    link = core.links.get(cmd[0])
    state = link_state(link)
    action = LINK_TRANSITIONS.get((state, EV_ATTACHED))
    if action == A_ATTACHED_OUT:
        link.attaching = False
        link.remote_source = cmd[1]
        link.remote_target = cmd[2]
        link.remote_settle = cmd[3]
        attached_out(core, link)
    elif action == A_DETACH_DUPLICATE:
        detach_offending(core, link, f"LinkAttached {cmd[0]}: the link is attached already")
    elif action != A_IGNORE:
        text = f"LinkAttached {cmd[0]} ({LINK_STATES[state]})"
        if link is None:
            protocol_error(core, text)
            core._emit(peer, DetachLink(cmd[0], PROTOCOL_ERROR, text))
        else:
            detach_offending(core, link, text)


