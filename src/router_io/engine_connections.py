"""Connection lifecycle at the worker: made, opened, refused, failed, dropped.

A connection accepted or made by a connector, the peer's open (policy, security facts,
inter-router cost and links) reported to the core as ConnOpened, a refusal before the core
hears of it, the isolation of an internal error to its one connection, the socket's end
(ConnClosed) and the core's CloseConnection.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

import traceback
from typing import Any, Optional

import proton
from cproton_ffi import ffi, lib
from proton import PropertyDict, symbol
from proton._data import dat2obj, obj2dat

from common import ipc
from common import failover
from common import policy as vpolicy
from router_io.auth_service import grant_settings
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import (
    ANONYMOUS_RELAY, EDGE, INTER_ROUTER, INTERNAL_ERROR, INVALID_FIELD, LOCAL_UNINIT, PN_NULL, PRODUCT,
    NOT_ALLOWED, STREAMING_LINKS, VERSION, _text, _utf8)
from router_io.engine_termini import _plain_properties
from router_io.engine_conn import Connection
from router_io.engine_lifecycle import CA_IGNORE, CE_CLOSE, connection_action
# --- end engine parts ---


# --- connections --------------------------------------------------------------------------
def new_connection(self, settings: dict, host: str, direction: str = "in") -> Connection:
    """A connection accepted on a listener ("in") or made by a connector ("out").

    The connecting side speaks first: an outgoing connection is opened at once, with the
    SASL credentials of its connector.
    """
    conn = Connection(self, self.new_id(), settings, host, direction)
    self.conns[conn.c_ptr] = conn
    self.conns_by_id[conn.conn_id] = conn
    if direction == "out":
        lib.pn_connection_set_hostname(
            conn.c_ptr, str(settings.get("host") or host.rsplit(":", 1)[0]).encode())
        _open_local(self, conn)
        self.dirty.add(conn)
    return conn


def _open_local(self, conn: Connection) -> None:
    """The router's open: container, capabilities and properties, written straight into
    proton's data trees (what proton's Python Connection.open encodes: the capabilities an
    array of symbols, the properties a map with symbol keys and conn-id a long), for an
    accepted connection; the rarer properties (inter-router cost, failover list) through
    proton's own encoder."""
    c_ptr = conn.c_ptr
    lib.pn_connection_set_container(c_ptr, self.router_id.encode())
    _put_capabilities(lib.pn_connection_offered_capabilities(c_ptr))
    _put_capabilities(lib.pn_connection_desired_capabilities(c_ptr))
    extra = {}
    if conn.role == INTER_ROUTER:
        extra[symbol("qd.annotations-version")] = 1
        local_cost = max(1, int(conn.settings.get("cost") or 1))
        if local_cost > 1:
            extra[symbol("qd.inter-router-cost")] = local_cost
    if conn.direction == "in" and conn.settings.get("failoverUrls"):
        try:  # a listener's failover list (checked when the listener was configured)
            extra[symbol(failover.KEY)] = [
                {symbol(k): v for k, v in entry.items()}
                for entry in failover.property_value(
                    failover.parse_urls(conn.settings["failoverUrls"]))]
        except ValueError as exc:
            self.log("error", f"[C{conn.conn_id}] bad failover list: {exc}")
    props = lib.pn_connection_properties(c_ptr)
    if extra:
        obj2dat(PropertyDict({symbol("product"): PRODUCT, symbol("version"): VERSION,
                              symbol("qd.conn-id"): conn.conn_id, **extra},
                             raise_on_error=False), props)
    else:
        lib.pn_data_clear(props)
        lib.pn_data_put_map(props)
        lib.pn_data_enter(props)
        lib.pn_data_put_symbol(props, _PRODUCT_KEY)
        lib.pn_data_put_string(props, _PRODUCT)
        lib.pn_data_put_symbol(props, _VERSION_KEY)
        lib.pn_data_put_string(props, _VERSION)
        lib.pn_data_put_symbol(props, _CONN_ID_KEY)
        lib.pn_data_put_long(props, conn.conn_id)
        lib.pn_data_exit(props)
    lib.pn_connection_open(c_ptr)


def _remote_properties(c_ptr: Any) -> Any:
    """The peer's open properties as proton's Python values (None when it sent none: most
    clients, read without a proton Data object)."""
    data = lib.pn_connection_remote_properties(c_ptr)
    lib.pn_data_rewind(data)
    if not lib.pn_data_next(data):
        lib.pn_data_rewind(data)
        return None
    lib.pn_data_rewind(data)
    return dat2obj(data)


def _pn_bytes(text: str) -> tuple:
    """A constant pn_bytes_t argument (its buffer kept alive by the module)."""
    raw = ffi.from_buffer(text.encode())
    return (len(raw), raw)


