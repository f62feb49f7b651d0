"""The two ZeroMQ socket options the per-message loops ask per batch, through pyzmq.

Reference of ``common._zmqopt`` (cython/_zmqopt.pyx), which asks libzmq directly: pyzmq's
``Socket.get`` costs 3-4 µs a call (option-type look-ups in Python), more than receiving the batch.
``common.zmqcalls`` chooses between them (common.builds); tests/unit/test_zmqopt.py proves both
give the same answers on the same sockets.
"""
from __future__ import annotations

from typing import Any

import zmq
from zmq.backend import Socket as _Backend

_get = _Backend.get
_EVENTS = int(zmq.EVENTS)
_RCVMORE = int(zmq.RCVMORE)
_POLLIN = int(zmq.POLLIN)


def readable(sock: Any) -> bool:
    """A whole message is waiting on ``sock`` (ZMQ_EVENTS has POLLIN)."""
    return bool(_get(sock, _EVENTS) & _POLLIN)


def more(sock: Any) -> bool:
    """The frame just received is followed by another of the same message (ZMQ_RCVMORE)."""
    return bool(_get(sock, _RCVMORE))
