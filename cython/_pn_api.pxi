# Included by _engine.pyx: proton-C's per-message functions, called through pointers that cffi
# gives (the library is bundled inside cproton_ffi; there is nothing to link against). Filled once
# at import; the typedefs (exact C signatures) are in _pn.pxd.

cdef size_t _fn(str name) except 0:
    return <size_t>int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))


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
pn.collector_peek = <pn_collector_peek_f>_fn("pn_collector_peek")
pn.collector_pop = <pn_collector_pop_f>_fn("pn_collector_pop")
pn.event_type = <pn_event_type_f>_fn("pn_event_type")
pn.event_delivery = <pn_event_delivery_f>_fn("pn_event_delivery")
pn.event_link = <pn_event_link_f>_fn("pn_event_link")
pn.delivery_link = <pn_delivery_link_f>_fn("pn_delivery_link")
pn.delivery_partial = <pn_delivery_bool_f>_fn("pn_delivery_partial")
pn.delivery_aborted = <pn_delivery_bool_f>_fn("pn_delivery_aborted")
pn.delivery_settled = <pn_delivery_bool_f>_fn("pn_delivery_settled")
pn.delivery_pending = <pn_delivery_pending_f>_fn("pn_delivery_pending")
pn.delivery_settle = <pn_delivery_settle_f>_fn("pn_delivery_settle")
pn.delivery_update = <pn_delivery_update_f>_fn("pn_delivery_update")
pn.delivery_remote_state = <pn_delivery_remote_state_f>_fn("pn_delivery_remote_state")
pn.delivery = <pn_delivery_f>_fn("pn_delivery")
pn.link_recv = <pn_link_io_f>_fn("pn_link_recv")
pn.link_send = <pn_link_io_f>_fn("pn_link_send")
pn.link_advance = <pn_link_bool_f>_fn("pn_link_advance")
pn.link_get_drain = <pn_link_bool_f>_fn("pn_link_get_drain")
pn.link_credit = <pn_link_int_f>_fn("pn_link_credit")
pn.link_drained = <pn_link_int_f>_fn("pn_link_drained")
pn.link_flow = <pn_link_flow_f>_fn("pn_link_flow")
pn.transport_push = <pn_transport_io_f>_fn("pn_transport_push")
pn.transport_peek = <pn_transport_io_f>_fn("pn_transport_peek")
pn.transport_pop = <pn_transport_pop_f>_fn("pn_transport_pop")
pn.transport_pending = <pn_transport_size_f>_fn("pn_transport_pending")
pn.transport_capacity = <pn_transport_size_f>_fn("pn_transport_capacity")
pn.transport_closed = <pn_transport_bool_f>_fn("pn_transport_closed")
