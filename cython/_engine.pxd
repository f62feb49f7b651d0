# cython: language_level=3
# Augmenting declarations for the compiled worker engine (pure-Python mode).
#
# setup.py concatenates the engine's parts (setup.py ENGINE_PARTS: src/router_io/engine_*.py,
# then engine.py) into build/cython_src/router_io/_engine.py and puts this file next to it as
# _engine.pxd, then compiles the pair as ``router_io._engine``. The .py files stay the one
# source of the engine's behaviour; this file only adds C:
# * the proton calls of the per-message paths (the ``_pn_*`` names, which engine_proton.py binds
#   to cffi for the pure build) as inline functions calling proton-C through pointers that cffi
#   gives at import (_pn.pxd: the exact C signatures; proton is bundled inside cproton_ffi, there
#   is no library to link against). Pointers there are "hot pointers": native addresses as size_t;
# * WorkerEngine as a final cdef class: typed attributes for what the per-message paths touch
#   (the rest lives in its __dict__), and the parts' functions cdef/cpdef functions with a typed
#   ``WorkerEngine self`` and C-typed locals (the end of this file).
#
# Rules for keeping it in step with the parts:
# * every ``_pn_*`` name, ``_key``, ``_cdata``, ``_fields`` and ``_command`` defined in
#   engine_proton.py's ``if not cython.compiled`` block is defined here with the same arguments
#   and result (tests/unit/test_engine_build.py checks the names);
# * a function that the effect table, a WorkerEngine method, the worker or a test reaches by
#   name stays ``def`` or ``cpdef``; a test may replace a ``def`` method of WorkerEngine on an
#   instance (its __dict__ wins), never a cdef one;
# * a function declared here with a C argument type is only ever called with a hot pointer.
# After editing only this file: ROUTER_FORCE_REBUILD=1 (see setup.py).
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from libc.stdint cimport uint64_t

from _pn cimport *


cdef extern from "named_tuple.h":  # cython/named_tuple.h, shared with the other .pxd
    object _command "qdrouter_named_tuple"(type cls, tuple fields)

cdef extern from *:
    # A tuple subclass (NamedTuple) as ``tuple``, unchecked: the caller knows what it holds.
    tuple _fields "__Pyx_NewRef"(object cmd)


# Constants compared on the per-message paths: C ints, not module-global lookups.
cdef int E_DELIVERY, E_LINK_FLOW, DIR_OUT
cdef int SCAN_TO, SCAN_PRIORITY, SCAN_MA_TO, SCAN_MA_PHASE, SCAN_MA_INGRESS, SCAN_MA_TRACE
cdef frozenset RARE_EVENTS
cdef uint64_t STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED


# --- proton-C, natively ---------------------------------------------------------------------
cdef struct _Pn:
    pn_collector_peek_f collector_peek
    pn_collector_pop_f collector_pop
    pn_event_type_f event_type
    pn_event_delivery_f event_delivery
    pn_event_link_f event_link
    pn_delivery_link_f delivery_link
    pn_delivery_bool_f delivery_partial
    pn_delivery_bool_f delivery_aborted
    pn_delivery_bool_f delivery_settled
    pn_delivery_pending_f delivery_pending
    pn_delivery_settle_f delivery_settle
    pn_delivery_update_f delivery_update
    pn_delivery_remote_state_f delivery_remote_state
    pn_delivery_f delivery
    pn_delivery_tag_f delivery_tag
    pn_link_current_f link_current
    pn_link_io_f link_recv
    pn_link_io_f link_send
    pn_link_bool_f link_advance
    pn_link_bool_f link_get_drain
    pn_link_int_f link_credit
    pn_link_int_f link_drained
    pn_link_flow_f link_flow
    pn_transport_io_f transport_push
    pn_transport_io_f transport_peek
    pn_transport_pop_f transport_pop
    pn_transport_size_f transport_pending
    pn_transport_size_f transport_capacity
    pn_transport_bool_f transport_closed


