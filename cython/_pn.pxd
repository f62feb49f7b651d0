# Proton-C declarations for calling the library natively through function pointers.
#
# The C library is bundled inside the cffi module ``cproton_ffi`` (no header or .so to link
# against), so the compiled engine takes each function's address from cffi at import
# (``ffi.addressof(lib, name)``) and calls it through these typedefs. The signatures must match
# proton's exactly: check them with ``ffi.typeof(lib.pn_xxx)`` after a proton upgrade.
from libc.stdint cimport uint64_t, int64_t

cdef extern from *:
    ctypedef bint pn_bool_t "_Bool"  # proton returns C99 bool (one byte): never read it as int

ctypedef void pn_collector_t
ctypedef void pn_event_t
ctypedef void pn_link_t
ctypedef void pn_delivery_t
ctypedef void pn_transport_t

ctypedef struct pn_bytes_t:  # passed BY VALUE to pn_delivery()
    size_t size
    const char *start

ctypedef pn_event_t *(*pn_collector_peek_f)(pn_collector_t *) noexcept nogil
ctypedef pn_bool_t (*pn_collector_pop_f)(pn_collector_t *) noexcept nogil
ctypedef int (*pn_event_type_f)(pn_event_t *) noexcept nogil  # enum pn_event_type_t
ctypedef pn_delivery_t *(*pn_event_delivery_f)(pn_event_t *) noexcept nogil
ctypedef pn_link_t *(*pn_event_link_f)(pn_event_t *) noexcept nogil

ctypedef pn_link_t *(*pn_delivery_link_f)(pn_delivery_t *) noexcept nogil
ctypedef pn_bool_t (*pn_delivery_bool_f)(pn_delivery_t *) noexcept nogil  # partial/aborted/settled
ctypedef size_t (*pn_delivery_pending_f)(pn_delivery_t *) noexcept nogil
ctypedef void (*pn_delivery_settle_f)(pn_delivery_t *) noexcept nogil
ctypedef void (*pn_delivery_update_f)(pn_delivery_t *, uint64_t) noexcept nogil
ctypedef uint64_t (*pn_delivery_remote_state_f)(pn_delivery_t *) noexcept nogil
ctypedef pn_delivery_t *(*pn_delivery_f)(pn_link_t *, pn_bytes_t) noexcept nogil
ctypedef pn_bytes_t (*pn_delivery_tag_f)(pn_delivery_t *) noexcept nogil  # pn_delivery_tag_t
ctypedef pn_delivery_t *(*pn_link_current_f)(pn_link_t *) noexcept nogil

ctypedef Py_ssize_t (*pn_link_io_f)(pn_link_t *, char *, size_t) noexcept nogil  # recv/send
ctypedef pn_bool_t (*pn_link_bool_f)(pn_link_t *) noexcept nogil  # advance/get_drain
ctypedef int (*pn_link_int_f)(pn_link_t *) noexcept nogil         # credit/drained
ctypedef void (*pn_link_flow_f)(pn_link_t *, int) noexcept nogil

ctypedef Py_ssize_t (*pn_transport_io_f)(pn_transport_t *, char *, size_t) noexcept nogil
ctypedef Py_ssize_t (*pn_transport_size_f)(pn_transport_t *) noexcept nogil  # pending/capacity
ctypedef void (*pn_transport_pop_f)(pn_transport_t *, size_t) noexcept nogil
ctypedef pn_bool_t (*pn_transport_bool_f)(pn_transport_t *) noexcept nogil  # closed
