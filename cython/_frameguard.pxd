# cython: language_level=3
# Augmenting declarations for the compiled SASL guard (pure-Python mode).
#
# setup.py copies src/router_io/frameguard.py to build/cython_src/router_io/_frameguard.py,
# puts this file next to it and compiles the pair as ``router_io._frameguard``: the .py stays
# the one source of the guard's behaviour (and the reference the tests hold the compiled one
# to, tests/unit/test_frameguard_builds.py); this file only adds C types. A guard reads a
# client's first bytes (header, sasl-init, AMQP header, open): what every accepted connection
# pays once.
cimport cython

cdef int _HEADER, _INIT, _RESPONSES, _AMQP, _DONE
cdef Py_ssize_t HEADER_SIZE, FRAME_HEADER_SIZE
cdef int SASL_FRAME, AMQP_FRAME, SASL_INIT, SASL_RESPONSE


@cython.final
cdef class SaslGuard:
    cdef bytearray _buf
    cdef int _state
    cdef public Py_ssize_t max_frame, frames
    cdef public list sasl_ends

    @cython.locals(buf=bytearray, pos=Py_ssize_t, end=Py_ssize_t, size=Py_ssize_t,
                   doff=Py_ssize_t, ftype=int, ends=list)
    cpdef bytes feed(self, data)
    cdef Py_ssize_t _header(self, bytearray buf, Py_ssize_t pos) except -1
    @cython.locals(kind=int)
    cdef int _frame(self, bytearray buf, Py_ssize_t body, Py_ssize_t end) except -1


cdef Py_ssize_t _u32(bytearray buf, Py_ssize_t pos)
@cython.locals(i=Py_ssize_t)
cdef bint _is_at(bytearray buf, Py_ssize_t pos, bytes header)
@cython.locals(i=Py_ssize_t)
cdef bint _amqp_next(bytearray buf, Py_ssize_t pos, Py_ssize_t end)
@cython.locals(code=int, first=Py_ssize_t, count=Py_ssize_t)
cdef int _check_init(bytearray buf, Py_ssize_t pos, Py_ssize_t end) except -1
