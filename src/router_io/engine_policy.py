"""Vhost policy and maxMessageSize enforced at the worker (1.19's checks and log lines).

At a connection's open (user group, frame size, channel max, multiTenant), at a session's begin
(session count, window), at a link's attach (counts, addresses, capabilities), on a message of a
checked link (user-id proxy, anonymous sender's target) and on an oversize delivery. The policy
data and address rules are common/policy.py's; the connection counts are the core's.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

from typing import Any, Optional

from cproton_ffi import ffi, lib

from common import ipc
from common.tenant import tenant_address
from common import policy as vpolicy
from common.amqpscan import user_id as _message_user_id
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import (
    LOCAL_CLOSED, LOCAL_UNINIT, MESSAGE_SIZE_EXCEEDED, OVERSIZE_DESCRIPTION, _int, _text)
from router_io.engine_termini import _capabilities
from router_io.engine_records import Link
from router_io.engine_conn import Connection
# --- end engine parts ---


def set_policy(self, policy: Optional[dict], vhosts: Optional[list] = None) -> None:
    """The ``policy`` and ``vhost`` entities of the configuration (for maxMessageSize)."""
    self.policy = dict(policy or {})
    self.vhosts = list(vhosts or [])
    self.policy_db = vpolicy.PolicyDb(self.policy, self.vhosts)


def set_vhost(self, op: str, attrs: dict) -> None:
    """A vhost created, updated or deleted by management (PolicyError if refused).
    Connections already open keep the settings they opened with, as in 1.19."""
    name = str(attrs.get("hostname") or attrs.get("name") or "")
    if op == "delete":
        self.policy_db.remove(name)
        self.vhosts = [v for v in self.vhosts if str(v.get("hostname")) != name]
        return
    self.policy_db.add(vpolicy.Vhost(attrs))
    self.vhosts = [v for v in self.vhosts if str(v.get("hostname")) != name] + [dict(attrs)]


def max_message_size(self, conn: Connection, user: str, hostname: str) -> int:
    """maxMessageSize for an accepted connection, as Qpid Dispatch 1.19 resolves it: the
    policy's router-wide value (0: no limit), replaced by the listener's if it sets one;
    with ``enableVhostPolicy``, by the vhost's (the open's hostname, else the default
    vhost) and then by the user group's (the group listing the user, else ``$default``).
    An accepted edge connection (an edge router's uplink) has a limit only from the vhost
    policy that governs it, as in 1.19 (whose only limits are the vhost policy's)."""
    if conn.direction != "in" or conn.role not in ("normal", "route-container", "edge"):
        return 0
    if conn.role == "edge" and conn.policy is None:
        return 0
    size = _int(self.policy.get("maxMessageSize"))
    size = _int(conn.settings.get("maxMessageSize")) or size
    if conn.policy is not None:  # 1.19: the group's, else the vhost's, else the policy's
        vhost = self.policy_db.vhosts.get(conn.policy_vhost)
        if vhost is not None:
            if conn.policy.max_message_size is not None:
                return conn.policy.max_message_size
            if vhost.max_message_size is not None:
                return vhost.max_message_size
        return size
    if not self.policy.get("enableVhostPolicy") or not self.vhosts:
        return size
    by_name = {str(v.get("hostname") or v.get("name") or ""): v for v in self.vhosts}
    vhost = by_name.get(hostname or "")
    if vhost is None:
        vhost = by_name.get(str(self.policy.get("defaultVhost", "$default") or ""))
    if vhost is None:
        return size
    size = _int(vhost.get("maxMessageSize")) or size
    groups = vhost.get("groups") or {}
    chosen = None
    for settings in groups.values():
        users = settings.get("users") if isinstance(settings, dict) else None
        names = users.split(",") if isinstance(users, str) else list(users or [])
        if user in [str(n).strip() for n in names]:
            chosen = settings
            break
    if chosen is None:
        chosen = groups.get("$default")
    if isinstance(chosen, dict):
        size = _int(chosen.get("maxMessageSize")) or size
    return size


def _on_session_open(self, ssn: Any) -> None:
    if not lib.pn_session_state(ssn) & LOCAL_UNINIT:
        return
    conn = self.conns.get(lib.pn_session_connection(ssn))
    settings = conn.policy if conn is not None else None
    if settings is not None:
        if settings.max_sessions and conn.n_sessions >= settings.max_sessions:
            self.policy_log("info", f"[C{conn.conn_id}] DENY AMQP Begin Session due to session "
                                    f"limit. user: {conn.policy_user}, rhost: "
                                    f"{conn.policy_rhost}, vhost: {conn.policy_hostname}")
            self.outbox.append(ipc.PolicyEvent(conn.policy_vhost, "session", 1))
            # The open announced channel-max maxSessions - 1 (_policy_open), so a session past
            # the count came on a channel above it: a client that pipelined its begins before
            # the router's open arrived. A framing violation: the connection is closed, as
            # proton closes one whose begin is above the listener's channel-max (refusing the
            # session alone left the client's attach on it unanswered and the connection open).
            _refuse_connection(self, conn, "amqp:connection:framing-error",
                               f"remote channel is above negotiated channel_max "
                               f"{settings.max_sessions - 1}")
            return
        conn.n_sessions += 1
        if settings.max_session_window:
            lib.pn_session_set_incoming_capacity(ssn, settings.max_session_window)
    lib.pn_session_open(ssn)


def _on_session_close(self, ssn: Any) -> None:
    """The peer ended a session: its links are lost (_session_links_lost) and the session
    ended here too; the router's own session (AttachOut) is made anew for the next link."""
    if lib.pn_session_state(ssn) & LOCAL_CLOSED:
        return  # refused by policy (or closed by us): not counted
    conn = self.conns.get(lib.pn_session_connection(ssn))
    if conn is not None:
        if conn.policy is not None and conn.n_sessions > 0:
            conn.n_sessions -= 1
        _session_links_lost(self, conn, ssn)
    lib.pn_session_close(ssn)


def _policy_open(self, conn: Connection, c_ptr: Any, user: str) -> bool:
    """Vhost policy at an accepted connection's open (before this router's open goes out,
    so max-frame-size and channel-max follow the user group) for its ``user``
    (_peer_user). False: refused here (amqp:resource-limit-exceeded, as 1.19). The
    connection counts are the core's."""
    db = self.policy_db
    hostname = _text(lib.pn_connection_remote_hostname(c_ptr))
    rhost = vpolicy.remote_ip(conn.host)
    conn.policy_user, conn.policy_rhost = user, rhost
    conn.policy_hostname = hostname or "(null)"  # 1.19 prints a missing one as C does
    wanted = str(conn.settings.get("policyVhost") or "") or hostname
    vhost, group, settings, logs = db.lookup_user(user, rhost, wanted)
    for level, text in logs:
        self.policy_log(level, text)
    if settings is None:
        self.outbox.append(ipc.PolicyEvent(vhost.name if vhost is not None else "",
                                           "connection", 1))
        _refuse_connection(self, conn, vpolicy.RESOURCE_LIMIT_EXCEEDED,
                           vpolicy.CONNECTION_DISALLOWED)
        return False
    conn.policy = settings
    conn.policy_vhost = vhost.name
    if settings.max_frame:
        lib.pn_transport_set_max_frame(conn.t_ptr, settings.max_frame)
    if settings.max_sessions:
        lib.pn_transport_set_channel_max(conn.t_ptr, settings.max_sessions - 1)
    if conn.settings.get("multiTenant"):  # as 1.19: the open's hostname when that is the
        # vhost found, else the vhost's name (an alias, policyVhost, the default vhost)
        conn.tenant = hostname if vhost.name == hostname and hostname else vhost.name
    return True


def _policy_info(self, conn: Connection) -> Optional[list]:
    """ConnOpened.policy: what the core counts this connection against (None: nothing)."""
    if conn.direction != "in":
        return None
    db = self.policy_db
    settings = conn.policy
    if settings is None or not conn.policy_vhost:  # (an auth service's grant alone: no vhost)
        return [db.max_connections, None, conn.policy_user, vpolicy.remote_ip(conn.host),
                0, 0, 0]
    vhost = db.vhosts.get(conn.policy_vhost)
    vmax, umax, hmax = ((vhost.max_connections, vhost.max_per_user, vhost.max_per_host)
                        if vhost is not None else (65535, 65535, 65535))
    if settings.max_conn_user is not None:
        umax = settings.max_conn_user
    if settings.max_conn_host is not None:
        hmax = settings.max_conn_host
    return [db.max_connections, conn.policy_vhost, conn.policy_user, conn.policy_rhost,
            vmax, umax, hmax]


def _policy_link(self, l_ptr: Any, conn: Connection, plink: Any, direction: int,
                 address: Optional[str]) -> bool:
    """Vhost policy at a link attach (1.19's checks and log lines); False: detached here
    with amqp:unauthorized-access (or resource-limit-exceeded for a count)."""
    settings = conn.policy
    who = (f"for user '{conn.policy_user}', rhost '{conn.policy_rhost}', vhost "
           f"'{conn.policy_hostname}'")
    sender = direction == ipc.DIR_IN  # the client sends
    kind = "sender" if sender else "receiver"
    count = sum(1 for lk in conn.links.values() if lk.direction == direction)
    limit = settings.max_senders if sender else settings.max_receivers
    condition, text = vpolicy.UNAUTHORIZED_ACCESS, None
    if count >= limit:
        condition = vpolicy.RESOURCE_LIMIT_EXCEEDED
        text = f"DENY AMQP Attach {kind} {who} based on max{kind.title()}s limit"
    elif not sender and plink.remote_source.dynamic:
        if not settings.allowDynamicSource:
            text = f"DENY AMQP Attach receiver dynamic source {who},"
    elif address:
        terminus = plink.remote_target if sender else plink.remote_source
        bad_cap = settings.check_capabilities(_capabilities(terminus))
        if bad_cap:
            text = (f"DENY AMQP Attach {kind} link '{address}' {who}.  {bad_cap} capability "
                    "not permitted")
        elif not settings.approve_address(conn.policy_user, address, source=not sender):
            text = (f"DENY AMQP Attach {kind} link '{address}' {who} based on link "
                    f"{'target' if sender else 'source'} name")
    elif sender:
        if not settings.allowAnonymousSender:
            text = f"DENY AMQP Attach anonymous sender {who}"
    else:
        text = f"DENY AMQP Attach receiver link '' {who}"
    if text is None:
        return True
    self.policy_log("info", f"[C{conn.conn_id}] {text}")
    self.outbox.append(ipc.PolicyEvent(conn.policy_vhost, kind, 1))
    _set_condition(lib.pn_link_condition(l_ptr), condition, vpolicy.LINK_DISALLOWED)
    lib.pn_link_open(l_ptr)
    lib.pn_link_close(l_ptr)
    self.dirty.add(conn)
    return False


def _police_transfer(self, link: Link, d_ptr: Any, scan: Any, payload: Any,
                     to: Optional[str]) -> Any:
    """A message on a link with ``check`` set: the user-id must be the connection's user
    unless allowUserIdProxy; a multiTenant connection's 'to' goes into its vhost's address
    space; an anonymous sender's 'to' (so, the tenant's: 1.19 approves that) must be an
    allowed target. Returns the 'to' to route by, or False when the delivery was rejected
    (amqp:unauthorized-access)."""
    conn = link.conn
    if conn.tenant and link.anonymous and to is not None and (
            scan.ma_to is None or conn.strip_in):
        # 1.19 puts 'to' in the vhost's space (not _local/, _topo/, _edge/), and its policy
        # approves that address as a target; an x-opt-qd.to the peer sent (its listener does
        # not strip annotations in) is routed and approved as it is
        to = tenant_address(conn.tenant, to)
    settings = conn.policy
    if settings is not None:
        description = None
        if not settings.allowUserIdProxy:
            uid = _message_user_id(payload, scan.ma_end)
            if uid is not None and uid != conn.policy_user.encode():
                description = "user_id proxy violation"
        if description is None and link.anonymous and to is not None:
            ok = settings.approve_address(conn.policy_user, to, source=False)
            self.policy_log("trace" if ok else "info",
                            f"[C{conn.conn_id}] {'ALLOW' if ok else 'DENY'} AMQP message to "
                            f"'{to}' for user '{conn.policy_user}', rhost "
                            f"'{conn.policy_rhost}', vhost '{conn.policy_hostname}' based on "
                            "target address")
            if not ok:
                description = "policy violation on target"
        if description is not None:
            _reject_local(self, d_ptr, vpolicy.UNAUTHORIZED_ACCESS, description)
            lib.pn_link_flow(link.ptr, 1)  # the core never saw it: its credit comes back
            self.dirty.add(conn)
            return False
    return to


def _oversize(self, d_ptr: Any, link: Link) -> bool:
    """maxMessageSize: False if the delivery is within the limit. Otherwise its bytes are
    discarded as they come; once it is complete it is settled REJECTED
    (amqp:link:message-size-exceeded), its link closed and the connection closed
    (amqp:connection:forced), as Qpid Dispatch 1.19 does."""
    key = int(ffi.cast("uintptr_t", d_ptr))
    l_ptr = link.ptr
    if key not in self.oversize:
        if lib.pn_delivery_pending(d_ptr) <= link.max_size:
            return False
        self.oversize[key] = True
    buf = self._recv_buf
    while lib.pn_delivery_pending(d_ptr) > 0:
        if lib.pn_link_recv(l_ptr, ffi.from_buffer(buf), len(buf)) <= 0:
            break
    if lib.pn_delivery_partial(d_ptr) and not lib.pn_delivery_aborted(d_ptr):
        return True  # the rest is discarded as it arrives
    del self.oversize[key]
    lib.pn_link_advance(l_ptr)
    conn = link.conn
    self.log("info", f"[C{conn.conn_id}] DENY AMQP Transfer maxMessageSize exceeded "
                     f"({link.max_size} octets): link {link.link_id} and connection closed")
    self.outbox.append(ipc.PolicyEvent(conn.policy_vhost, "maxMessageSize", 1))
    _reject_local(self, d_ptr, MESSAGE_SIZE_EXCEEDED, OVERSIZE_DESCRIPTION)
    _forget_link(self, link)
    conn.links.pop(link.ptr, None)
    self.outbox.append(ipc.LinkDetach(link.link_id, True,
                                      f"{MESSAGE_SIZE_EXCEEDED}: {OVERSIZE_DESCRIPTION}"))
    lib.pn_link_close(l_ptr)
    _set_condition(lib.pn_connection_condition(conn.c_ptr), "amqp:connection:forced",
                   OVERSIZE_DESCRIPTION)
    lib.pn_connection_close(conn.c_ptr)
    self.dirty.add(conn)
    return True


# cross calls between engine parts (at the end: the pure build imports them after this part's
# own functions exist, so the parts may call each other)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_connections import _refuse_connection
from router_io.engine_links import _forget_link, _session_links_lost
from router_io.engine_deliveries import _reject_local
from router_io.engine_dispositions import _set_condition
# --- end engine parts ---
