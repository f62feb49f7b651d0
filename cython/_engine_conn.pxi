# Included by _engine.pyx after the reference (router_io/engine.py): the worker loop's per-iteration
# byte I/O on a connection's transport, natively. Behaviour is the reference Connection's.

class NativeConnection(_RefConnection):
    """``router_io.engine.Connection`` with the byte I/O the worker loop calls per iteration in C."""

    def __init__(self, engine, conn_id, settings, host, direction):
        _RefConnection.__init__(self, engine, conn_id, settings, host, direction)
        self._t = _addr(self.t_ptr)

    def capacity(self):
        return pn.transport_capacity(<pn_transport_t *><size_t>self._t)

    def push(self, data, size):
        cdef Py_buffer view
        cdef Py_ssize_t n = size
        if n:
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
            try:
                if n < 0 or n > view.len:
                    raise ValueError(f"push of {n} bytes from a buffer of {view.len}")
                pn.transport_push(<pn_transport_t *><size_t>self._t, <char *>view.buf, <size_t>n)
            finally:
                PyBuffer_Release(&view)

    def pending(self):
        return pn.transport_pending(<pn_transport_t *><size_t>self._t)

    def output(self, buf):
        """Copy up to len(buf) pending output bytes into ``buf``; return how many (or -1 at EOS)."""
        cdef Py_buffer view
        cdef pn_transport_t *t = <pn_transport_t *><size_t>self._t
        cdef Py_ssize_t n = pn.transport_pending(t)
        if n <= 0:
            return n
        PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
        try:
            if n > view.len:
                n = view.len
            pn.transport_peek(t, <char *>view.buf, <size_t>n)
        finally:
            PyBuffer_Release(&view)
        return n

    def consumed(self, n):
        pn.transport_pop(<pn_transport_t *><size_t>self._t, <size_t>n)
        room = self.out_room + n  # the outbound byte budget (see engine.OUT_BUDGET)
        self.out_room = room if room < self.out_budget else self.out_budget
        if self.out_queue and room * 2 >= self.out_budget:
            self.engine.refill(self)

    def is_closed(self):
        return pn.transport_closed(<pn_transport_t *><size_t>self._t)
