"""The AMQP side of an I/O worker: proton's engine driven through its raw C bindings.

``WorkerEngine`` owns every proton object of one worker (transports, connections, sessions,
links, deliveries) and translates between proton events and the IPC messages of ``common.ipc``:

* proton events (a remote attach, a complete delivery, a disposition, a flow) become commands in
  ``self.outbox`` for the core (:meth:`WorkerEngine.process_events`);
* effects from the core (open this link, grant credit, send these bytes, settle that delivery)
  are applied to the engine with :meth:`WorkerEngine.apply`.

It owns no sockets: the worker loop feeds received bytes in with ``Connection.push`` and takes
bytes to write with ``Connection.output``. That keeps it testable by pumping bytes between a
proton client engine and this one in memory.

This module is the engine's state and its two dispatchers; the work is done by the engine parts,
one concern each (router_io/DESIGN.md has the map): engine_proton (proton calls, constants),
engine_termini, engine_records (Link, InStream, OutStream), engine_conn (Connection: bytes in
and out), engine_security (TLS, SASL), engine_policy (vhost policy, maxMessageSize),
engine_connections (connection and session lifecycle), engine_links (attach, flow, detach),
engine_deliveries (whole messages in and out), engine_dispositions (states, settlement),
engine_stream_in / engine_stream_out (streamed deliveries, Q2). Their functions take the
WorkerEngine as ``self`` (they were its methods: a hunk of one ports unchanged).

One source, two builds. The parts are the pure-Python reference AND the source of the compiled
build ``router_io._engine``: setup.py concatenates ENGINE_PARTS (this file last) without the
``engine parts`` import blocks into one module and compiles it in Cython's pure-Python mode next
to ``cython/_engine.pxd``, which makes ``WorkerEngine`` a final cdef class and the functions of
the parts cdef/cpdef functions with a typed ``WorkerEngine self``: every call on a delivery's
path stays a C call, as when they were methods of one class.

Must not import zmq, sockets or selectors.
"""

import time
from typing import Any, Callable, Optional

import proton
from cproton_ffi import lib

from common import ipc
from common.heap import HeapTrimmer
from common.ipc import (
    Deliver, DeliverChunk, Drained, LinkCredit, RouterDeliver, SettleOut, StreamAck,
    StreamDeliver, UpdateIn)
from common import policy as vpolicy
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_lifecycle import (
    CA_BEGIN, CA_CLOSE_LOCAL, CA_END, CA_IGNORE, CA_LINK, CA_OPEN, CE_ATTACH, CE_BEGIN,
    CE_DETACH, CE_END, CE_REMOTE_CLOSE, CE_REMOTE_OPEN, LA_ANSWER, LA_ATTACH, LA_DETACH,
    LE_ATTACH, LE_DETACH, LifecycleError, connection_action, link_action)
from router_io.engine_proton import (
    E_CONN_REMOTE_CLOSE, E_CONN_REMOTE_OPEN, E_DELIVERY, E_LINK_FLOW, E_LINK_REMOTE_CLOSE,
    E_LINK_REMOTE_DETACH, E_LINK_REMOTE_OPEN, E_SESSION_REMOTE_CLOSE, E_SESSION_REMOTE_OPEN,
    LOCAL_CLOSED, MESSAGE_SIZE_EXCEEDED, OUT_BUDGET, OVERSIZE_DESCRIPTION, PRODUCT, RARE_EVENTS,
    VERSION, _cdata, _key, _pn_collector_peek, _pn_collector_pop, _pn_event_delivery,
    _pn_event_link, _pn_event_type)
from router_io.engine_records import Link
from router_io.engine_conn import Connection
from router_io.engine_security import (
    set_frame_trace, set_message_trace, set_security, set_ssl_profile, setup_ssl, trace_connection)
from router_io.engine_policy import (
    _on_session_close, _on_session_open, max_message_size, set_policy, set_vhost)
from router_io.engine_connections import (
    _fx_close_connection, _on_conn_open, _protocol_error, drop_connection, effect_failed,
    event_failed, fail_connection, new_connection, release_memory, tick_connections)