cdef _Pn pn
cdef object _ffi  # cproton_ffi.ffi, for _key and _cdata


cdef inline size_t _pn_fn(object ffi, object lib, str name) except 0:
    return <size_t>int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))


cdef inline int _pn_bind(object ffi, object lib) except -1:
    """Fill ``pn`` from cffi; engine_proton.py calls it once at import (compiled build only)."""
    global _ffi
    _ffi = ffi
    pn.collector_peek = <pn_collector_peek_f>_pn_fn(ffi, lib, "pn_collector_peek")
    pn.collector_pop = <pn_collector_pop_f>_pn_fn(ffi, lib, "pn_collector_pop")
    pn.event_type = <pn_event_type_f>_pn_fn(ffi, lib, "pn_event_type")
    pn.event_delivery = <pn_event_delivery_f>_pn_fn(ffi, lib, "pn_event_delivery")
    pn.event_link = <pn_event_link_f>_pn_fn(ffi, lib, "pn_event_link")
    pn.delivery_link = <pn_delivery_link_f>_pn_fn(ffi, lib, "pn_delivery_link")
    pn.delivery_partial = <pn_delivery_bool_f>_pn_fn(ffi, lib, "pn_delivery_partial")
    pn.delivery_aborted = <pn_delivery_bool_f>_pn_fn(ffi, lib, "pn_delivery_aborted")
    pn.delivery_settled = <pn_delivery_bool_f>_pn_fn(ffi, lib, "pn_delivery_settled")
    pn.delivery_pending = <pn_delivery_pending_f>_pn_fn(ffi, lib, "pn_delivery_pending")
    pn.delivery_settle = <pn_delivery_settle_f>_pn_fn(ffi, lib, "pn_delivery_settle")
    pn.delivery_update = <pn_delivery_update_f>_pn_fn(ffi, lib, "pn_delivery_update")
    pn.delivery_remote_state = <pn_delivery_remote_state_f>_pn_fn(ffi, lib,
                                                                  "pn_delivery_remote_state")
    pn.delivery = <pn_delivery_f>_pn_fn(ffi, lib, "pn_delivery")
    pn.delivery_tag = <pn_delivery_tag_f>_pn_fn(ffi, lib, "pn_delivery_tag")
    pn.link_current = <pn_link_current_f>_pn_fn(ffi, lib, "pn_link_current")
    pn.link_recv = <pn_link_io_f>_pn_fn(ffi, lib, "pn_link_recv")
    pn.link_send = <pn_link_io_f>_pn_fn(ffi, lib, "pn_link_send")
    pn.link_advance = <pn_link_bool_f>_pn_fn(ffi, lib, "pn_link_advance")
    pn.link_get_drain = <pn_link_bool_f>_pn_fn(ffi, lib, "pn_link_get_drain")
    pn.link_credit = <pn_link_int_f>_pn_fn(ffi, lib, "pn_link_credit")
    pn.link_drained = <pn_link_int_f>_pn_fn(ffi, lib, "pn_link_drained")
    pn.link_flow = <pn_link_flow_f>_pn_fn(ffi, lib, "pn_link_flow")
    pn.transport_push = <pn_transport_io_f>_pn_fn(ffi, lib, "pn_transport_push")
    pn.transport_peek = <pn_transport_io_f>_pn_fn(ffi, lib, "pn_transport_peek")
    pn.transport_pop = <pn_transport_pop_f>_pn_fn(ffi, lib, "pn_transport_pop")
    pn.transport_pending = <pn_transport_size_f>_pn_fn(ffi, lib, "pn_transport_pending")
    pn.transport_capacity = <pn_transport_size_f>_pn_fn(ffi, lib, "pn_transport_capacity")
    pn.transport_closed = <pn_transport_bool_f>_pn_fn(ffi, lib, "pn_transport_closed")
    return 0


cdef inline size_t _pn_collector_peek(size_t c):
    return <size_t>pn.collector_peek(<pn_collector_t *>c)

