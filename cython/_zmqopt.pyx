# cython: language_level=3
"""Compiled build of ``common.zmqopt``: ZMQ_EVENTS and ZMQ_RCVMORE asked of libzmq directly.

pyzmq's ``Socket.get`` costs 3-4 µs a call; the worker asks EVENTS after every effect batch and
the core asks RCVMORE and EVENTS after every command batch, so per batch that was more than
receiving it. Here: one C call of ``zmq_getsockopt`` of the libzmq pyzmq itself loaded (its
address found once at import, as the engine finds proton's), on ``Socket.underlying``.

A closed socket (pyzmq sets its handle to NULL) or a failing call goes to pyzmq's ``get``, which
raises what the reference raises. Import fails (ImportError: common.builds then takes the
reference, or refuses under ROUTER_REQUIRE_EXTENSIONS=1) when the loaded libzmq cannot be found
as exactly one library whose version is pyzmq's.
"""
import ctypes
import os

import zmq
from zmq.backend import Socket as _Backend

ctypedef int (*getsockopt_f)(void *sock, int option, void *value, size_t *size) noexcept nogil

cdef enum:
    ZMQ_RCVMORE = 13
    ZMQ_EVENTS = 15
    ZMQ_POLLIN = 1

cdef getsockopt_f _getsockopt = NULL
_get = _Backend.get


def _loaded_libzmq():
    """The libzmq this process has mapped (pyzmq's), as a ctypes library."""
    paths = set()
    with open(f"/proc/{os.getpid()}/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").partition("/")[2]
            if path and os.path.basename(path).startswith("libzmq"):
                paths.add("/" + path)
    if len(paths) != 1:
        raise ImportError(f"common._zmqopt: {len(paths)} libzmq libraries mapped, need one")
    lib = ctypes.CDLL(paths.pop())
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib.zmq_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    if (major.value, minor.value, patch.value) != zmq.zmq_version_info():
        raise ImportError("common._zmqopt: the mapped libzmq is not pyzmq's")
    return lib


def _bind():
    global _getsockopt
    try:
        address = ctypes.cast(_loaded_libzmq().zmq_getsockopt, ctypes.c_void_p).value
    except (OSError, AttributeError, ValueError) as exc:  # unreadable maps, a library gone...
        raise ImportError(f"common._zmqopt: libzmq not found: {exc}") from exc
    if not address:
        raise ImportError("common._zmqopt: no zmq_getsockopt")
    _getsockopt = <getsockopt_f><size_t>address


_bind()


cdef inline int _int_option(object sock, int option) except? -1:
    cdef int value = 0
    cdef size_t size = sizeof(int)
    cdef size_t handle = sock.underlying
    if handle == 0 or _getsockopt(<void *>handle, option, &value, &size) != 0:
        return _get(sock, option)  # closed, or an error: pyzmq raises it
    return value


def readable(sock) -> bool:
    """A whole message is waiting on ``sock`` (ZMQ_EVENTS has POLLIN)."""
    return (_int_option(sock, ZMQ_EVENTS) & ZMQ_POLLIN) != 0


def more(sock) -> bool:
    """The frame just received is followed by another of the same message (ZMQ_RCVMORE)."""
    return _int_option(sock, ZMQ_RCVMORE) != 0
