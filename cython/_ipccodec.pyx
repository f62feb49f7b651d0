# cython: language_level=3, boundscheck=True, wraparound=True
"""The IPC batch codec, compiled build of ``common.ipccodec`` (the reference; same wire format,
same results, same errors: tests/unit/test_ipccodec.py proves them equal with Hypothesis).

The reference has msgpack pack a header of temporary tuples and unpack it into temporary lists,
then copies each list into its message. Here the header's msgpack is written and read directly:
a batch is encoded into one reused C buffer, and each item is decoded straight into its message
(one allocation, fields read in place), with no temporaries and no generic dispatch. That covers
what the router's processes send each other (None, bool, int, float, str, bytes, lists, tuples,
dicts, nested a few levels deep). Anything else, on either side (another type, an int msgpack
cannot hold, a str that is not UTF-8, ext types, a header not shaped as the codec writes it,
any malformed or damaged frame), takes the reference's way, through msgpack (``_encode_msgpack``,
``_decode_msgpack``): the fast paths only ever succeed where msgpack would produce or read the
same bytes and values, so the errors stay the reference's. Bounds and index checks stay on:
every length comes from another process.

This module must not import proton, zmq or anything of the router (``common.ipc`` gives it its
tables).
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong,
                           PyLong_FromLongLong, PyLong_FromUnsignedLongLong)
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

import struct

import msgpack

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyFloat_FromDouble(double v)
    double PyFloat_AS_DOUBLE(object f)

cdef extern from *:
    """
    /* An instance of the tuple subclass ``cls`` (a NamedTuple) holding item[1:] (``item`` a
       list of n + 1 objects); its last field is ``last`` instead when ``last`` is not NULL.
       What tuple.__new__(cls, item[1:]) does, without the temporary list. */
    static PyObject *qdr_ipc_message(PyTypeObject *cls, PyObject *item, Py_ssize_t n,
                                     PyObject *last) {
        Py_ssize_t i;
        PyObject *obj = cls->tp_alloc(cls, n);
        if (obj == NULL) return NULL;
        for (i = 0; i < n; i++) {
            PyObject *v = (last != NULL && i == n - 1) ? last : PyList_GET_ITEM(item, i + 1);
            Py_INCREF(v);
            PyTuple_SET_ITEM(obj, i, v);
        }
        return obj;
    }
    /* An empty instance of the tuple subclass ``cls`` with n fields, for filling in place. */
    static PyObject *qdr_ipc_empty(PyTypeObject *cls, Py_ssize_t n) {
        return cls->tp_alloc(cls, n);
    }
    static inline uint64_t qdr_be(const unsigned char *p, int n) {
        uint64_t v = 0;
        int i;
        for (i = 0; i < n; i++) v = (v << 8) | p[i];
        return v;
    }
    static inline void qdr_put_be(unsigned char *p, uint64_t v, int n) {
        int i;
        for (i = n - 1; i >= 0; i--) { p[i] = (unsigned char)(v & 0xff); v >>= 8; }
    }
    static inline double qdr_f64(uint64_t bits) { double d; memcpy(&d, &bits, 8); return d; }
    static inline double qdr_f32(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }
    static inline uint64_t qdr_f64_bits(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }
    """
    object qdr_ipc_message(type cls, list item, Py_ssize_t n, PyObject* last)
    object qdr_ipc_empty(type cls, Py_ssize_t n)
    uint64_t qdr_be(const unsigned char* p, int n) noexcept nogil
    void qdr_put_be(unsigned char* p, uint64_t v, int n) noexcept nogil
    double qdr_f64(uint64_t bits) noexcept nogil
    double qdr_f32(uint32_t bits) noexcept nogil
    uint64_t qdr_f64_bits(double d) noexcept nogil

_HEADER_LEN = struct.Struct("<I")
_pack_len = _HEADER_LEN.pack
_unpack_len = _HEADER_LEN.unpack_from
_unpackb = msgpack.unpackb
_UnpackException = msgpack.UnpackException

# Nesting the fast paths take; deeper values go through msgpack (which has its own limits).
DEF MAX_DEPTH = 32
# What a fast reader returns when msgpack must decide (never a value it can decode).
cdef object _MSGPACK = object()


@cython.final
cdef class Codec:
    """Encodes and decodes batches for one schema version (see ``common.ipccodec.Codec``)."""

    cdef readonly object version
    cdef readonly dict encode_table
    cdef readonly dict decode_table
    cdef readonly object error
    cdef object _pack
    cdef list _by_code          # decode_table's entries by code, for codes 0..127
    cdef unsigned char* _buf    # the header being encoded (reused, grows)
    cdef Py_ssize_t _len, _cap

    def __init__(self, version, dict encode_table, dict decode_table, error):
        self.version = version
        self.encode_table = encode_table
        self.decode_table = decode_table
        self.error = error
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._by_code = [decode_table.get(code) if type(code) is int else None
                         for code in range(128)]

    def __dealloc__(self):
        PyMem_Free(self._buf)

    # ---- encoding -------------------------------------------------------------------------
    cdef inline unsigned char* _room(self, Py_ssize_t n) except NULL:
        """``n`` more bytes at the end of the header buffer."""
        cdef Py_ssize_t cap
        cdef void* grown
        if self._len + n > self._cap:
            cap = self._cap * 2 if self._cap else 4096
            while cap < self._len + n:
                cap *= 2
            grown = PyMem_Realloc(self._buf, cap)
            if grown == NULL:
                raise MemoryError()
            self._buf = <unsigned char*>grown
            self._cap = cap
        cdef unsigned char* p = self._buf + self._len
        self._len += n
        return p

    cdef inline int _coded(self, unsigned char code, uint64_t bits, int width) except -1:
        """``code``, then the low ``width`` bytes of ``bits``, big-endian."""
        cdef unsigned char* p = self._room(1 + width)
        p[0] = code
        qdr_put_be(p + 1, bits, width)
        return 0

    cdef int _head(self, unsigned char fix, unsigned char limit, unsigned char c16,
                   uint64_t n) except -1:
        """A header for a size ``n`` (array, map, str, bin), in msgpack's smallest form:
        ``fix | n`` below ``limit`` (fix 0: no fix form), then 8 (str, bin), 16, 32 bits
        (``c16`` the 16-bit code; the 8-bit code is c16 - 1, the 32-bit c16 + 1)."""
        if n < limit:
            return self._coded(fix | <unsigned char>n, 0, 0)
        if n < 256 and (c16 == 0xda or c16 == 0xc5):  # str8 (use_bin_type), bin8
            return self._coded(c16 - 1, n, 1)
        if n < 65536:
            return self._coded(c16, n, 2)
        return self._coded(c16 + 1, n, 4)

    cdef int _int(self, object o) except -1:
        """An int as msgpack writes it (its smallest form); 1 if msgpack must (out of its
        range)."""
        cdef int overflow = 0
        cdef long long v = PyLong_AsLongLongAndOverflow(o, &overflow)
        cdef unsigned long long u
        if overflow < 0:
            return 1
        if overflow > 0:
            try:
                u = PyLong_AsUnsignedLongLong(o)
            except OverflowError:
                return 1
            return self._coded(0xcf, u, 8)
        if v < -32:  # int8..int64: two's complement, the low bytes
            if v < -2147483648:
                return self._coded(0xd3, <uint64_t>v, 8)
            if v < -32768:
                return self._coded(0xd2, <uint64_t>v, 4)
            if v < -128:
                return self._coded(0xd1, <uint64_t>v, 2)
            return self._coded(0xd0, <uint64_t>v, 1)
        if v < 128:  # positive and negative fixint
            return self._coded(<unsigned char>(v & 0xff), 0, 0)
        if v < 256:
            return self._coded(0xcc, <uint64_t>v, 1)
        if v < 65536:
            return self._coded(0xcd, <uint64_t>v, 2)
        if v < 4294967296:
            return self._coded(0xce, <uint64_t>v, 4)
        return self._coded(0xcf, <uint64_t>v, 8)

    cdef int _value(self, object o, int depth) except -1:
        """``o`` as msgpack (use_bin_type) writes it; 1 if msgpack must write it instead."""
        cdef const char* data
        cdef Py_ssize_t n
        cdef int r
        t = type(o)
        if o is None:
            self._coded(0xc0, 0, 0)
        elif o is True:
            self._coded(0xc3, 0, 0)
        elif o is False:
            self._coded(0xc2, 0, 0)
        elif t is int:
            return self._int(o)
        elif t is str:
            try:
                data = PyUnicode_AsUTF8AndSize(o, &n)
            except UnicodeError:
                return 1
            if n > 0xffffffff:
                return 1
            self._head(0xa0, 32, 0xda, n)
            memcpy(self._room(n), data, n)
        elif t is bytes:
            n = PyBytes_GET_SIZE(o)
            if n > 0xffffffff:
                return 1
            self._head(0, 0, 0xc5, n)
            memcpy(self._room(n), PyBytes_AS_STRING(o), n)
        elif t is list or t is tuple:
            if depth >= MAX_DEPTH:
                return 1
            n = len(o)
            self._head(0x90, 16, 0xdc, n)
            for v in o:
                r = self._value(v, depth + 1)
                if r:
                    return r
        elif t is dict:
            if depth >= MAX_DEPTH:
                return 1
            self._head(0x80, 16, 0xde, len(<dict>o))
            for k, v in (<dict>o).items():
                r = self._value(k, depth + 1)
                if r:
                    return r
                r = self._value(v, depth + 1)
                if r:
                    return r
        elif t is float:
            self._coded(0xcb, qdr_f64_bits(PyFloat_AS_DOUBLE(o)), 8)
        else:
            return 1
        return 0

    def encode(self, peer, messages):
        """The one frame of a batch (see ``common.ipccodec.Codec.encode``)."""
        cdef list msgs = messages if type(messages) is list else list(messages)
        cdef list payloads = []
        cdef dict table = self.encode_table
        cdef tuple entry, msg
        cdef Py_ssize_t n, i, last, header
        self._len = 0
        self._room(5)[4] = 0x93  # 4 bytes for the header's length, then [version, peer, items]
        if self._value(self.version, 0) or self._value(peer, 0):
            return self._encode_msgpack(peer, msgs)
        self._head(0x90, 16, 0xdc, PyList_GET_SIZE(msgs))
        for m in msgs:
            entry = table[type(m)]
            msg = <tuple>m  # a message class of the table: a NamedTuple, so a tuple
            n = PyTuple_GET_SIZE(msg)
            self._head(0x90, 16, 0xdc, n + 1)
            if self._value(<object>PyTuple_GET_ITEM(entry, 0), 1):
                return self._encode_msgpack(peer, msgs)
            last = n - 1 if entry[1] else n   # a payload's length replaces it
            for i in range(last):
                if self._value(<object>PyTuple_GET_ITEM(msg, i), 1):
                    return self._encode_msgpack(peer, msgs)
            if last < n:
                payload = <object>PyTuple_GET_ITEM(msg, last)
                if self._value(len(payload), 1):
                    return self._encode_msgpack(peer, msgs)
                payloads.append(payload)
        header = self._len - 4
        if header > 0xffffffff:
            return self._encode_msgpack(peer, msgs)
        self._buf[0] = header & 0xff  # the header's length, little-endian
        self._buf[1] = (header >> 8) & 0xff
        self._buf[2] = (header >> 16) & 0xff
        self._buf[3] = (header >> 24) & 0xff
        return self._with_payloads(peer, msgs, payloads)

    cdef object _with_payloads(self, peer, list msgs, list payloads):
        """The frame: the encoded header, then every payload's bytes. Each payload's buffer is
        taken once (sized, then copied, then released); one that offers none goes msgpack's
        way, which raises what the reference does."""
        cdef Py_ssize_t count = PyList_GET_SIZE(payloads), got = 0, k, total = self._len
        cdef Py_buffer* views = <Py_buffer*>PyMem_Malloc((count or 1) * sizeof(Py_buffer))
        cdef unsigned char* out
        if views == NULL:
            raise MemoryError()
        try:
            for k in range(count):
                try:
                    PyObject_GetBuffer(<object>PyList_GET_ITEM(payloads, k), &views[k],
                                       PyBUF_SIMPLE)
                except Exception:  # noqa: BLE001 - msgpack's way raises what the reference does
                    return self._encode_msgpack(peer, msgs)
                got += 1
                total += views[k].len
            frame = PyBytes_FromStringAndSize(NULL, total)
            out = <unsigned char*>PyBytes_AS_STRING(frame)
            memcpy(out, self._buf, self._len)
            out += self._len
            for k in range(count):
                memcpy(out, views[k].buf, views[k].len)
                out += views[k].len
            return frame
        finally:
            for k in range(got):
                PyBuffer_Release(&views[k])
            PyMem_Free(views)

    def _encode_msgpack(self, peer, list messages):
        """The reference's encoding (msgpack packs the header): every case the fast path
        leaves to msgpack, with msgpack's results and errors."""
        cdef list parts = [b"", b""]
        cdef list items = []
        cdef tuple entry, msg, item
        cdef Py_ssize_t n, i, last
        cdef object v, payload
        cdef dict table = self.encode_table
        for m in messages:
            entry = table[type(m)]
            msg = <tuple>m  # a message class of the table: a NamedTuple, so a tuple
            n = PyTuple_GET_SIZE(msg)
            item = PyTuple_New(n + 1)
            v = entry[0]
            Py_INCREF(v)
            PyTuple_SET_ITEM(item, 0, v)
            last = n - 1 if entry[1] else n   # a payload's length replaces it
            for i in range(last):
                v = <object>PyTuple_GET_ITEM(msg, i)
                Py_INCREF(v)
                PyTuple_SET_ITEM(item, i + 1, v)
            if last < n:
                payload = <object>PyTuple_GET_ITEM(msg, last)
                v = len(payload)
                Py_INCREF(v)
                PyTuple_SET_ITEM(item, n, v)
                parts.append(payload)
            items.append(item)
        header = self._pack([self.version, peer, items])
        parts[0] = _pack_len(len(header))
        parts[1] = header
        return b"".join(parts)

    # ---- decoding -------------------------------------------------------------------------
    def decode(self, frame):
        """``(peer, [message, ...])`` of one batch frame (see ``common.ipccodec.Codec``)."""
        cdef Py_buffer buf
        view = memoryview(frame.buffer if hasattr(frame, "buffer") else frame)
        try:
            PyObject_GetBuffer(view, &buf, PyBUF_SIMPLE)
        except BufferError:  # not one contiguous run of bytes
            return self._decode_msgpack(view)
        try:  # (a view of wider items is measured in items: msgpack's way, as the reference)
            batch = (self._decode_direct(<const unsigned char*>buf.buf, buf.len, view)
                     if buf.len == len(view) else None)
        finally:
            PyBuffer_Release(&buf)
        if batch is None:
            return self._decode_msgpack(view)
        return batch

    cdef object _decode_direct(self, const unsigned char* b, Py_ssize_t size, object view):
        """The batch read in place, or None where msgpack must read it (anything but a
        well-formed header as this codec writes it, with values of the types it writes)."""
        cdef Py_ssize_t pos, end, offset, n_items, n, nfields, i, length
        cdef list out
        cdef tuple entry
        cdef unsigned char c
        if size < 5:
            return None
        end = 4 + <Py_ssize_t>(b[0] | (b[1] << 8) | (b[2] << 16) | (<uint32_t>b[3] << 24))
        if end > size or b[4] != 0x93:
            return None
        pos = 5
        version = _read(b, &pos, end, 0)
        if version is _MSGPACK or version != self.version:
            return None
        peer = _read(b, &pos, end, 0)
        if peer is _MSGPACK:
            return None
        n_items = _array_head(b, &pos, end)
        if n_items < 0:
            return None
        out = []
        offset = end
        for _ in range(n_items):
            n = _array_head(b, &pos, end)
            if n < 1 or pos >= end:
                return None
            c = b[pos]
            if c < 0x80:
                pos += 1
                entry_obj = self._by_code[c]
            else:
                code = _read(b, &pos, end, 1)
                if code is _MSGPACK:
                    return None
                try:
                    entry_obj = self.decode_table.get(code)
                except TypeError:  # unhashable
                    return None
            if entry_obj is None:
                return None
            entry = <tuple>entry_obj
            cls = <object>PyTuple_GET_ITEM(entry, 0)
            nfields = <object>PyTuple_GET_ITEM(entry, 1)
            if n != nfields + 1:
                return None
            msg = qdr_ipc_empty(cls, nfields)
            if <object>PyTuple_GET_ITEM(entry, 2):
                nfields -= 1
            for i in range(nfields):
                v = _read(b, &pos, end, 1)
                if v is _MSGPACK:
                    return None
                Py_INCREF(v)
                PyTuple_SET_ITEM(msg, i, v)
            if nfields < n - 1:  # the payload: its length here, its bytes after the header
                v = _read(b, &pos, end, 1)
                if type(v) is not int or v < 0 or v > size - offset:
                    return None
                length = v
                v = view[offset:offset + length]
                offset += length
                Py_INCREF(v)
                PyTuple_SET_ITEM(msg, nfields, v)
            out.append(msg)
        if pos != end or offset != size:
            return None
        return peer, out

    def _decode_msgpack(self, view):
        """The reference's decoding (msgpack unpacks the header into lists): every frame the
        direct reader leaves to msgpack, with msgpack's results and the reference's errors."""
        cdef Py_ssize_t size, start, offset, end, nfields
        cdef list item, out
        cdef tuple entry
        cdef object piece
        error = self.error
        size = len(view)
        if size < 4:
            raise error("batch frame shorter than its header length")
        start = 4 + <Py_ssize_t>_unpack_len(view)[0]
        if start > size:
            raise error("header length overruns the batch frame")
        try:
            version, peer, items = _unpackb(view[4:start], raw=False, use_list=True,
                                            strict_map_key=False)
        except (ValueError, TypeError, _UnpackException) as exc:
            raise error(f"bad batch header: {exc}") from exc
        if version != self.version:
            raise error(f"IPC version {version} is not {self.version}")
        cdef dict table = self.decode_table
        offset = start
        out = []
        try:
            for it in items:
                if type(it) is not list:
                    raise TypeError(f"an item is a list, not {type(it).__name__}")
                item = <list>it
                entry = table[item[0]]
                cls, nfields, has_payload = entry
                if PyList_GET_SIZE(item) != nfields + 1:
                    raise error(f"{cls.__name__} needs {nfields} fields, got "
                                f"{PyList_GET_SIZE(item) - 1}")
                if has_payload:
                    end = offset + <Py_ssize_t>item[-1]
                    if end > size or end < offset:
                        raise error("payload lengths overrun the batch frame")
                    piece = view[offset:end]
                    offset = end
                    out.append(qdr_ipc_message(cls, item, nfields, <PyObject*>piece))
                else:
                    out.append(qdr_ipc_message(cls, item, nfields, NULL))
        except (KeyError, IndexError, TypeError, OverflowError) as exc:
            raise error(f"bad batch item: {exc!r}") from exc
        if offset != size:
            raise error("batch frame longer than its items")
        return peer, out