from router_io.engine_links import (
    _attach_out, _fx_credit, _fx_detach_link, _fx_drained, _fx_link_drain, _fx_link_open,
    _fx_link_refuse, _fx_link_stall, _on_attach_answer, _on_flow, _on_link_close, _on_link_open)
from router_io.engine_deliveries import (
    _fx_deliver, _fx_deliver_tag, _fx_router_deliver, _on_delivery, refill)
from router_io.engine_dispositions import _fx_deliver_state, _fx_settle_out, _fx_update_in
from router_io.engine_stream_in import _fx_stream_ack
from router_io.engine_stream_out import _fx_deliver_chunk, _fx_stream_deliver
# --- end engine parts ---


# proton's lifecycle events as the connection table's (engine_lifecycle.py)
CONN_EVENT_OF = {E_CONN_REMOTE_OPEN: CE_REMOTE_OPEN, E_CONN_REMOTE_CLOSE: CE_REMOTE_CLOSE,
                 E_SESSION_REMOTE_OPEN: CE_BEGIN, E_SESSION_REMOTE_CLOSE: CE_END,
                 E_LINK_REMOTE_OPEN: CE_ATTACH, E_LINK_REMOTE_CLOSE: CE_DETACH,
                 E_LINK_REMOTE_DETACH: CE_DETACH}


