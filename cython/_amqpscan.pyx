# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Forwarding-path message scanner, compiled build of ``common.amqpscan``.

Owns nothing new: it implements exactly the rules documented in ``amqpscan`` (the
reference) on a raw pointer into the message (``bytes`` directly, anything else through the
buffer protocol), creating Python objects only for the results. Every read is checked against
the end of the value's container before it happens. Error classes, ``ScanResult`` and ``KEEP``
come from ``common.amqpscan_types`` so both builds share them.

This module must not import proton, zmq, ``amqpscan`` or any process package.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from common.amqpscan_types import KEEP, MessageFormatError, ScanResult

__all__ = ["scan", "has_annotations", "rewrite_annotations", "subject", "ScanResult", "KEEP",
           "MessageFormatError"]

ctypedef const unsigned char* cbuf

cdef extern from "Python.h":
    ctypedef struct _TypeObject "PyTypeObject":
        PyObject* (*tp_alloc)(_TypeObject*, Py_ssize_t)
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

cdef enum:
    SIZE1 = -1      # payload has a 1-byte size prefix
    SIZE4 = -4      # payload has a 4-byte size prefix
    BAD = -9        # not an AMQP constructor

cdef signed char _WIDTH[256]
cdef int _i
for _i in range(256):
    _WIDTH[_i] = BAD
for _i in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
    _WIDTH[_i] = 0
for _i in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56):
    _WIDTH[_i] = 1
for _i in (0x60, 0x61):
    _WIDTH[_i] = 2
for _i in (0x70, 0x71, 0x72, 0x73, 0x74):
    _WIDTH[_i] = 4
for _i in (0x80, 0x81, 0x82, 0x83, 0x84):
    _WIDTH[_i] = 8
for _i in (0x94, 0x98):
    _WIDTH[_i] = 16
for _i in (0xa0, 0xa1, 0xa3, 0xc0, 0xc1, 0xe0):
    _WIDTH[_i] = SIZE1
for _i in (0xb0, 0xb1, 0xb3, 0xd0, 0xd1, 0xf0):
    _WIDTH[_i] = SIZE4

cdef object _KEEP = KEEP
cdef object _MFE = MessageFormatError
cdef object _RESULT_CLASS = ScanResult       # keeps the type alive for the raw pointer below
cdef _TypeObject* _RESULT_TYPE = <_TypeObject*>_RESULT_CLASS

cdef enum Key:
    K_USER, K_TO, K_PHASE, K_INGRESS, K_TRACE, K_OTHER