cdef inline bint _pn_collector_pop(size_t c):
    return pn.collector_pop(<pn_collector_t *>c)

cdef inline int _pn_event_type(size_t ev):
    return pn.event_type(<pn_event_t *>ev)

cdef inline size_t _pn_event_delivery(size_t ev):
    return <size_t>pn.event_delivery(<pn_event_t *>ev)

cdef inline size_t _pn_event_link(size_t ev):
    return <size_t>pn.event_link(<pn_event_t *>ev)

cdef inline size_t _pn_delivery_link(size_t d):
    return <size_t>pn.delivery_link(<pn_delivery_t *>d)

cdef inline bint _pn_delivery_partial(size_t d):
    return pn.delivery_partial(<pn_delivery_t *>d)

cdef inline bint _pn_delivery_aborted(size_t d):
    return pn.delivery_aborted(<pn_delivery_t *>d)

cdef inline bint _pn_delivery_settled(size_t d):
    return pn.delivery_settled(<pn_delivery_t *>d)

cdef inline size_t _pn_delivery_pending(size_t d):
    return pn.delivery_pending(<pn_delivery_t *>d)

cdef inline void _pn_delivery_settle(size_t d):
    pn.delivery_settle(<pn_delivery_t *>d)

cdef inline void _pn_delivery_update(size_t d, uint64_t state):
    pn.delivery_update(<pn_delivery_t *>d, state)

cdef inline uint64_t _pn_delivery_remote_state(size_t d):
    return pn.delivery_remote_state(<pn_delivery_t *>d)

cdef inline bint _pn_link_advance(size_t l):
    return pn.link_advance(<pn_link_t *>l)

cdef inline bint _pn_link_get_drain(size_t l):
    return pn.link_get_drain(<pn_link_t *>l)

cdef inline int _pn_link_credit(size_t l):
    return pn.link_credit(<pn_link_t *>l)

cdef inline int _pn_link_drained(size_t l):
    return pn.link_drained(<pn_link_t *>l)

cdef inline void _pn_link_flow(size_t l, int credit):
    pn.link_flow(<pn_link_t *>l, credit)

cdef inline Py_ssize_t _pn_transport_pending(size_t t):
    return pn.transport_pending(<pn_transport_t *>t)

cdef inline Py_ssize_t _pn_transport_capacity(size_t t):
    return pn.transport_capacity(<pn_transport_t *>t)

cdef inline void _pn_transport_pop(size_t t, size_t n):
    pn.transport_pop(<pn_transport_t *>t, n)

cdef inline bint _pn_transport_closed(size_t t):
    return pn.transport_closed(<pn_transport_t *>t)


cdef inline object _pn_delivery_tag_id(size_t d):
    """The core's id a delivery of ours was tagged with (None: not an 8-byte tag)."""
    cdef pn_bytes_t tag = pn.delivery_tag(<pn_delivery_t *>d)
    cdef uint64_t v = 0
    cdef size_t i
    if tag.size != 8:
        return None
    for i in range(8):
        v = (v << 8) | <unsigned char>tag.start[i]
    return v

cdef inline size_t _pn_link_current(size_t l):
    return <size_t>pn.link_current(<pn_link_t *>l)

cdef inline size_t _pn_delivery_tagged(size_t l, uint64_t dlv_id):
    """pn_delivery() tagged with the core's id (8 bytes, big-endian)."""
    cdef unsigned char tag[8]
    cdef pn_bytes_t tag_bytes
    cdef int i
    for i in range(8):
        tag[7 - i] = <unsigned char>(dlv_id & 0xff)
        dlv_id >>= 8
    tag_bytes.size = 8
    tag_bytes.start = <const char *>tag
    return <size_t>pn.delivery(<pn_link_t *>l, tag_bytes)


cdef inline bytearray _pn_link_recv_message(size_t l, size_t size):
    """The ``size`` bytes of the link's current delivery, as a new bytearray."""
    payload = PyByteArray_FromStringAndSize(NULL, size)
    if size:
        pn.link_recv(<pn_link_t *>l, PyByteArray_AS_STRING(payload), size)
    return payload


