"""The ZeroMQ calls of the per-message paths (worker <-> core), without pyzmq's Python layer.

pyzmq's ``Socket.send``/``recv``/``send_multipart``/``recv_multipart`` are Python methods over
its compiled backend; ``recv_multipart`` asks RCVMORE after every frame, and a non-blocking
``recv`` that finds nothing raises ``zmq.Again``, whose construction alone costs several µs
(enum look-ups). Per batch and per hop that was more than the batch's own work at low rates.
Here: the backend's methods themselves, and "is there more?" asked with EVENTS instead of a
failing receive. Only the hot loops use these; everything else keeps the ordinary API.
"""
from __future__ import annotations

from typing import Any

import zmq
from zmq.backend import Socket as _Backend

send = _Backend.send          # send(sock, data, flags=0): copies ``data`` into the message
recv = _Backend.recv          # recv(sock, flags=0) -> bytes; raises zmq.Again if NOBLOCK finds none
_get = _Backend.get
NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_RCVMORE = int(zmq.RCVMORE)
_POLLIN = int(zmq.POLLIN)


def readable(sock: Any) -> bool:
    """A whole message is waiting on ``sock`` (ZMQ_EVENTS has POLLIN)."""
    return bool(_get(sock, _EVENTS) & _POLLIN)


def more(sock: Any) -> bool:
    """The frame just received is followed by another of the same message (ZMQ_RCVMORE)."""
    return bool(_get(sock, _RCVMORE))


def send_routed(sock: Any, identity: bytes, frame: bytes) -> None:
    """One two-part message on a ROUTER socket: the peer's identity, then the batch frame."""
    send(sock, identity, SNDMORE)
    send(sock, frame)
