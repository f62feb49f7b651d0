"""One AMQP connection of a worker: proton transport + connection, bytes in and out.

``Connection`` binds a proton transport (TLS, then SASL, as 1.19 sets them up) to a proton
connection and gives the worker loop its byte I/O (push, output, consumed, tick) with the SASL
front-door guard (frameguard.py) and the outbound byte budget. What happens on its events is the
engine's (engine_connections.py and the other parts).

Part of the compiled engine (setup.py ENGINE_PARTS). Must not import zmq, sockets or selectors.
"""

from collections import deque
from typing import Callable, Optional

import cproton
import proton
from cproton_ffi import ffi, lib

from common import msglog, security
from common import policy as vpolicy
from router_io import saslimpl
from router_io.frameguard_select import guard as frameguard  # (compiled when built)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import (
    INTER_ROUTER, INTERNAL_ERROR, OUT_BUDGET, PN_NULL, PN_SASL_OK, _condition_text, _key,
    _pn_transport_capacity, _pn_transport_closed, _pn_transport_peek_into, _pn_transport_pending,
    _pn_transport_pop, _pn_transport_push_from)
# --- end engine parts ---


class Connection:
    """One AMQP connection: a proton transport and connection bound together, server side."""

    def __init__(self, engine: "WorkerEngine", conn_id: int, settings: dict, host: str,
                 direction: str) -> None:
        self.engine = engine
        self.conn_id = conn_id
        self.settings = settings
        self.host = host
        self.direction = direction
        self.role = settings.get("role", "normal")
        self.failover = None  # an outgoing one: the failover list its peer's open offered
        self.link_capacity = int(settings.get("linkCapacity") or 250)
        self.cost = max(1, int(settings.get("cost") or 1))  # inter-router: negotiated at open
        strip = str(settings.get("stripAnnotations") or "both")
        # Router annotations (x-opt-qd.*) from/to this connection: stripped on the way in
        # (ignored, removed) and/or on the way out; "no" adds ingress and trace on egress.
        # Inter-router and edge connections never strip: the annotations are what routers
        # route by (1.19 ignores stripAnnotations on both).
        router_conn = self.role == INTER_ROUTER or self.role == "edge"
        self.strip_in = not router_conn and strip in ("in", "both")
        self.strip_out = not router_conn and strip in ("out", "both")
        # proton's transport and connection through its C API (cffi), not its Python wrapper
        # objects: a wrapper costs tens of microseconds and a kilobyte or more a connection;
        # the rare paths that want one (TLS, the frame tracer, sessions the router begins)
        # make it on demand (``transport``, ``connection``). ffi.gc owns each C object's
        # reference, as the wrapper did: the connection's is dropped with the connection
        # (drop_connection), the transport's with this record.
        t_ptr = self.t_ptr = ffi.gc(lib.pn_transport(), lib.pn_decref)
        self._transport = None
        if direction == "in":
            lib.pn_transport_set_server(t_ptr)
        lib.pn_transport_set_max_frame(t_ptr, int(settings.get("maxFrameSize") or 16384))
        # maxSessions is the open's channel-max + 1 (as 1.19; 32768 -> 32767 by default); a
        # peer whose begin names a higher channel is closed by proton (framing-error)
        sessions = int(settings.get("maxSessions") or 32768)
        if lib.pn_transport_set_channel_max(t_ptr, min(max(sessions, 1), 32768) - 1) < 0:
            raise ValueError(f"channel-max {sessions - 1} refused by proton")
        idle = int(settings.get("idleTimeoutSeconds", 16) or 0)
        if idle:  # proton's idle timeout runs on ticks: the engine ticks this one (tick())
            lib.pn_transport_set_idle_timeout(t_ptr, idle * 1000)
            engine.needs_tick.add(self)
        # TLS (proton's SSL layer) first, then SASL (Cyrus), as Qpid Dispatch 1.19 sets them up
        self.ssl: Optional[proton.SSL] = None
        self.ssl_profile: Optional[dict] = None  # the sslProfile's attributes (uidFormat...)
        ssl_error = ""
        if settings.get("sslProfile"):
            try:
                engine.setup_ssl(self, settings, direction)
            except Exception as exc:  # noqa: BLE001 - this connection is refused, nothing else
                ssl_error = f"TLS set-up failed: {exc}"
        # a listener whose saslPlugin names an authServicePlugin: the worker relays the
        # client's SASL to the service (auth_relay.py) and hands this transport, made without
        # SASL, only the AMQP bytes that follow; auth_grant is set before they come
        relayed = direction == "in" and bool(settings.get("saslPlugin"))
        self.auth_grant = None  # (mechanism, auth_service.AuthGrant) of a relayed client
        self.sasl = None if relayed else lib.pn_sasl(t_ptr)  # proton's pn_sasl_t
        sasl = self.sasl
        if sasl is not None and direction == "in":
            server, builtin = saslimpl.for_listener(settings, engine.sasl_config)
            if builtin:  # proton's built-in SASL where it answers as Cyrus would (ANONYMOUS
                saslimpl.use_builtin(t_ptr)  # only): no Cyrus context a connection
            saslimpl.apply(t_ptr, sasl, server)
        elif sasl is not None:
            mechs = settings.get("saslMechanisms")
            if mechs:
                lib.pn_sasl_allowed_mechs(sasl, str(mechs).encode())
            lib.pn_sasl_set_allow_insecure_mechs(sasl, True)  # 1.19: PLAIN without TLS
        c_ptr = self.c_ptr = ffi.gc(lib.pn_connection(), lib.pn_decref)
        if direction == "out":  # before bind: proton's SASL client reads them from there
            if settings.get("saslUsername"):
                lib.pn_connection_set_user(c_ptr, str(settings["saslUsername"]).encode())
            if settings.get("saslPassword"):
                try:  # env:, file:, pass: or the text (checked when configured)
                    lib.pn_connection_set_password(c_ptr, security.resolve_password(
                        settings["saslPassword"], allow_literal=False).encode())
                except ValueError as exc:
                    engine.log("error", f"[C{conn_id}] saslPassword of connector "
                                        f"{settings.get('name')}: {exc}")
        lib.pn_connection_collect(c_ptr, engine._coll)
        lib.pn_transport_bind(t_ptr, c_ptr)
        if engine.frame_trace is not None:  # PROTOCOL trace: from the first (SASL) frame on
            self.trace_frames(engine.frame_trace)
        self.t_key = _key(t_ptr)  # the transport as a hot pointer (the byte I/O below)
        self.links: dict = {}  # link ptr -> Link
        self.reported_open = False
        self.closed = False
        # outbound byte budget (see OUT_BUDGET): bytes proton may still take before deliveries
        # wait in out_queue as [link, dlv_id, settled, payload, offset, d_ptr, state]
        self.out_budget = OUT_BUDGET
        self.out_room = OUT_BUDGET
        self.out_queue: deque | tuple = ()  # a deque from the first that waits (_waiting)
        # Q2: streamed inbound deliveries of this connection (``streams``) and those of them
        # past their window (``q2``); its socket is not read while every one is (q2_held(),
        # the worker watches engine.q2_changed)
        self.q2 = 0
        self.streams = 0
        self.q2_armed_held = False  # what the worker's poller was last told (worker.py)
        # maxMessageSize of this connection (policy, listener, vhost), set when it opens
        self.max_message_size = 0
        # vhost policy (common/policy.py): the user group's settings when the connection is
        # policed, its vhost, user and remote address; multiTenant: the address space prefix
        self.policy: Optional[vpolicy.GroupSettings] = None
        self.policy_vhost = ""
        # the open's hostname, which 1.19's Begin/Attach/message policy lines call the vhost
        self.policy_hostname = ""
        self.policy_user = ""
        self.policy_rhost = ""
        self.n_sessions = 0
        self.tenant = ""
        self.forced_trace: Optional[Callable[[int, str], None]] = None  # enableProtocolTrace
        # messageLoggingComponents as bits (common/msglog.py), and what the per-message paths
        # test: those bits while MESSAGE trace is on, else 0 (set_message_trace)
        self.msg_log_bits = msglog.component_bits(settings.get(msglog.ATTRIBUTE))
        self.msg_log = self.msg_log_bits if engine.msg_trace is not None else 0
        self.failed = False  # closed by this router after an internal error (logged once)
        self.refused = False  # refused before the core heard of it (engine_lifecycle.py)
        self.router_session = None  # the session of the links the core attaches (AttachOut)
        # An accepted connection's bytes pass the SASL guard until the client's SASL exchange
        # is over (frameguard.py: proton crashes on some sequences); then they go straight to
        # proton and established connections pay one test. Without a guard and not
        # unguarded, input is dropped (after a refused frame or a failed SASL exchange).
        self.guard: Optional[frameguard.SaslGuard] = None
        self.unguarded = True
        if direction == "in" and not relayed:  # (the relay checks its SASL frames itself)
            self.guard = frameguard.SaslGuard()
            self.unguarded = False
        if ssl_error:
            self.refuse(INTERNAL_ERROR, ssl_error)

    @property
    def transport(self) -> proton.Transport:
        """proton's Python object of the transport, made when a rare path wants one (TLS, the
        frame tracer); the per-connection paths call proton's C API with ``t_ptr``."""
        if self._transport is None:
            self._transport = proton.Transport.wrap(self.t_ptr)
        return self._transport

    @property
    def connection(self) -> Optional[proton.Connection]:
        """proton's Python object of the connection (sessions the router begins, a close at
        shutdown), made on demand; None once the connection is dropped."""
        if self.c_ptr is None:
            return None
        return proton.Connection.wrap(self.c_ptr)

    def trace_frames(self, trace: Optional[Callable[[int, str], None]]) -> None:
        """PROTOCOL trace: proton's text of every frame (``0 -> @attach(18) [...]``) goes to
        ``trace(conn_id, text)``, as 1.19's transport tracer; None turns it off."""
        if trace is None:
            self.transport.trace(proton.Transport.TRACE_OFF)
            return
        conn_id = self.conn_id
        self.transport.trace(proton.Transport.TRACE_FRM)
        self.transport.tracer = lambda transport, text: trace(conn_id, text)

    # --- bytes in and out (the worker loop calls these) ---------------------------------------
    def q2_held(self) -> bool:
        """Its socket is not read: every streamed inbound delivery of it is past its window
        (one that is not may be what the others wait for; its bytes must come in)."""
        return self.q2 > 0 and self.q2 >= self.streams

    def capacity(self) -> int:
        return _pn_transport_capacity(self.t_key)

    def push(self, data: bytes | bytearray | memoryview, size: int) -> None:
        if self.unguarded:
            if size:
                _pn_transport_push_from(self.t_key, data, size)
        else:  # the SASL guard's (or, after a failed exchange, nothing)
            self._guarded_push(data, size)

    def _guarded_push(self, data: bytes | bytearray | memoryview, size: int) -> None:
        guard = self.guard
        if not size or guard is None:
            return
        try:
            checked = guard.feed(memoryview(data)[:size])
        except frameguard.FrameError as exc:
            self.guard = None  # nothing more from this client reaches proton
            self.refuse(exc.condition, exc.description)
            return
        if guard.done:
            self.guard = None
            self.unguarded = True  # straight to proton from now on
        sasl = lib.pn_sasl(self.t_ptr) if guard.frames else PN_NULL
        # up to each SASL frame's end in one piece (a header before it with it), then the
        # outcome; once it is OK, what follows the last SASL frame is AMQP: in one piece too
        start, outcome = 0, None
        if sasl != PN_NULL:
            for end in guard.sasl_ends:
                if not self._push_all(checked[start:end]):
                    return
                start = end
                outcome = lib.pn_sasl_outcome(sasl)
                if outcome > PN_SASL_OK:
                    self._sasl_failed()
                    return
        if start >= len(checked):
            return
        if outcome == PN_SASL_OK:
            self._push_all(checked[start:])
            return
        # no outcome yet: the rest one header or frame at a time (see frameguard.units())
        for unit in frameguard.units(checked[start:]):
            if not self._push_all(unit):
                return
            if sasl != PN_NULL and lib.pn_sasl_outcome(sasl) > PN_SASL_OK:
                self._sasl_failed()
                return

    def _sasl_failed(self) -> None:
        """Authentication failed: proton answers with its outcome and closes; anything more
        the client sent must never reach it (proton 0.40 crashes on some)."""
        self.guard = None  # (and not unguarded: the rest is dropped)
        lib.pn_transport_pending(self.t_ptr)  # encodes the sasl-outcome first
        lib.pn_transport_close_tail(self.t_ptr)

    def _push_all(self, data: bytes) -> bool:
        """Push ``data`` into proton as far as its input capacity goes; False when it ran
        out (the rest is dropped, as any input proton cannot take)."""
        pos, end = 0, len(data)
        while pos < end:
            cap = self.capacity()
            if cap <= 0:
                return False
            n = min(cap, end - pos)
            _pn_transport_push_from(self.t_key, data[pos:pos + n], n)
            pos += n
        return True

    def refuse(self, condition: str, description: str, log: bool = True) -> None:
        """Close the transport at once (no AMQP close possible or wanted) with a condition;
        ``log``: say so at warning (else only the worker's line when the socket closes)."""
        self.refused = True
        if log:
            self.engine.log("warning", f"[C{self.conn_id}] closing connection from "
                                       f"{self.host}: {condition}: {description}")
        cond = lib.pn_transport_condition(self.t_ptr)
        if not lib.pn_condition_is_set(cond):
            cproton.pn_condition_set_name(cond, condition)
            cproton.pn_condition_set_description(cond, description)
        lib.pn_transport_close_tail(self.t_ptr)
        lib.pn_transport_close_head(self.t_ptr)
        self.engine.dirty.add(self)

    def close_input(self) -> None:
        lib.pn_transport_close_tail(self.t_ptr)

    def close_output(self) -> None:
        lib.pn_transport_close_head(self.t_ptr)

    def pending(self) -> int:
        return _pn_transport_pending(self.t_key)

    def output(self, buf: bytearray) -> int:
        """Copy up to len(buf) pending output bytes into ``buf``; return how many (-1 at EOS)."""
        n = _pn_transport_pending(self.t_key)
        if n <= 0:
            return n
        n = min(n, len(buf))
        _pn_transport_peek_into(self.t_key, buf, n)
        return n

    def consumed(self, n: int) -> None:
        _pn_transport_pop(self.t_key, n)
        room = self.out_room + n
        self.out_room = room if room < self.out_budget else self.out_budget
        if self.out_queue and room * 2 >= self.out_budget:
            self.engine.resume_output(self)

    def is_closed(self) -> bool:
        return bool(_pn_transport_closed(self.t_key))

    def error_text(self) -> str:
        # raw: proton's descriptions can quote peer bytes (e.g. an unknown SASL mechanism)
        return _condition_text(lib.pn_transport_condition(self.t_ptr))


def _waiting(conn: Connection) -> deque:
    """``conn``'s out_queue, to append to: a deque made when the first delivery waits (most
    connections never queue one, and an empty deque is 760 bytes)."""
    queue = conn.out_queue
    if type(queue) is not deque:
        queue = conn.out_queue = deque()
    return queue