# ---- reading msgpack in place -----------------------------------------------------------------
cdef Py_ssize_t _array_head(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end):
    """The size of the array at ``pos`` (moved past its header), or -1 if there is none."""
    cdef Py_ssize_t p = pos[0]
    cdef unsigned char c
    if p >= end:
        return -1
    c = b[p]
    if 0x90 <= c <= 0x9f:
        pos[0] = p + 1
        return c & 0x0f
    if c == 0xdc and p + 3 <= end:
        pos[0] = p + 3
        return <Py_ssize_t>qdr_be(b + p + 1, 2)
    if c == 0xdd and p + 5 <= end:
        pos[0] = p + 5
        return <Py_ssize_t>qdr_be(b + p + 1, 4)
    return -1


cdef object _read(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end, int depth):
    """The value at ``pos`` as msgpack.unpackb(raw=False, use_list=True, strict_map_key=False)
    gives it, ``pos`` moved past it; ``_MSGPACK`` where msgpack must decide (ext types,
    invalid UTF-8, unhashable keys, truncation, nesting past MAX_DEPTH)."""
    cdef Py_ssize_t p = pos[0], n, i, w
    cdef unsigned char c
    if p >= end:
        return _MSGPACK
    c = b[p]
    if c < 0x80:
        pos[0] = p + 1
        return <long>c
    if c >= 0xe0:
        pos[0] = p + 1
        return <long>c - 256
    if 0xa0 <= c <= 0xbf:          # fixstr
        n = c & 0x1f
        p += 1
        return _text(b, pos, p, n, end)
    if c <= 0x9f:                  # fixmap, fixarray
        n = c & 0x0f
        pos[0] = p + 1
        if c >= 0x90:
            return _list(b, pos, end, n, depth)
        return _map(b, pos, end, n, depth)
    if c == 0xc0:
        pos[0] = p + 1
        return None
    if c == 0xc2:
        pos[0] = p + 1
        return False
    if c == 0xc3:
        pos[0] = p + 1
        return True
    if 0xcc <= c <= 0xd3:          # uint8..64, int8..64
        w = 1 << ((c - 0xcc) & 3)
        if p + 1 + w > end:
            return _MSGPACK
        pos[0] = p + 1 + w
        if c <= 0xcf:
            return PyLong_FromUnsignedLongLong(qdr_be(b + p + 1, <int>w))
        if w == 1:
            return <long>(<signed char>b[p + 1])
        if w == 2:
            return <long>(<short>(<uint16_t>qdr_be(b + p + 1, 2)))
        if w == 4:
            return <long>(<int>(<uint32_t>qdr_be(b + p + 1, 4)))
        return PyLong_FromLongLong(<long long>qdr_be(b + p + 1, 8))
    if c == 0xcb or c == 0xca:
        w = 9 if c == 0xcb else 5
        if p + w > end:
            return _MSGPACK
        pos[0] = p + w
        if c == 0xcb:
            return PyFloat_FromDouble(qdr_f64(qdr_be(b + p + 1, 8)))
        return PyFloat_FromDouble(qdr_f32(<uint32_t>qdr_be(b + p + 1, 4)))
    if c == 0xd9 or c == 0xda or c == 0xdb or c == 0xc4 or c == 0xc5 or c == 0xc6:
        w = 1 << ((c - 0xd9) if c >= 0xd9 else (c - 0xc4))   # bytes of the length
        if p + 1 + w > end:
            return _MSGPACK
        n = <Py_ssize_t>qdr_be(b + p + 1, <int>w)
        p += 1 + w
        if c >= 0xd9:
            return _text(b, pos, p, n, end)
        if n > end - p:
            return _MSGPACK
        pos[0] = p + n
        return PyBytes_FromStringAndSize(<const char*>b + p, n)
    if c == 0xdc or c == 0xdd or c == 0xde or c == 0xdf:
        w = 2 if c == 0xdc or c == 0xde else 4
        if p + 1 + w > end:
            return _MSGPACK
        n = <Py_ssize_t>qdr_be(b + p + 1, <int>w)
        pos[0] = p + 1 + w
        if c <= 0xdd:
            return _list(b, pos, end, n, depth)
        return _map(b, pos, end, n, depth)
    return _MSGPACK                # 0xc1 (never used), ext types: msgpack decides