_PRODUCT_KEY, _PRODUCT = _pn_bytes("product"), _pn_bytes(PRODUCT)
_VERSION_KEY, _VERSION = _pn_bytes("version"), _pn_bytes(VERSION)
_CONN_ID_KEY = _pn_bytes("qd.conn-id")
_CAPABILITIES = (_pn_bytes(ANONYMOUS_RELAY), _pn_bytes(STREAMING_LINKS))


def _capabilities_tree() -> Any:
    """ANONYMOUS-RELAY and qd.streaming-links as an array of symbols, in a data tree of its
    own (made once; never freed)."""
    data = lib.pn_data(0)
    lib.pn_data_put_array(data, False, lib.PN_SYMBOL)
    lib.pn_data_enter(data)
    for cap in _CAPABILITIES:
        lib.pn_data_put_symbol(data, cap)
    lib.pn_data_exit(data)
    return data


_CAPABILITIES_TREE = _capabilities_tree()


def _put_capabilities(data: Any) -> None:
    """The capabilities (offered and desired) of every open: a copy of the tree made once."""
    lib.pn_data_copy(data, _CAPABILITIES_TREE)


def drop_connection(self, conn: Connection) -> None:
    """The socket is gone: forget the connection and tell the core (once)."""
    if conn.closed:
        return
    conn.closed = True
    self.needs_tick.discard(conn)
    self.conns.pop(conn.c_ptr, None)
    self.conns_by_id.pop(conn.conn_id, None)
    self.dirty.discard(conn)
    if conn.reported_open:  # first: the core must hear of it whatever happens below
        self.outbox.append(ipc.ConnClosed(conn.conn_id, f"{INTERNAL_ERROR}: {conn.failed}"
                                          if conn.failed else conn.error_text()))
    for link in list(conn.links.values()):
        _forget_link(self, link)
    lib.pn_connection_collect(conn.c_ptr, PN_NULL)
    lib.pn_transport_unbind(conn.t_ptr)
    conn.out_queue = ()
    # Let proton free the connection now (its sessions, links and pool of delivery objects,
    # which proton keeps at their peak count for reuse), even while something still holds
    # this Connection; the transport stays (the worker may still ask for error_text()).
    conn.router_session = None
    ffi.release(conn.c_ptr)
    conn.c_ptr = None
    # Break the Connection <-> Link cycle: without it every closed connection (its proton
    # transport, buffers and all) waits for a full GC pass, which in a busy worker comes
    # rarely, so RSS grows with connection churn.
    conn.links = {}


def tick_connections(self, now_ms: int, skip: Any = ()) -> int:
    """proton's tick (idle-timeout heartbeats, a silent peer's end) of the connections that
    have an idle timeout (``needs_tick``), not every connection: with ``idleTimeoutSeconds`` 0
    and peers that ask for none, there is no work, whatever the number of connections.
    ``skip``: connections not ticked now (a SASL relay still has their socket). Each ticked
    connection may have output (a heartbeat, a close): it is marked dirty. Returns the
    earliest deadline proton named (ms, 0: none)."""
    deadline = 0
    for conn in self.needs_tick:
        if skip and conn in skip:
            continue
        nxt = lib.pn_transport_tick(conn.t_ptr, now_ms)
        if nxt and (not deadline or nxt < deadline):
            deadline = nxt
        self.dirty.add(conn)
    return deadline


def release_memory(self, now: float) -> None:
    """Once a second: give the heap memory freed by closed connections, released
    messages... back to the OS (common.heap). Called by process_events."""
    self._trim_check = now + self.heap.interval
    self.heap.maybe_trim(now)


def event_failed(self, ev: Any, exc: BaseException) -> None:
    """Handling one proton event raised: close its connection (amqp:internal-error)."""
    conn = self.conns.get(lib.pn_event_connection(ev)) if ev else None
    if conn is None:
        self.log("error", "internal error handling an event of no known connection: "
                          + "".join(traceback.format_exception(exc)).rstrip())
        return
    fail_connection(self, conn, exc)


def effect_failed(self, effect: tuple, exc: BaseException) -> None:
    """Applying one effect from the core raised: close the connection it was for."""
    conn = None
    link = self.links.get(getattr(effect, "link_id", None))
    if link is not None:
        conn = link.conn
    elif hasattr(effect, "conn_id"):
        conn = self.conns_by_id.get(effect.conn_id)
    elif hasattr(effect, "dlv_id"):
        entry = (self.in_dlvs if type(effect) is ipc.UpdateIn else self.out_dlvs).get(
            effect.dlv_id)
        conn = entry[1].conn if entry is not None else None
    if conn is None:
        self.log("error", f"internal error applying {type(effect).__name__} of no known "
                 "connection: " + "".join(traceback.format_exception(exc)).rstrip())
        return
    fail_connection(self, conn, exc)


