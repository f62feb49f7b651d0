# cython: language_level=3, annotation_typing=False, wraparound=True, boundscheck=True
"""The worker's proton engine adapter, compiled, with the per-message paths calling proton-C natively.

The pure-Python reference router_io/engine.py is included verbatim (so the rare paths cannot
drift: connection, session and link lifecycle, refusals, conditions, SASL all run its code,
compiled). ``WorkerEngine`` here is a cdef class with the same public API that runs the hot paths
without cffi: the event loop, inbound DELIVERY, outbound dispositions, LINK_FLOW, and the effects
Deliver, RouterDeliver, UpdateIn, SettleOut, LinkCredit, Drained. Proton is bundled inside the
cffi module, so its functions are called through pointers taken from cffi at import (_pn.pxd,
_pn_api.pxi).
Every other method is the reference's, looked up on the reference class (``__getattr__``).
``Connection`` is rebound to a subclass whose byte I/O (push, output, consumed, capacity,
pending, is_closed: called by the worker loop every iteration) is native too; the reference's
``new_connection`` builds it.

Pointer keys: in this build the hot maps (``link_ptrs``, ``in_ids``, ``out_ids`` and the pointers
kept in ``in_dlvs``/``out_dlvs``) hold native addresses as ints; ``link_ptrs`` is a dict that also
accepts the cffi pointers the reference's methods use. ``conns`` and ``Connection.links`` are
only touched by reference code and keep cffi pointer keys.

Must not import zmq, sockets or selectors.
"""
include "router_io/engine.py"

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdint cimport uint64_t

from _pn cimport *

_RefWorkerEngine = WorkerEngine
_RefConnection = Connection


include "_pn_api.pxi"


cdef int EV_DELIVERY = lib.PN_DELIVERY
cdef int EV_LINK_FLOW = lib.PN_LINK_FLOW
cdef int EV_LINK_REMOTE_OPEN = E_LINK_REMOTE_OPEN
cdef int EV_LINK_REMOTE_CLOSE = E_LINK_REMOTE_CLOSE
cdef int EV_LINK_REMOTE_DETACH = E_LINK_REMOTE_DETACH
cdef int EV_SESSION_REMOTE_OPEN = E_SESSION_REMOTE_OPEN
cdef int EV_SESSION_REMOTE_CLOSE = E_SESSION_REMOTE_CLOSE
cdef int EV_CONN_REMOTE_OPEN = E_CONN_REMOTE_OPEN
cdef int EV_CONN_REMOTE_CLOSE = E_CONN_REMOTE_CLOSE
cdef uint64_t ST_RELEASED = ipc.STATE_RELEASED
cdef uint64_t ST_REJECTED = ipc.STATE_REJECTED
cdef uint64_t ST_MODIFIED = ipc.STATE_MODIFIED
cdef int D_OUT = ipc.DIR_OUT

_monotonic = time.monotonic
_new_tuple = tuple.__new__  # NamedTuple(...) without its Python-level __new__
_Transfer = ipc.Transfer
_RouterTransfer = ipc.RouterTransfer
_RouterDeliver = ipc.RouterDeliver
_Disposition = ipc.Disposition
_SettleIn = ipc.SettleIn
_LinkFlow = ipc.LinkFlow
_Deliver = ipc.Deliver
_UpdateIn = ipc.UpdateIn
_SettleOut = ipc.SettleOut
_LinkCredit = ipc.LinkCredit
_Drained = ipc.Drained
_scan = amqpscan.scan
_MessageFormatError = amqpscan.MessageFormatError
_rewrite = amqpscan.rewrite_annotations
_ref_egress = _RefWorkerEngine._egress_annotations
_ref_router_egress = _RefWorkerEngine._router_egress
_ref_forget_link = _RefWorkerEngine._forget_link


cdef inline object _addr(object ptr):
    """A pointer key as an int: ints pass, cffi pointers are converted."""
    if type(ptr) is int:
        return ptr
    return int(ffi.cast("uintptr_t", ptr))


cdef inline object _d_cffi(size_t ptr):
    return ffi.cast("pn_delivery_t *", ptr)


class _PtrDict(dict):
    """Keys are native addresses (ints); the reference's cffi pointer keys are converted."""

    def __getitem__(self, k):
        return dict.__getitem__(self, _addr(k))

    def __setitem__(self, k, v):
        dict.__setitem__(self, _addr(k), v)

    def __delitem__(self, k):
        dict.__delitem__(self, _addr(k))

    def __contains__(self, k):
        return dict.__contains__(self, _addr(k))

    def get(self, k, default=None):
        return dict.get(self, _addr(k), default)

    def pop(self, k, *default):
        return dict.pop(self, _addr(k), *default)


