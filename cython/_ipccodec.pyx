# cython: language_level=3, boundscheck=True, wraparound=True
"""The IPC batch codec, compiled build of ``common.ipccodec`` (the reference; same wire format,
same results, same errors: tests/unit/test_ipccodec.py proves them equal with Hypothesis).

What it saves per item over the reference: the temporary tuples and lists of building an item
and a message (each message is allocated once, its fields copied in C), and the interpreter's
dispatch. msgpack still packs and unpacks the header. Bounds and index checks stay on: every
length comes from another process.

This module must not import proton, zmq or anything of the router (``common.ipc`` gives it its
tables).
"""
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

import struct

import msgpack

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
    """
    object qdr_ipc_message(type cls, list item, Py_ssize_t n, PyObject* last)

_HEADER_LEN = struct.Struct("<I")
_pack_len = _HEADER_LEN.pack
_unpack_len = _HEADER_LEN.unpack_from
_unpackb = msgpack.unpackb
_UnpackException = msgpack.UnpackException


cdef class Codec:
    """Encodes and decodes batches for one schema version (see ``common.ipccodec.Codec``)."""

    cdef readonly object version
    cdef readonly dict encode_table
    cdef readonly dict decode_table
    cdef readonly object error
    cdef object _pack

    def __init__(self, version, dict encode_table, dict decode_table, error):
        self.version = version
        self.encode_table = encode_table
        self.decode_table = decode_table
        self.error = error
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def encode(self, peer, messages):
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

    def decode(self, frame):
        cdef Py_ssize_t size, start, offset, end, nfields
        cdef list item, out
        cdef tuple entry
        cdef object view, piece
        error = self.error
        view = memoryview(frame.buffer if hasattr(frame, "buffer") else frame)
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