cdef inline uint32_t _be32(cbuf p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint64_t _be64(cbuf p) noexcept nogil:
    return (<uint64_t>_be32(p) << 32) | _be32(p + 4)


cdef int _truncated(Py_ssize_t pos) except -1:
    raise _MFE(f"message truncated or value overruns its container at offset {pos}")


cdef int _malformed(str what, Py_ssize_t pos) except -1:
    raise _MFE(f"{what} at offset {pos}")


cdef Py_ssize_t _skip(cbuf b, Py_ssize_t pos, Py_ssize_t end) except -1:
    cdef Py_ssize_t pending = 1
    cdef unsigned char code
    cdef signed char width
    while pending:
        if pos >= end:
            _truncated(pos)
        code = b[pos]
        pos += 1
        if code == 0x00:
            pending += 1
            continue
        width = _WIDTH[code]
        if width >= 0:
            pos += width
        elif width == SIZE1:
            if pos >= end:
                _truncated(pos)
            pos += 1 + b[pos]
        elif width == SIZE4:
            if pos + 4 > end:
                _truncated(pos)
            pos += 4 + <Py_ssize_t>_be32(b + pos)
        else:
            _malformed(f"invalid constructor 0x{code:02x}", pos - 1)
        if pos > end:
            _truncated(pos)
        pending -= 1
    return pos


cdef Py_ssize_t _string_span(cbuf b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* start) except -2:
    """End of the str/sym at ``pos`` (its data starts at ``start[0]``), or -1 if not one."""
    cdef unsigned char code = b[pos]
    cdef Py_ssize_t stop
    if code == 0xa1 or code == 0xa3:
        if pos + 2 > end:
            _truncated(pos)
        start[0] = pos + 2
        stop = pos + 2 + b[pos + 1]
    elif code == 0xb1 or code == 0xb3:
        if pos + 5 > end:
            _truncated(pos + 1)
        start[0] = pos + 5
        stop = pos + 5 + <Py_ssize_t>_be32(b + pos + 1)
    else:
        return -1
    if stop > end:
        _truncated(pos)
    return stop


cdef object _decode(cbuf b, Py_ssize_t start, Py_ssize_t stop):
    try:
        return PyUnicode_DecodeUTF8(<const char*>b + start, stop - start, NULL)
    except UnicodeDecodeError:
        raise _MFE(f"invalid UTF-8 at offset {start}") from None


cdef Py_ssize_t _compound(cbuf b, Py_ssize_t pos, Py_ssize_t end, unsigned char c8,
                          Py_ssize_t* count, Py_ssize_t* first) except -1:
    """End of the list (c8=0xc0) or map (c8=0xc1) at ``pos``; list0/null count as empty."""
    cdef unsigned char code = b[pos]
    cdef Py_ssize_t size, stop = 0
    if code == c8:
        if pos + 3 > end:
            _truncated(pos)
        size = b[pos + 1]
        count[0] = b[pos + 2]
        first[0] = pos + 3
        stop = pos + 2 + size
        if size < 1:
            _malformed("compound size too small", pos)
    elif code == c8 + 0x10:
        if pos + 9 > end:
            _truncated(pos + 1 if pos + 5 > end else pos + 5)
        size = _be32(b + pos + 1)
        count[0] = _be32(b + pos + 5)
        first[0] = pos + 9
        stop = pos + 5 + size
        if size < 4:
            _malformed("compound size too small", pos)
    elif code == (0x45 if c8 == 0xc0 else 0x40):
        count[0] = 0
        first[0] = pos + 1
        return pos + 1
    else:
        _malformed("expected a list" if c8 == 0xc0 else "expected a map", pos)
    if stop > end:
        _truncated(pos)
    return stop


cdef Py_ssize_t _list_field(cbuf b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t index,
                            Py_ssize_t* stop) except -2:
    """Offset of field ``index`` of the list at ``pos`` or -1; ``stop[0]`` = list end."""
    cdef Py_ssize_t count, item, i
    stop[0] = _compound(b, pos, end, 0xc0, &count, &item)
    if count <= index:
        return -1
    for i in range(index):
        item = _skip(b, item, stop[0])
    if item >= stop[0]:
        _truncated(item)
    return item


cdef Py_ssize_t _section(cbuf b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* value) except -1:
    """Code of the section starting at ``pos``; ``value[0]`` = offset of its value. 0x1ff
    (the reference's OPAQUE, ``value[0]`` = pos) where no section begins."""
    cdef Py_ssize_t code = 0
    cdef uint64_t wide
    if b[pos] != 0x00:
        value[0] = pos
        return 0x1ff
    if pos + 2 > end:
        _truncated(pos)
    if b[pos + 1] == 0x53:
        if pos + 3 > end:
            _truncated(pos)
        code = b[pos + 2]
        value[0] = pos + 3
    elif b[pos + 1] == 0x80:
        if pos + 10 > end:
            _truncated(pos)
        wide = _be64(b + pos + 2)
        code = <Py_ssize_t>wide if wide <= 0xff else 0x1ff
        value[0] = pos + 10
    else:
        value[0] = pos
        return 0x1ff
    if code < 0x70 or code > 0x78:
        value[0] = pos
        return 0x1ff
    if value[0] >= end:
        _truncated(value[0])
    return code


cdef object _opt_string(cbuf b, Py_ssize_t pos, Py_ssize_t end):
    cdef Py_ssize_t start
    cdef Py_ssize_t stop = _string_span(b, pos, end, &start)
    return None if stop < 0 else _decode(b, start, stop)


cdef object _opt_int(cbuf b, Py_ssize_t pos):
    cdef unsigned char code = b[pos]
    if code == 0x43 or code == 0x44:
        return 0
    if code == 0x50 or code == 0x52 or code == 0x53:
        return b[pos + 1]
    if code == 0x51 or code == 0x54 or code == 0x55:
        return <signed char>b[pos + 1]
    if code == 0x60:
        return (b[pos + 1] << 8) | b[pos + 2]
    if code == 0x61:
        return <short>((b[pos + 1] << 8) | b[pos + 2])
    if code == 0x70:
        return _be32(b + pos + 1)
    if code == 0x71:
        return <int>_be32(b + pos + 1)
    if code == 0x80:
        return _be64(b + pos + 1)
    if code == 0x81:
        return <int64_t>_be64(b + pos + 1)
    return None


cdef object _opt_trace(cbuf b, Py_ssize_t pos, Py_ssize_t end):
    """A list or array of strings/symbols, else None; the value's framing is already valid."""
    cdef unsigned char code = b[pos], ctor
    cdef Py_ssize_t count = 0, elem, stop = 0, start, i, size
    cdef list out = []
    if code == 0xe0 or code == 0xf0:
        if code == 0xe0:
            if pos + 3 > end:
                _truncated(pos)
            size, count, elem = b[pos + 1], b[pos + 2], pos + 3
            stop = pos + 2 + size
            if size < 2 or stop > end:
                _truncated(pos)
        else:
            if pos + 9 > end:
                _truncated(pos)
            size, count, elem = _be32(b + pos + 1), _be32(b + pos + 5), pos + 9
            stop = pos + 5 + size
            if size < 5 or stop > end:
                _truncated(pos)
        if count == 0:
            return out
        ctor = b[elem]
        if ctor != 0xa1 and ctor != 0xa3 and ctor != 0xb1 and ctor != 0xb3:
            return None
        elem += 1
        for i in range(count):
            if ctor == 0xa1 or ctor == 0xa3:
                if elem >= stop:
                    _truncated(elem)
                start = elem + 1
                elem = start + b[elem]
            else:
                if elem + 4 > stop:
                    _truncated(elem)
                start = elem + 4
                elem = start + <Py_ssize_t>_be32(b + elem)
            if elem > stop:
                _truncated(elem)
            out.append(_decode(b, start, elem))
    elif code == 0x45 or code == 0xc0 or code == 0xd0:
        stop = _compound(b, pos, end, 0xc0, &count, &elem)
        for i in range(count):
            if elem >= stop:
                _truncated(elem)
            size = _string_span(b, elem, stop, &start)
            if size < 0:
                return None
            out.append(_decode(b, start, size))
            elem = size
    else:
        return None
    if elem != stop:
        _malformed("trace size does not match its items", pos)
    return out


cdef Py_ssize_t _map_items(cbuf b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t* first) except -1:
    """Number of entries of the message-annotations map at ``pos``, which must end at ``end``."""
    cdef Py_ssize_t count = 0
    if _compound(b, pos, end, 0xc1, &count, first) != end:
        _malformed("message-annotations size mismatch", pos)
    if count & 1:
        _malformed("map with an odd item count", pos)
    return count >> 1


cdef Py_ssize_t _entry(cbuf b, Py_ssize_t item, Py_ssize_t stop, Key* kind,
                       Py_ssize_t* value) except -1:
    """End of the map entry at ``item``; ``kind[0]`` classifies its key."""
    cdef Py_ssize_t start, key_end, n
    cdef cbuf key
    if item >= stop:
        _truncated(item)
    key_end = _string_span(b, item, stop, &start)
    kind[0] = K_USER
    if key_end < 0:
        key_end = _skip(b, item, stop)
    else:
        n = key_end - start
        key = b + start
        if n >= 9 and memcmp(key, b"x-opt-qd.", 9) == 0:
            kind[0] = K_OTHER
            if n == 11 and memcmp(key + 9, b"to", 2) == 0:
                kind[0] = K_TO
            elif n == 14 and memcmp(key + 9, b"phase", 5) == 0:
                kind[0] = K_PHASE
            elif n == 16 and memcmp(key + 9, b"ingress", 7) == 0:
                kind[0] = K_INGRESS
            elif n == 14 and memcmp(key + 9, b"trace", 5) == 0:
                kind[0] = K_TRACE
    value[0] = key_end
    return _skip(b, key_end, stop)


cdef inline void _put(object result, Py_ssize_t i, object item):
    Py_INCREF(item)
    PyTuple_SET_ITEM(result, i, item)


cdef inline object _new_result(object to, int priority, object ma_to, object ma_phase,
                               object ma_ingress, object ma_trace, Py_ssize_t ma_start,
                               Py_ssize_t ma_end, Py_ssize_t body_start):
    # What tuple.__new__(ScanResult, ...) does, minus the argument tuple and the Python call.
    cdef PyObject* raw = _RESULT_TYPE.tp_alloc(_RESULT_TYPE, 9)
    if raw is NULL:
        raise MemoryError()
    cdef object result = <object>raw
    Py_DECREF(result)        # <object> took a second reference; `result` keeps the first
    _put(result, 0, to)
    _put(result, 1, priority)
    _put(result, 2, ma_to)
    _put(result, 3, ma_phase)
    _put(result, 4, ma_ingress)
    _put(result, 5, ma_trace)
    _put(result, 6, ma_start)
    _put(result, 7, ma_end)
    _put(result, 8, body_start)
    return result


cdef object _scan(cbuf b, Py_ssize_t end):
    cdef Py_ssize_t pos = 0, last = 0x6f, code, value, field, stop, item, n, vpos, entry_end
    cdef Py_ssize_t ma_start = -1, ma_end = -1, start
    cdef int priority = 4
    cdef Key kind
    to = ma_to = ma_phase = ma_ingress = ma_trace = None
    while pos < end:
        code = _section(b, pos, end, &value)
        if code > 0x74:
            break
        if code <= last:
            _malformed("section out of order", pos)
        if code > 0x72 and ma_start < 0:
            ma_start = ma_end = pos
        last = code
        if code == 0x70:
            field = _list_field(b, value, end, 1, &pos)
            if field >= 0 and b[field] != 0x40:
                if b[field] != 0x50:
                    _malformed("header priority is not a ubyte", field)
                if field + 2 > pos:
                    _truncated(field)
                priority = b[field + 1]
        elif code == 0x73:
            field = _list_field(b, value, end, 2, &pos)
            if field >= 0 and b[field] != 0x40:
                stop = _string_span(b, field, pos, &start)
                if stop < 0:
                    _malformed("properties.to is not a string", field)
                to = _decode(b, start, stop)
        elif code == 0x72:
            ma_start = pos
            pos = _compound(b, value, end, 0xc1, &n, &item)
            n = _map_items(b, value, pos, &item)
            while n:
                entry_end = _entry(b, item, pos, &kind, &vpos)
                if kind == K_TO:
                    ma_to = _opt_string(b, vpos, entry_end)
                elif kind == K_PHASE:
                    ma_phase = _opt_int(b, vpos)
                elif kind == K_INGRESS:
                    ma_ingress = _opt_string(b, vpos, entry_end)
                elif kind == K_TRACE:
                    ma_trace = _opt_trace(b, vpos, entry_end)
                item = entry_end
                n -= 1
            if item != pos:
                _malformed("map size does not match its items", value)
            ma_end = pos
        else:
            pos = _compound(b, value, end, 0xc1, &n, &item)
    if ma_start < 0:
        ma_start = ma_end = pos
    return _new_result(to, priority, ma_to, ma_phase, ma_ingress, ma_trace, ma_start, ma_end, pos)


ctypedef object (*_reader)(cbuf, Py_ssize_t)


cdef object _read(object buf, _reader read):
    """``read`` over the bytes of ``buf`` (``bytes`` directly, else the buffer protocol)."""
    cdef Py_buffer view
    if type(buf) is bytes:
        return read(<cbuf>PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf))
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return read(<cbuf>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


def scan(buf):
    """Find ``to``, priority, the router annotations and the section offsets of one message."""
    return _read(buf, _scan)


cdef object _has_annotations(cbuf b, Py_ssize_t end):
    cdef Py_ssize_t pos = 0, last = 0x6f, code, value, n, item
    try:
        while pos < end:
            code = _section(b, pos, end, &value)
            if code <= last:
                return True
            if code >= 0x72:
                return code == 0x72
            last = code
            pos = _compound(b, value, end, 0xc0 if code == 0x70 else 0xc1, &n, &item)
    except MessageFormatError:
        return True
    return False


def has_annotations(buf):
    """False only if the message certainly has no message-annotations section (see the
    reference, ``amqpscan.has_annotations``)."""
    return _read(buf, _has_annotations)


cdef object _subject(cbuf b, Py_ssize_t end):
    cdef Py_ssize_t pos = 0, last = 0x6f, code, value, n, item, field, stop
    while pos < end:
        code = _section(b, pos, end, &value)
        if code > 0x73:
            return None
        if code <= last:
            _malformed("section out of order", pos)
        last = code
        if code == 0x73:
            field = _list_field(b, value, end, 3, &stop)
            if field < 0:
                return None
            return _opt_string(b, field, stop)
        pos = _compound(b, value, end, 0xc0 if code == 0x70 else 0xc1, &n, &item)
    return None


def subject(buf):
    """The ``subject`` property of one message, or None (see the reference,
    ``amqpscan.subject``)."""
    return _read(buf, _subject)


# ---- rewriting ------------------------------------------------------------------------------

cdef const char* _SYM_TO = b"\xa3\x0bx-opt-qd.to"
cdef const char* _SYM_INGRESS = b"\xa3\x10x-opt-qd.ingress"
cdef const char* _SYM_TRACE = b"\xa3\x0ex-opt-qd.trace"
cdef const char* _SYM_PHASE = b"\xa3\x0ex-opt-qd.phase"


cdef inline const char* _utf8(object value, Py_ssize_t* n) except NULL:
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    return PyUnicode_AsUTF8AndSize(value, n)


cdef inline Py_ssize_t _str_size(Py_ssize_t n) noexcept:
    return 2 + n if n <= 0xff else 5 + n


cdef inline char* _w32(char* out, Py_ssize_t value) noexcept:
    out[0] = <char>(value >> 24)
    out[1] = <char>(value >> 16)
    out[2] = <char>(value >> 8)
    out[3] = <char>value
    return out + 4


cdef inline char* _w_str(char* out, const char* data, Py_ssize_t n) noexcept:
    if n <= 0xff:
        out[0] = <char>0xa1
        out[1] = <char>n
        out += 2
    else:
        out[0] = <char>0xb1
        out = _w32(out + 1, n)
    memcpy(out, data, n)
    return out + n


cdef inline char* _w_compound(char* out, Py_ssize_t items, Py_ssize_t count,
                              unsigned char c8) noexcept:
    if items < 0xff and count <= 0xff:
        out[0] = <char>c8
        out[1] = <char>(items + 1)
        out[2] = <char>count
        return out + 3
    out[0] = <char>(c8 + 0x10)
    return _w32(_w32(out + 1, items + 4), count)


cdef inline Py_ssize_t _compound_size(Py_ssize_t items, Py_ssize_t count) noexcept:
    return 3 + items if items < 0xff and count <= 0xff else 9 + items


cdef int _int_width(object value, uint64_t* bits) except -1:
    """Width (1/4/8 signed, 9 = ulong) of the narrowest AMQP integer for ``value``."""
    cdef int64_t v
    if not isinstance(value, int):
        raise TypeError(f"expected int, got {type(value).__name__}")
    try:
        v = value
    except OverflowError:
        try:
            bits[0] = <uint64_t>value
        except OverflowError:
            raise ValueError(f"phase {value} does not fit an AMQP integer") from None
        return 9
    bits[0] = <uint64_t>v
    if -0x80 <= v < 0x80:
        return 1
    if -0x80000000 <= v < 0x80000000:
        return 4
    return 8


cdef char* _w_int(char* out, int width, uint64_t bits) noexcept:
    if width == 1:
        out[0] = <char>0x54
        out[1] = <char>bits
        return out + 2
    if width == 4:
        out[0] = <char>0x71
        return _w32(out + 1, <Py_ssize_t>(bits & 0xffffffffu))
    out[0] = <char>(0x81 if width == 8 else 0x80)
    _w32(out + 1, <Py_ssize_t>(bits >> 32))
    return _w32(out + 5, <Py_ssize_t>(bits & 0xffffffffu))


cdef char* _copy_entries(char* out, cbuf b, Py_ssize_t item, Py_ssize_t stop, Py_ssize_t n,
                         Key wanted) except NULL:
    cdef Py_ssize_t entry_end, vpos
    cdef Key kind
    while n:
        entry_end = _entry(b, item, stop, &kind, &vpos)
        if kind == wanted:
            memcpy(out, b + item, entry_end - item)
            out += entry_end - item
        item = entry_end
        n -= 1
    return out


cdef object _rewrite(cbuf b, Py_ssize_t end, object sr, object ingress, object trace_append,
                     object to_override, object phase, bint strip):
    cdef Py_ssize_t start = sr.ma_start, stop = sr.ma_end
    cdef Py_ssize_t value, first = 0, n = 0, i, item, entry_end, vpos
    cdef Py_ssize_t user_bytes = 0, user_n = 0, other_bytes = 0, other_n = 0
    cdef Py_ssize_t router_bytes = 0, router_n = 0, trace_items = 0, trace_n = 0
    cdef Py_ssize_t to_len = 0, ingress_len = 0, hop_len, items, count, total
    cdef const char* to_data = NULL
    cdef const char* ingress_data = NULL
    cdef const char* hop
    cdef uint64_t phase_bits = 0
    cdef int phase_width = 0
    cdef bint has_trace
    cdef Key kind
    cdef list trace = None
    if not (0 <= start <= stop <= end):
        raise _MFE("scan_result offsets do not fit this message")
    if start < stop:
        if _section(b, start, stop, &value) != 0x72:
            raise _MFE("scan_result offsets do not span message-annotations")
        n = _map_items(b, value, stop, &first)
        item = first
        for i in range(n):
            entry_end = _entry(b, item, stop, &kind, &vpos)
            if kind == K_USER:
                user_bytes += entry_end - item
                user_n += 1
            elif kind == K_OTHER and not strip:
                other_bytes += entry_end - item
                other_n += 1
            item = entry_end
        if item != stop:
            _malformed("map size does not match its items", value)

    if strip:
        r_to = r_phase = r_ingress = r_trace = None
    else:
        r_to, r_phase, r_ingress, r_trace = sr.ma_to, sr.ma_phase, sr.ma_ingress, sr.ma_trace
    if to_override is not _KEEP:
        r_to = to_override
    if phase is not _KEEP:
        r_phase = phase
    if ingress is not None:
        r_ingress = ingress
    if trace_append is not None:
        _utf8(trace_append, &hop_len)
        trace = list(r_trace) if r_trace else []
        trace.append(trace_append)
    elif r_trace is not None:
        trace = r_trace if type(r_trace) is list else list(r_trace)

    if r_to is not None:
        to_data = _utf8(r_to, &to_len)
        router_bytes += 13 + _str_size(to_len)
        router_n += 1
    if r_ingress is not None:
        ingress_data = _utf8(r_ingress, &ingress_len)
        router_bytes += 18 + _str_size(ingress_len)
        router_n += 1
    has_trace = trace is not None
    if has_trace:
        trace_n = len(trace)
        for i in range(trace_n):
            _utf8(trace[i], &hop_len)
            trace_items += _str_size(hop_len)
        router_bytes += 16 + (_compound_size(trace_items, trace_n) if trace_n else 1)
        router_n += 1
    if r_phase is not None:
        phase_width = _int_width(r_phase, &phase_bits)
        router_bytes += 16 + 1 + (8 if phase_width == 9 else phase_width)
        router_n += 1

    items = user_bytes + router_bytes + other_bytes
    count = 2 * (user_n + router_n + other_n)
    total = start + (end - stop) + (3 + _compound_size(items, count) if count else 0)
    result = PyBytes_FromStringAndSize(NULL, total)
    cdef char* out = PyBytes_AS_STRING(result)
    memcpy(out, b, start)
    out += start
    if count:
        out[0], out[1], out[2] = 0x00, 0x53, 0x72
        out = _w_compound(out + 3, items, count, 0xc1)
        if user_n:
            out = _copy_entries(out, b, first, stop, n, K_USER)
        if to_data is not NULL:
            memcpy(out, _SYM_TO, 13)
            out = _w_str(out + 13, to_data, to_len)
        if ingress_data is not NULL:
            memcpy(out, _SYM_INGRESS, 18)
            out = _w_str(out + 18, ingress_data, ingress_len)
        if has_trace:
            memcpy(out, _SYM_TRACE, 16)
            out += 16
            if trace_n:
                out = _w_compound(out, trace_items, trace_n, 0xc0)
                for i in range(trace_n):
                    hop = _utf8(trace[i], &hop_len)
                    out = _w_str(out, hop, hop_len)
            else:
                out[0] = 0x45
                out += 1
        if phase_width:
            memcpy(out, _SYM_PHASE, 16)
            out = _w_int(out + 16, phase_width, phase_bits)
        if other_n:
            out = _copy_entries(out, b, first, stop, n, K_OTHER)
    memcpy(out, b + stop, end - stop)
    return result


def rewrite_annotations(buf, scan_result, *, ingress=None, trace_append=None, to_override=KEEP,
                        phase=KEEP, strip=False):
    """Return the message with only its message-annotations section replaced.

    Same contract as ``amqpscan.rewrite_annotations``; output is identical byte for byte.
    """
    cdef Py_buffer view
    if type(buf) is bytes:
        return _rewrite(<cbuf>PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf), scan_result,
                        ingress, trace_append, to_override, phase, strip)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return _rewrite(<cbuf>view.buf, view.len, scan_result, ingress, trace_append,
                        to_override, phase, strip)
    finally:
        PyBuffer_Release(&view)
