"""The ZeroMQ calls of the per-message paths (worker <-> core), without pyzmq's Python layer.

pyzmq's ``Socket.send``/``recv``/``send_multipart``/``recv_multipart`` are Python methods over
its compiled backend; ``recv_multipart`` asks RCVMORE after every frame, and a non-blocking
``recv`` that finds nothing raises ``zmq.Again``, whose construction alone costs several µs
(enum look-ups). Per batch and per hop that was more than the batch's own work at low rates.
Here: the backend's methods themselves, and "is there more?" asked with EVENTS instead of a
failing receive (of libzmq directly: common.zmqopt). Only the hot loops use these; everything else keeps the ordinary API.
"""
from __future__ import annotations

from typing import Any

import zmq
from zmq.backend import Socket as _Backend

from common.builds import choose

send = _Backend.send          # send(sock, data, flags=0): copies ``data`` into the message
recv = _Backend.recv          # recv(sock, flags=0) -> bytes; raises zmq.Again if NOBLOCK finds none
NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
# ZMQ_EVENTS / ZMQ_RCVMORE: asked of libzmq directly in the compiled build (pyzmq's get costs
# 3-4 µs a call); common/zmqopt.py is the reference
_OPT = choose("common._zmqopt", "common.zmqopt")
readable = _OPT.readable  # readable(sock): a whole message is waiting (ZMQ_EVENTS has POLLIN)
more = _OPT.more          # more(sock): the frame just received has another after it (RCVMORE)


def send_routed(sock: Any, identity: bytes, frame: bytes) -> None:
    """One two-part message on a ROUTER socket: the peer's identity, then the batch frame."""
    send(sock, identity, SNDMORE)
    send(sock, frame)