cdef object _text(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t p, Py_ssize_t n,
                  Py_ssize_t end):
    if n > end - p:
        return _MSGPACK
    try:
        s = PyUnicode_DecodeUTF8(<char*>b + p, n, NULL)
    except UnicodeDecodeError:
        return _MSGPACK
    pos[0] = p + n
    return s


cdef object _list(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end, Py_ssize_t n,
                  int depth):
    cdef list out = []
    if depth >= MAX_DEPTH or n > end - pos[0]:
        return _MSGPACK
    for _ in range(n):
        v = _read(b, pos, end, depth + 1)
        if v is _MSGPACK:
            return _MSGPACK
        out.append(v)
    return out


cdef object _map(const unsigned char* b, Py_ssize_t* pos, Py_ssize_t end, Py_ssize_t n,
                 int depth):
    cdef dict out = {}
    if depth >= MAX_DEPTH or n > (end - pos[0]) // 2:
        return _MSGPACK
    for _ in range(n):
        k = _read(b, pos, end, depth + 1)
        if k is _MSGPACK or type(k) is list or type(k) is dict:
            return _MSGPACK
        v = _read(b, pos, end, depth + 1)
        if v is _MSGPACK:
            return _MSGPACK
        PyDict_SetItem(out, k, v)
    return out