class WorkerEngine:
    """All proton state of one worker, turning events into commands and effects into actions."""

    def __init__(self, router_id: str, peer_index: int, peer_count: int,
                 log: Callable[[str, str], None] | None = None, generation: int = 0) -> None:
        self.router_id = router_id
        self.node_tag = f"0/{router_id}"  # how this router names itself in ingress/trace
        self.peer_index = peer_index
        self.collector = proton.Collector()
        self._coll = self.collector._impl
        self._coll_key = _key(self._coll)
        # a restarted worker (generation > 0) mints ids the core has never seen
        self.new_id = ipc.id_allocator(peer_index, peer_count, generation)
        self.outbox: list = []
        self.log = log or (lambda level, text: None)
        self.conns: dict = {}       # conn ptr -> Connection
        self.conns_by_id: dict = {}
        self.links: dict = {}       # link id -> Link
        # the hot maps: their pointers are hot pointers (_key)
        self.link_ptrs: dict = {}   # link ptr -> Link
        self.in_dlvs: dict = {}     # inbound delivery id -> (dlv ptr, Link)
        self.in_ids: dict = {}      # dlv ptr -> inbound delivery id
        # core delivery id -> (dlv ptr, Link); a delivery's id is its tag (_pn_delivery_tagged)
        self.out_dlvs: dict = {}
        self.queued_out: dict = {}  # core delivery id -> its out_queue entry (unsettled only)
        # DeliverState for a delivery not handed to proton yet (out_queue, or behind a stream
        # on its link): core delivery id -> (state, info), set when its proton delivery is made
        self.pending_states: dict = {}
        # link routes: the sender's own tag for a delivery not handed to proton yet (core id
        # -> tag, DeliverTag), and the deliveries sent with one (dlv ptr -> core id: their
        # tag is not the id), until settled
        self.out_tags: dict = {}
        self.tag_ids: dict = {}
        self.oversize: dict = {}    # inbound dlv address -> True: over maxMessageSize, discarded
        # streaming deliveries: inbound by proton delivery (hot pointer) and by id, outbound by
        # the core's id; connections whose Q2 state changed (the worker re-arms their polling)
        self.in_streams: dict = {}
        self.in_stream_ids: dict = {}
        self.out_streams: dict = {}
        self.q2_changed: set = set()
        self.policy: dict = {}      # the policy entity (maxMessageSize, enableVhostPolicy...)
        self.vhosts: list = []      # vhost entities
        self.policy_db = vpolicy.PolicyDb()  # compiled policy + vhosts (common/policy.py)
        # the POLICY log module's lines (the worker binds it; 1.19's wording)
        self.policy_log: Callable[[str, str], None] = lambda level, text: None
        # PROTOCOL trace on: called with (conn id, proton's text of a frame); None: off, and
        # proton formats nothing (set_frame_trace)
        self.frame_trace: Optional[Callable[[int, str], None]] = None
        # MESSAGE trace on: called with (conn id, text) for each message logged on a connection
        # with messageLoggingComponents; None: off, and no message is even looked at
        # (set_message_trace)
        self.msg_trace: Optional[Callable[[int, str], None]] = None
        self.ssl_profiles: dict = {}  # sslProfile name -> attributes (config file, management)
        self.sasl_config: tuple = (None, "qdrouterd")  # router saslConfigDir, saslConfigName
        self._ssl_domains: dict = {}  # (profile, role, verify...) -> (SSLDomain, name map)
        self.dirty: set = set()     # connections that may have output to write
        # connections with an idle timeout (theirs or the peer's): the only ones proton's
        # tick has work for (tick_connections); the others are never visited by the tick
        self.needs_tick: set = set()
        self.heap = HeapTrimmer()   # freed heap memory goes back to the OS (release_memory)
        self._trim_check = 0.0
        self._trim_countdown = 0    # process_events calls until the next look at the clock
        self._recv_buf = bytearray(65536)
        self._handlers = {
            ipc.LinkOpen: _fx_link_open, ipc.LinkRefuse: _fx_link_refuse,
            ipc.LinkCredit: _fx_credit, ipc.Deliver: _fx_deliver,
            ipc.RouterDeliver: _fx_router_deliver,
            ipc.UpdateIn: _fx_update_in, ipc.SettleOut: _fx_settle_out,
            ipc.Drained: _fx_drained, ipc.CloseConnection: _fx_close_connection,
            ipc.DetachLink: _fx_detach_link, ipc.AttachOut: _attach_out,
            ipc.LinkDrain: _fx_link_drain, ipc.DeliverState: _fx_deliver_state,
            ipc.LinkStall: _fx_link_stall, ipc.DeliverTag: _fx_deliver_tag,
            StreamDeliver: _fx_stream_deliver, DeliverChunk: _fx_deliver_chunk,
            StreamAck: _fx_stream_ack,
        }

    # --- the API the worker and management use (each is the part's function of that name) -----
    def new_connection(self, settings: dict, host: str, direction: str = "in") -> Connection:
        return new_connection(self, settings, host, direction)

    def drop_connection(self, conn: Connection) -> None:
        drop_connection(self, conn)

    def fail_connection(self, conn: Connection, exc: BaseException) -> None:
        fail_connection(self, conn, exc)

    def event_failed(self, ev: Any, exc: BaseException) -> None:
        event_failed(self, ev, exc)

    def effect_failed(self, effect: tuple, exc: BaseException) -> None:
        effect_failed(self, effect, exc)

    def release_memory(self, now: float) -> None:
        release_memory(self, now)

    def tick_connections(self, now_ms: int, skip: Any = ()) -> int:
        return tick_connections(self, now_ms, skip)

    def set_security(self, router: Optional[dict], ssl_profiles: Optional[list]) -> None:
        set_security(self, router, ssl_profiles)

    def set_ssl_profile(self, name: str, attributes: Optional[dict]) -> None:
        set_ssl_profile(self, name, attributes)

    def setup_ssl(self, conn: Connection, settings: dict, direction: str) -> None:
        setup_ssl(self, conn, settings, direction)

    def set_frame_trace(self, trace: Optional[Callable[[int, str], None]]) -> None:
        set_frame_trace(self, trace)

    def set_message_trace(self, trace: Optional[Callable[[int, str], None]]) -> None:
        set_message_trace(self, trace)

    def trace_connection(self, conn_id: int, on: bool,
                         trace: Callable[[int, str], None]) -> None:
        trace_connection(self, conn_id, on, trace)

    def set_policy(self, policy: Optional[dict], vhosts: Optional[list] = None) -> None:
        set_policy(self, policy, vhosts)

    def set_vhost(self, op: str, attrs: dict) -> None:
        set_vhost(self, op, attrs)

    def max_message_size(self, conn: Connection, user: str, hostname: str) -> int:
        return max_message_size(self, conn, user, hostname)

    def resume_output(self, conn: Connection) -> None:
        """``conn``'s socket took bytes: deliveries waiting in its out_queue go on (refill)."""
        refill(self, conn)


    # --- events -> commands -------------------------------------------------------------------
    def process_events(self) -> None:
        """Drain the collector, turning every event into commands / local actions.

        Connections are marked dirty where their state can change (input read, effects
        applied, timers), not per event: that keeps the per-event cost to a few C calls.
        """
        self._trim_countdown -= 1
        if self._trim_countdown <= 0:  # a clock read every 256 calls, not every call
            self._trim_countdown = 256
            now = time.monotonic()
            if now >= self._trim_check:
                release_memory(self, now)
        coll = self._coll_key
        while True:
            ev = _pn_collector_peek(coll)
            if not ev:
                return
            etype = _pn_event_type(ev)
            try:  # one connection's failure never escapes (zero cost unless raised)
                if etype == E_DELIVERY:
                    _on_delivery(self, _pn_event_delivery(ev))
                elif etype == E_LINK_FLOW:
                    _on_flow(self, _pn_event_link(ev))
                elif etype in RARE_EVENTS:
                    self._rare_event(etype, _cdata("pn_event_t *", ev))
            except Exception as exc:  # noqa: BLE001 - isolate the connection, keep the worker
                event_failed(self, _cdata("pn_event_t *", ev), exc)
            _pn_collector_pop(coll)

    def _rare_event(self, etype: int, ev: Any) -> None:
        """Lifecycle events (open/close of connections, sessions, links), through cffi, by the
        tables of engine_lifecycle.py: the connection's first, then a link's. These events are
        the peer's frames: one the tables have no entry for is the peer breaking AMQP's order
        (an attach before its open...), and closes its connection with amqp:not-allowed."""
        event = CONN_EVENT_OF[etype]
        c = lib.pn_event_connection(ev)
        conn = self.conns.get(c)
        link = None
        try:
            action = connection_action(conn, event)
            if action == CA_LINK:
                l_ptr = lib.pn_event_link(ev)
                link = self.link_ptrs.get(_key(l_ptr))
                action = link_action(link, LE_ATTACH if event == CE_ATTACH else LE_DETACH)
        except LifecycleError as exc:
            _protocol_error(self, conn, str(exc))
            return
        if action == CA_IGNORE:  # (== LA_IGNORE)
            return
        if event == CE_ATTACH:
            if action == LA_ATTACH:
                _on_link_open(self, l_ptr)
            elif action == LA_ANSWER:
                _on_attach_answer(self, link)
        elif event == CE_DETACH:
            if action == LA_DETACH:
                _on_link_close(self, l_ptr, etype == E_LINK_REMOTE_CLOSE)
        elif action == CA_BEGIN:
            _on_session_open(self, lib.pn_event_session(ev))
        elif action == CA_END:
            _on_session_close(self, lib.pn_event_session(ev))
        elif action == CA_OPEN:
            _on_conn_open(self, c)
        elif action == CA_CLOSE_LOCAL:
            if not lib.pn_connection_state(c) & LOCAL_CLOSED:
                lib.pn_connection_close(c)

    # --- effects -> engine --------------------------------------------------------------------
    def apply_all(self, effects: list) -> None:
        """Apply one batch of effects from the core, in order: one that raises closes the
        connection it was for (``effect_failed``) and the rest still apply. One call per batch
        (compiled: the loop and each ``apply`` are C calls)."""
        for effect in effects:
            try:  # zero cost unless raised
                self.apply(effect)
            except Exception as exc:  # noqa: BLE001 - close that connection, not the worker
                effect_failed(self, effect, exc)

    def apply(self, effect: tuple) -> None:
        t = type(effect)  # the per-message effects first, the rest through the table
        if t is Deliver:
            _fx_deliver(self, effect)
        elif t is RouterDeliver:
            _fx_router_deliver(self, effect)
        elif t is UpdateIn:
            _fx_update_in(self, effect)
        elif t is LinkCredit:
            _fx_credit(self, effect)
        elif t is SettleOut:
            _fx_settle_out(self, effect)
        elif t is Drained:
            _fx_drained(self, effect)
        elif t is DeliverChunk:
            _fx_deliver_chunk(self, effect)
        else:
            self._handlers[t](self, effect)

    def take_commands(self) -> list:
        out = self.outbox
        self.outbox = []
        return out