cdef inline int _pn_link_send_all(size_t l, object payload) except -1:
    """pn_link_send() of the whole buffer (bytes, bytearray or memoryview)."""
    cdef Py_buffer view
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        pn.link_send(<pn_link_t *>l, <char *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline int _pn_transport_push_from(size_t t, object data, Py_ssize_t size) except -1:
    """pn_transport_push() of the first ``size`` bytes of a buffer."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if size < 0 or size > view.len:
            raise ValueError(f"push of {size} bytes from a buffer of {view.len}")
        pn.transport_push(<pn_transport_t *>t, <char *>view.buf, <size_t>size)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline int _pn_transport_peek_into(size_t t, object buf, Py_ssize_t size) except -1:
    """pn_transport_peek() of ``size`` pending bytes into a writable buffer."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        if size < 0 or size > view.len:
            raise ValueError(f"peek of {size} bytes into a buffer of {view.len}")
        pn.transport_peek(<pn_transport_t *>t, <char *>view.buf, <size_t>size)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline size_t _key(object ptr) except? 0:
    """A cffi pointer as a hot pointer: its address."""
    return <size_t>int(_ffi.cast("uintptr_t", ptr))


cdef inline object _cdata(str ctype, size_t ptr):
    """A hot pointer as a cffi pointer of ``ctype``, for the cffi-based paths."""
    return _ffi.cast(ctype, ptr)


# --- the engine -----------------------------------------------------------------------------
# Link: a final cdef class with exactly engine_records.py's __slots__, every one ``object`` (the
# values stay what the .py stores). The per-message paths that declare their ``link`` as Link
# below read and write these at a fixed offset instead of through the type's slot descriptors
# (each a type look-up and a call); a Link-typed local is only used after its ``is None`` test.
@cython.final
cdef class Link:
    cdef public object link_id, ptr, key, conn, direction, anonymous, sent, flow, open, local
    cdef public object link_type, router, queued, drain_after, max_size, check, capped, awaiting
    cdef public object draining, routed, settle_for_receiver, stream, out_stream, waiting, half


# Connection: a final cdef class that keeps a __dict__ (most of its attributes, and the push
# it swaps while the front door guards it, live there as in engine_conn.py); only what every
# delivery reads (the byte budget, the queue beyond it, the annotation and message-log
# switches) are typed fields. A per-message path that declares its ``conn`` as Connection reads them at a fixed
# offset, the budget as a C integer, instead of looking them up in the instance dict.
@cython.final
cdef class Connection:
    cdef dict __dict__
    cdef object __weakref__  # as any Python object (the memory tests watch connections go)
    cdef public object out_queue
    cdef public Py_ssize_t out_room, out_budget
    cdef public bint strip_in, strip_out
    cdef public Py_ssize_t msg_log, msg_log_bits
    # the rest of what engine_conn.py sets, as fields: a connection's __dict__ (about 2 kB
    # with these 40 names) is made only for what a rare path adds
    cdef public object engine, conn_id, settings, host, direction, role, failover
    cdef public object link_capacity, cost, t_ptr, _transport, ssl, ssl_profile, auth_grant
    cdef public object sasl, c_ptr, t_key, links, reported_open, closed, q2, streams
    cdef public object q2_armed_held, max_message_size, policy, policy_vhost
    cdef public object policy_hostname, policy_user, policy_rhost, n_sessions, tenant
    cdef public object forced_trace, failed, refused, router_session, guard, unguarded


@cython.final
cdef class WorkerEngine:
    cdef dict __dict__  # everything not declared here (policy, TLS, the heap trimmer...)
    cdef public object router_id, node_tag, peer_index, collector, _coll, new_id, log
    cdef public list outbox
    cdef public dict conns, conns_by_id, links, link_ptrs, in_dlvs, in_ids, out_dlvs
    cdef public dict queued_out, oversize, _handlers, in_streams, in_stream_ids, out_streams
    cdef public dict pending_states, out_tags, tag_ids
    cdef public set q2_changed
    cdef public set dirty, needs_tick
    cdef public double _trim_check
    cdef public int _trim_countdown
    cdef public size_t _coll_key

    @cython.locals(coll=size_t, ev=size_t, etype=int)
    cpdef process_events(self)
    cpdef apply_all(self, list effects)
    cpdef apply(self, effect)


# --- the functions of the engine parts ------------------------------------------------------
# Each takes the engine as a typed ``WorkerEngine self`` (its fields at a fixed offset, as in a
# method), so a call between parts is a C call. The per-message paths are ``cdef`` with C-typed
# arguments and locals; the rest ``cpdef`` (the effect table and the WorkerEngine methods that
# delegate to them hold or call them as Python objects too). Functions with a generator or a
# lambda inside stay ``def`` (Cython does not compile closures in cdef/cpdef functions), and so
# do those a WorkerEngine method of the same name delegates to (a cpdef function may not share
# its name with a method of a cdef class): all of them rare paths.
# engine_security.py
# set_security: def (a lambda or comprehension inside)
# set_ssl_profile: def (a lambda or comprehension inside)
cpdef _security_info(WorkerEngine self, conn)
# _cert_user: def (a lambda or comprehension inside)
cpdef _peer_user(WorkerEngine self, conn)
# engine_policy.py
# set_vhost: def (a lambda or comprehension inside)
# max_message_size: def (a lambda or comprehension inside)
cpdef _on_session_open(WorkerEngine self, ssn)
cpdef _on_session_close(WorkerEngine self, ssn)
cpdef _policy_open(WorkerEngine self, conn, c_ptr, user)
cpdef _policy_info(WorkerEngine self, conn)
# _policy_link: def (a lambda or comprehension inside)
cpdef _police_transfer(WorkerEngine self, link, d_ptr, scan, payload, to)
cpdef _oversize(WorkerEngine self, d_ptr, link)
# engine_connections.py
cpdef _open_local(WorkerEngine self, conn)
# _on_conn_open: def (a lambda or comprehension inside)
cpdef _refuse_connection(WorkerEngine self, conn, condition, description)
cpdef _fx_close_connection(WorkerEngine self, fx)
# engine_links.py
cpdef _open_router_links(WorkerEngine self, conn)
cpdef _on_link_open(WorkerEngine self, l_ptr)
cpdef _attach_out(WorkerEngine self, fx)
cpdef _on_attach_answer(WorkerEngine self, link)
cpdef _on_link_close(WorkerEngine self, l_ptr, closed)
cpdef _session_links_lost(WorkerEngine self, conn, ssn)
cpdef _refuse_link(WorkerEngine self, l_ptr, conn, condition, description)
# _forget_link: def (a lambda or comprehension inside)
@cython.locals(link=Link)
cdef _on_flow(WorkerEngine self, size_t l_ptr)
cdef _report_flow(WorkerEngine self, Link link)
cpdef _fx_link_open(WorkerEngine self, fx)
cpdef _fx_link_refuse(WorkerEngine self, fx)
cpdef _fx_link_drain(WorkerEngine self, fx)
cpdef _fx_link_stall(WorkerEngine self, fx)
@cython.locals(link=Link)
cpdef _fx_credit(WorkerEngine self, fx)
cpdef _fx_drained(WorkerEngine self, fx)
cpdef _fx_detach_link(WorkerEngine self, fx)
# engine_deliveries.py
@cython.locals(l_ptr=size_t, settled=bint, d_key=object, link=Link, fields=tuple,
                conn=Connection)
cdef _on_delivery(WorkerEngine self, size_t d_ptr)
cpdef _sender_state(WorkerEngine self, d_ptr, dlv_id)
cpdef _routed_tag(WorkerEngine self, d, link, dlv_id)
cpdef _routed_transfer(WorkerEngine self, d_ptr, d_key, link, dlv_id, settled, cmd)
cdef _drop_aborted(WorkerEngine self, size_t d_ptr, size_t l_ptr)
cdef _reject_empty(WorkerEngine self, size_t d_ptr, size_t l_ptr)
cpdef _reject_local(WorkerEngine self, d_ptr, condition, description)
cdef _drop_in(WorkerEngine self, dlv_id)
@cython.locals(link=Link)
cpdef _fx_deliver(WorkerEngine self, fx)
@cython.locals(link=Link)
cpdef _fx_router_deliver(WorkerEngine self, fx)
@cython.locals(l_ptr=size_t, d_ptr=size_t, conn=Connection)
cdef _send(WorkerEngine self, Link link, dlv_id, bint settled, payload)
cdef _settle_for_receiver(WorkerEngine self, dlv_id, size_t d_ptr)
cpdef enqueue(WorkerEngine self, link, dlv_id, settled, payload)
cpdef refill(WorkerEngine self, conn)
cdef _log_message(WorkerEngine self, Link link, payload, bint sent)
cpdef _log_message_text(WorkerEngine self, link, what, sent)
cpdef _fx_deliver_tag(WorkerEngine self, fx)
cpdef _tagged_out(WorkerEngine self, l_ptr, dlv_id, settled)
cpdef _track_out(WorkerEngine self, dlv_id, d_ptr, link)
cdef _egress_annotations(WorkerEngine self, Connection conn, payload)
@cython.locals(conn=Connection)
cdef bint _strips_in(Link link, tuple fields) except -1
cdef bint _router_annotated(tuple fields) except -1
cdef _endpoint_to(Link link, tuple fields, bint stripped)
cdef _uplink_annotations(WorkerEngine self, payload, scan, to_override, long phase)
cdef _router_egress(WorkerEngine self, Connection conn, payload, to_override, phase)
# engine_dispositions.py
@cython.locals(state=uint64_t, settled=bint, d_key=object, entry=tuple)
cdef _on_outbound_update(WorkerEngine self, size_t d_ptr)
cpdef _routed_out_id(WorkerEngine self, d_ptr)
cpdef _fx_deliver_state(WorkerEngine self, fx)
# _waits_on_a_link: def (a lambda or comprehension inside)
cpdef _pending_state(WorkerEngine self, dlv_id, delivery)
cpdef _untrack_out(WorkerEngine self, dlv_id)
@cython.locals(d_ptr=size_t)
cpdef _fx_update_in(WorkerEngine self, fx)
@cython.locals(d_ptr=size_t)
cpdef _fx_settle_out(WorkerEngine self, fx)
cpdef _settle_queued(WorkerEngine self, dlv_id, state)
# engine_stream_in.py
# _forget_streams: def (a lambda or comprehension inside)
cpdef _stream_begin(WorkerEngine self, d, d_key, link)
cpdef _stream_in(WorkerEngine self, rec)
cpdef _stream_start(WorkerEngine self, rec, partial)
cpdef _stream_end(WorkerEngine self, rec, complete)
cpdef _q2_block(WorkerEngine self, rec)
cpdef _q2_unblock(WorkerEngine self, rec)
cpdef _fx_stream_ack(WorkerEngine self, fx)
cpdef _stream_in_settled(WorkerEngine self, dlv_id)
# engine_stream_out.py
cpdef _fx_stream_deliver(WorkerEngine self, fx)
cpdef _stream_go(WorkerEngine self, rec)
cpdef _stream_part(WorkerEngine self, rec, payload, ack, kind)
cpdef _fx_deliver_chunk(WorkerEngine self, fx)
cpdef _stream_part_sent(WorkerEngine self, entry, d_ptr)
cpdef _stream_settled(WorkerEngine self, dlv_id, state)
cpdef _stream_out_end(WorkerEngine self, rec)
# _stream_abort_out: def (a lambda or comprehension inside)