def fail_connection(self, conn: Connection, exc: BaseException) -> None:
    """Close ``conn`` with amqp:internal-error after ``exc``; the traceback is logged once.

    Its remaining input is ignored; its socket closes once the close frame is written, and
    drop_connection then tells the core (ConnClosed), which settles what it held."""
    if conn.failed or conn.closed:
        return
    conn.failed = f"{type(exc).__name__}: {exc}"[:200]
    self.log("error", f"[C{conn.conn_id}] internal error, closing the connection: "
             + "".join(traceback.format_exception(exc)).rstrip())
    try:
        c_ptr = conn.c_ptr
        if lib.pn_connection_state(c_ptr) & LOCAL_UNINIT:
            lib.pn_connection_open(c_ptr)
        _set_condition(lib.pn_connection_condition(c_ptr), INTERNAL_ERROR,
                       "internal error in the router")
        lib.pn_connection_close(c_ptr)
        lib.pn_transport_pending(conn.t_ptr)  # encodes the close frame now
    finally:  # ignore the rest of its input: the transport ends once its output is out
        lib.pn_transport_close_tail(conn.t_ptr)
        self.dirty.add(conn)


def _on_conn_open(self, c_ptr: Any) -> None:
    conn = self.conns.get(c_ptr)
    if conn is None or conn.reported_open:
        return
    try:
        container = _utf8(lib.pn_connection_remote_container(c_ptr)) or ""
    except ValueError as exc:
        _refuse_connection(self, conn, INVALID_FIELD, f"container-id {exc}")
        return
    if lib.pn_transport_get_remote_idle_timeout(conn.t_ptr):
        self.needs_tick.add(conn)  # the peer wants heartbeats: proton sends them on ticks
    mech, user = _peer_user(self, conn)  # SASL (or TLS) is done before the peer's open
    if (self.policy_db.enabled and conn.direction == "in"
            and conn.role in ("normal", "route-container", "edge")):
        # (1.19 polices every accepted connection but an inter-router one: an edge
        # router's uplink too, its links, its messages and their maxMessageSize)
        if not _policy_open(self, conn, c_ptr, user):
            return
    elif (self.policy_db.enabled and conn.direction == "out" and conn.settings.get(
            "policyVhost") and conn.role in ("normal", "route-container")):
        # a connector's policyVhost: its $connector group polices the peer's links
        wanted = str(conn.settings["policyVhost"])
        found = self.policy_db.connector_group(wanted)
        if found is None:
            self.policy_log("error", self.policy_db.connector_failure(conn.conn_id, wanted))
            _refuse_connection(self, conn, vpolicy.RESOURCE_LIMIT_EXCEEDED,
                               vpolicy.CONNECTION_DISALLOWED)
            return
        conn.policy_vhost, conn.policy = found[0].name, found[1]
        conn.policy_user, conn.policy_rhost = user, vpolicy.remote_ip(conn.host)
        conn.policy_hostname = _text(lib.pn_connection_remote_hostname(c_ptr)) or "(null)"
    elif conn.settings.get("multiTenant") and conn.direction == "in":
        conn.tenant = _text(lib.pn_connection_remote_hostname(c_ptr))
    if conn.auth_grant is not None:
        _apply_grant(self, conn, c_ptr, user)
    if lib.pn_connection_state(c_ptr) & LOCAL_UNINIT:
        _open_local(self, conn)
    conn.reported_open = True
    # what management shows (isEncrypted, sslProto, sslCipher, sslSsf, ssl,
    # isAuthenticated): [has TLS, encrypted, protocol, cipher, ssf, authenticated]
    security_info = _security_info(self, conn)
    # the peer's open properties ride along (7th item) for management's connection
    # 'properties', as plain values with string keys (1.19 shows symbol keys as strings)
    try:
        security_info.append(_plain_properties(
            _remote_properties(c_ptr)))
    except Exception:  # noqa: BLE001 - properties proton cannot decode: show none
        security_info.append({})
    # (8th item) whether management requests from this connection may change a
    # connection's adminStatus (its policy group's allowAdminStatusUpdate, as 1.19)
    security_info.append(conn.policy.allowAdminStatusUpdate if conn.policy is not None
                         else True)
    # 9th: may this connection create connection-scoped link routes (vhost policy's
    # allowDynamicLinkRoutes; management reads it, 403 when not, as 1.19)
    security_info.append(True if conn.policy is None
                         else bool(getattr(conn.policy, "allowDynamicLinkRoutes", True)))
    # 10th: the vhost of a multiTenant listener's connection (its address space: the
    # matched vhost's name, or the open's hostname), shown in 1.19's Connection Opened
    security_info.append(conn.tenant)
    conn.max_message_size = max_message_size(
        self, conn, user, _text(lib.pn_connection_remote_hostname(c_ptr)))
    inter_router = conn.role == INTER_ROUTER
    streaming_links = False
    if inter_router or conn.role == EDGE:  # a router peer: does it take streaming links?
        try:
            offered = conn.connection.remote_offered_capabilities or ()
            if isinstance(offered, proton.Array):
                offered = offered.elements
            elif not isinstance(offered, (list, tuple)):
                offered = (offered,)  # one symbol
            streaming_links = any(str(cap) == STREAMING_LINKS for cap in offered)
        except Exception:  # noqa: BLE001 - undecodable capabilities: none then
            pass
    if inter_router:  # the connection's cost: max(mine, the peer's)
        try:
            remote = _remote_properties(c_ptr) or {}
        except Exception:  # noqa: BLE001 - undecodable properties: none then
            remote = {}
        for key, value in remote.items():
            if str(key) == "qd.inter-router-cost":
                try:
                    conn.cost = max(conn.cost, min(int(value), 2 ** 31 - 1))
                except (TypeError, ValueError):
                    pass
    self.outbox.append(ipc.ConnOpened(
        conn.conn_id, conn.role, conn.direction, conn.host, container,
        conn.settings.get("name", ""), user, mech,
        security_info, conn.link_capacity, conn.cost, _policy_info(self, conn),
        streaming_links))
    if conn.direction == "out":
        # the peer's failover-server-list: the worker's connector takes it (connectors.py)
        try:
            remote = _remote_properties(c_ptr) or {}
            offered = next((v for k, v in remote.items() if str(k) == failover.KEY), None)
            conn.failover = failover.from_property(offered)
        except Exception:  # noqa: BLE001 - undecodable properties: no list then
            conn.failover = None
    if inter_router and conn.direction == "out":
        _open_router_links(self, conn)