include "_engine_conn.pxi"


cdef class NativeWorkerEngine:
    """``router_io.engine.WorkerEngine`` with its per-message paths in C (see the module doc)."""

    cdef public object router_id, node_tag, peer_index, collector, _coll, new_id, log
    cdef public object _recv_buf, link_ptrs
    cdef public list outbox
    cdef public dict conns, conns_by_id, links, in_dlvs, in_ids, out_dlvs, out_ids, _handlers
    cdef public set dirty
    cdef dict __dict__
    cdef object _lp      # = link_ptrs (a dict subclass), for C-level lookups
    cdef dict _lnative   # link id -> native link address
    cdef pn_collector_t *_c
    cdef int _trim_countdown  # process_events calls until the next look at the clock

    def __init__(self, router_id, peer_index, peer_count, log=None, generation=0):
        _RefWorkerEngine.__init__(self, router_id, peer_index, peer_count, log, generation)
        self._lp = _PtrDict()
        self.link_ptrs = self._lp
        self._lnative = {}
        self._c = <pn_collector_t *><size_t>_addr(self._coll)

    def __getattr__(self, name):
        # every method not defined here is the reference's, bound to this engine
        try:
            attr = _RefWorkerEngine.__dict__[name]
        except KeyError:
            raise AttributeError(name) from None
        bind = getattr(type(attr), "__get__", None)
        return attr if bind is None else bind(attr, self, type(self))

    # --- events -> commands -------------------------------------------------------------------
    def process_events(self):
        cdef pn_collector_t *coll = self._c
        cdef pn_event_t *ev
        cdef int etype
        self._trim_countdown -= 1
        if self._trim_countdown <= 0:  # a clock read every 256 calls, not every call
            self._trim_countdown = 256
            now = _monotonic()
            if now >= self._trim_check:
                self.release_memory(now)
        while True:
            ev = pn.collector_peek(coll)
            if ev == NULL:
                return
            etype = pn.event_type(ev)
            try:  # one connection's failure never escapes (the reference's event_failed)
                if etype == EV_DELIVERY:
                    self._delivery(pn.event_delivery(ev))
                elif etype == EV_LINK_FLOW:
                    self._flow(pn.event_link(ev))
                elif (etype == EV_LINK_REMOTE_OPEN or etype == EV_LINK_REMOTE_CLOSE
                      or etype == EV_LINK_REMOTE_DETACH or etype == EV_SESSION_REMOTE_OPEN
                      or etype == EV_SESSION_REMOTE_CLOSE or etype == EV_CONN_REMOTE_OPEN
                      or etype == EV_CONN_REMOTE_CLOSE):
                    self._rare_event(etype, ffi.cast("pn_event_t *", <size_t>ev))
            except Exception as exc:
                self.event_failed(ffi.cast("pn_event_t *", <size_t>ev), exc)
            pn.collector_pop(coll)

    def _on_flow(self, l_ptr):
        self._flow(<pn_link_t *><size_t>_addr(l_ptr))

    cdef int _flow(self, pn_link_t *l) except -1:
        cdef PyObject *found = PyDict_GetItem(self._lp, <size_t>l)
        if found == NULL:
            return 0
        link = <object>found
        if link.direction != D_OUT:
            return 0
        limit = link.sent + pn.link_credit(l)
        if link.capped:  # see the reference's _report_flow / enqueue
            limit = min(limit, link.sent + link.queued)
        flow = (limit, bool(pn.link_get_drain(l)))
        if flow != link.flow:
            link.flow = flow
            self.outbox.append(_new_tuple(_LinkFlow, (link.link_id, flow[0], flow[1])))
        return 0

    def _on_delivery(self, d_ptr):
        self._delivery(<pn_delivery_t *><size_t>_addr(d_ptr))

    cdef int _delivery(self, pn_delivery_t *d) except -1:
        cdef pn_link_t *l = pn.delivery_link(d)
        cdef PyObject *found = PyDict_GetItem(self._lp, <size_t>l)
        cdef size_t size
        cdef bint settled
        if found == NULL:  # a link we refused or forgot; proton still reports on it
            return 0
        link = <object>found
        if link.direction == D_OUT:
            return self._outbound_update(d)
        d_key = <size_t>d
        dlv_id = self.in_ids.get(d_key)
        if dlv_id is not None:  # a delivery we already forwarded: the sender settled it
            if pn.delivery_settled(d):
                self._drop_in(dlv_id)
                self.outbox.append(_new_tuple(_SettleIn, (dlv_id, pn.delivery_remote_state(d))))
                pn.delivery_settle(d)
            return 0
        if pn.delivery_aborted(d):
            self._drop_aborted(_d_cffi(d_key), ffi.cast("pn_link_t *", <size_t>l))
            return 0
        max_size = link.max_size  # maxMessageSize: one comparison per transfer frame
        if max_size and (self.oversize or pn.delivery_pending(d) > <size_t>max_size):
            if self._oversize(_d_cffi(d_key), ffi.cast("pn_link_t *", <size_t>l), link):
                return 0
        if pn.delivery_partial(d):
            return 0  # wait for the rest of the message
        size = pn.delivery_pending(d)
        payload = PyByteArray_FromStringAndSize(NULL, size)
        if size:
            pn.link_recv(l, PyByteArray_AS_STRING(payload), size)
        pn.link_advance(l)
        if not link.open:
            pn.delivery_update(d, ST_RELEASED)
            pn.delivery_settle(d)
            return 0
        settled = pn.delivery_settled(d)
        try:
            scan = _scan(payload)
        except _MessageFormatError as exc:
            self.log("warning", f"[C{link.conn.conn_id}] rejecting malformed message: {exc}")
            self._reject_local(_d_cffi(d_key), "amqp:decode-error", str(exc))
            return 0
        if link.router:  # inter-router link: annotations kept and handed over for routing
            to = scan.ma_to
            trace = scan.ma_trace
            phase = scan.ma_phase
            dlv_id = self.new_id()
            cmd = _new_tuple(_RouterTransfer, (
                dlv_id, link.link_id, scan.to if to is None else to, settled, scan.priority,
                phase if phase else 0, scan.ma_ingress, [] if trace is None else trace, payload))
        else:
            has_router_annotations = (scan.ma_to is not None or scan.ma_trace is not None
                                      or scan.ma_ingress is not None or scan.ma_phase is not None)
            if has_router_annotations and link.conn.strip_in:
                payload = _rewrite(payload, scan, strip=True)
                to = scan.to if link.anonymous else None
            elif link.anonymous:
                to = scan.ma_to if scan.ma_to is not None else scan.to
            else:
                to = None
            if link.check:  # vhost policy / multiTenant (the reference's _police_transfer)
                to = self._police_transfer(link, _d_cffi(d_key), scan, payload, to)
                if to is False:
                    return 0
            dlv_id = self.new_id()
            cmd = _new_tuple(_Transfer, (dlv_id, link.link_id, to, settled, scan.priority,
                                         payload))
        if settled:
            pn.delivery_settle(d)
        else:
            self.in_dlvs[dlv_id] = (d_key, link)
            self.in_ids[d_key] = dlv_id
        self.outbox.append(cmd)
        return 0

    def _drop_in(self, dlv_id):
        ptr, _ = self.in_dlvs.pop(dlv_id)
        self.in_ids.pop(ptr, None)

    cdef int _outbound_update(self, pn_delivery_t *d) except -1:
        d_key = <size_t>d
        dlv_id = self.out_ids.get(d_key)
        if dlv_id is None:
            return 0
        cdef uint64_t state = pn.delivery_remote_state(d)
        cdef bint settled = pn.delivery_settled(d)
        info = None
        if state == ST_REJECTED or state == ST_MODIFIED:
            info = self._remote_info(_d_cffi(d_key), state)
        if settled:
            del self.out_dlvs[dlv_id]
            del self.out_ids[d_key]
            pn.delivery_settle(d)
        self.outbox.append(_new_tuple(_Disposition, (dlv_id, state, settled, info)))
        return 0

    def _track_out(self, dlv_id, d_ptr, link):
        # the reference's refill() hands cffi pointers; the hot maps here key by address
        d_key = _addr(d_ptr)
        self.out_dlvs[dlv_id] = (d_key, link)
        self.out_ids[d_key] = dlv_id

    def _forget_link(self, link):
        _ref_forget_link(self, link)
        self._lnative.pop(link.link_id, None)

    # --- effects -> engine --------------------------------------------------------------------
    def apply(self, effect):
        t = type(effect)
        if t is _Deliver:
            self._deliver(effect)
        elif t is _RouterDeliver:
            self._router_deliver(effect)
        elif t is _UpdateIn:
            self._update_in(effect)
        elif t is _LinkCredit:
            self._credit(effect)
        elif t is _SettleOut:
            self._settle_out(effect)
        elif t is _Drained:
            self._drained(effect)
        else:
            self._handlers[t](effect)

    cdef pn_link_t *_link_native(self, link) except NULL:
        cdef PyObject *found = PyDict_GetItem(self._lnative, link.link_id)
        if found != NULL:
            return <pn_link_t *><size_t>(<object>found)
        addr = _addr(link.ptr)
        self._lnative[link.link_id] = addr
        return <pn_link_t *><size_t>addr

    def _fx_deliver(self, fx):
        self._deliver(fx)

    cdef int _deliver(self, object fx) except -1:
        dlv_id, link_id, settled, payload = <tuple>fx
        link = self.links.get(link_id)
        if link is None:
            return 0  # the link went away; the core learns it from our LinkDetach
        return self._send_native(link, dlv_id, settled, _ref_egress(self, link.conn, payload))

    def _fx_router_deliver(self, fx):
        self._router_deliver(fx)

    cdef int _router_deliver(self, object fx) except -1:
        dlv_id, link_id, settled, to_override, phase, payload = <tuple>fx
        link = self.links.get(link_id)
        if link is None:
            return 0  # the link went away; the core learns it from our LinkDetach
        return self._send_native(link, dlv_id, settled,
                                 _ref_router_egress(self, payload, to_override, phase))

    cdef int _send_native(self, object link, object dlv_id, bint settled,
                          object payload) except -1:
        cdef pn_link_t *l
        cdef pn_delivery_t *d
        cdef unsigned char tag[8]
        cdef pn_bytes_t tag_bytes
        cdef uint64_t v
        cdef int i
        cdef Py_buffer view
        conn = link.conn
        cdef Py_ssize_t size = len(payload)
        if conn.out_queue or size > conn.out_room:  # over the byte budget: wait (OUT_BUDGET)
            self.enqueue(link, dlv_id, settled, payload)
            return 0
        conn.out_room -= size
        l = self._link_native(link)
        v = dlv_id
        for i in range(8):  # the delivery tag: the core's id, 8 bytes big-endian
            tag[7 - i] = <unsigned char>(v & 0xff)
            v >>= 8
        tag_bytes.size = 8
        tag_bytes.start = <const char *>tag
        d = pn.delivery(l, tag_bytes)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            pn.link_send(l, <char *>view.buf, <size_t>view.len)
        finally:
            PyBuffer_Release(&view)
        pn.link_advance(l)
        link.sent += 1
        if settled:
            pn.delivery_settle(d)
        else:
            self.out_dlvs[dlv_id] = (<size_t>d, link)
            self.out_ids[<size_t>d] = dlv_id
        self.dirty.add(conn)
        return 0

    def _fx_update_in(self, fx):
        self._update_in(fx)

    cdef int _update_in(self, object fx) except -1:
        cdef pn_delivery_t *d
        dlv_id, state, settled, info = <tuple>fx
        entry = self.in_dlvs.get(dlv_id)
        if entry is None:
            return 0
        d_key, link = entry
        d = <pn_delivery_t *><size_t>d_key
        if state:
            if info:  # rare: conditions, modified flags and annotations, as the reference does
                self._local_info(lib.pn_delivery_local(_d_cffi(d_key)), state, info)
            pn.delivery_update(d, <uint64_t>state)
        if settled:
            self._drop_in(dlv_id)
            pn.delivery_settle(d)
        self.dirty.add(link.conn)
        return 0

    def _fx_settle_out(self, fx):
        self._settle_out(fx)

    cdef int _settle_out(self, object fx) except -1:
        cdef pn_delivery_t *d
        dlv_id, state = <tuple>fx
        entry = self.out_dlvs.pop(dlv_id, None)
        if entry is None:
            if self.queued_out:
                self._settle_queued(dlv_id, state)
            return 0
        d_key, link = entry
        d = <pn_delivery_t *><size_t>d_key
        self.out_ids.pop(d_key, None)
        if state:
            pn.delivery_update(d, <uint64_t>state)
        pn.delivery_settle(d)
        self.dirty.add(link.conn)
        return 0

    def _fx_credit(self, fx):
        self._credit(fx)

    cdef int _credit(self, object fx) except -1:
        link_id, credit = <tuple>fx
        link = self.links.get(link_id)
        if link is not None:
            pn.link_flow(self._link_native(link), <int>credit)
            self.dirty.add(link.conn)
        return 0

    def _fx_drained(self, fx):
        self._drained(fx)

    cdef int _drained(self, object fx) except -1:
        link = self.links.get((<tuple>fx)[0])
        if link is not None:
            if link.queued:  # the credit left is for what still waits in the out_queue
                link.drain_after = True
                return 0
            link.sent += pn.link_drained(self._link_native(link))
            self.dirty.add(link.conn)
        return 0

    def take_commands(self):
        out = self.outbox
        self.outbox = []
        return out


WorkerEngine = NativeWorkerEngine
Connection = NativeConnection  # what the reference's new_connection (included above) builds