def _apply_grant(self, conn: Connection, c_ptr: Any, user: str) -> None:
    """The address permissions an authentication service granted (authServicePlugin) police
    the client's links from now on: alone, or in place of its vhost user group's addresses
    (auth_service.grant_settings)."""
    settings = grant_settings(conn.auth_grant[1], conn.policy)
    if settings is None or settings is conn.policy:
        return
    if conn.policy is None:  # the names 1.19's policy lines give the connection
        conn.policy_user, conn.policy_rhost = user, vpolicy.remote_ip(conn.host)
        conn.policy_hostname = _text(lib.pn_connection_remote_hostname(c_ptr)) or "(null)"
    conn.policy = settings


def _refuse_connection(self, conn: Connection, condition: str, description: str) -> None:
    """Answer a peer's open with open + close(condition); the core never hears of it."""
    conn.refused = True
    self.log("warning", f"[C{conn.conn_id}] refusing connection from {conn.host}: "
                        f"{condition}: {description}")
    c_ptr = conn.c_ptr
    if lib.pn_connection_state(c_ptr) & LOCAL_UNINIT:
        lib.pn_connection_open(c_ptr)
    _set_condition(lib.pn_connection_condition(c_ptr), condition, description)
    lib.pn_connection_close(c_ptr)
    lib.pn_transport_pending(conn.t_ptr)  # encodes the open and close frames now
    lib.pn_transport_close_tail(conn.t_ptr)
    self.dirty.add(conn)


def _protocol_error(self, conn: Optional[Connection], description: str) -> None:
    """The peer's frames came in an order AMQP does not allow (engine_lifecycle.py has no
    entry for the event in the connection's state): close it with amqp:not-allowed."""
    if conn is None:
        self.log("warning", f"lifecycle event of no known connection: {description}")
        return
    _refuse_connection(self, conn, NOT_ALLOWED, description)


def _fx_close_connection(self, fx: ipc.CloseConnection) -> None:
    conn = self.conns_by_id.get(fx.conn_id)
    if connection_action(conn, CE_CLOSE) == CA_IGNORE:
        return
    _set_condition(lib.pn_connection_condition(conn.c_ptr), fx.condition, fx.description)
    lib.pn_connection_close(conn.c_ptr)
    self.dirty.add(conn)


# cross calls between engine parts (at the end: the pure build imports them after this part's
# own functions exist, so the parts may call each other)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_security import _peer_user, _security_info
from router_io.engine_policy import _policy_info, _policy_open, max_message_size
from router_io.engine_links import _forget_link, _open_router_links
from router_io.engine_dispositions import _set_condition
# --- end engine parts ---
