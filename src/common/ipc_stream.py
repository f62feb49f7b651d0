"""IPC messages of streaming (cut-through) deliveries, both ways, and their window.

A message that has not fully arrived is routed on its first bytes and its body follows in
chunks (DESIGN.md "How a delivery travels"). Part of the one IPC schema: their codes are in
``common.ipc.MESSAGE_TYPES``, which re-exports them.

Must not import proton, zmq or anything from router_io/agent/supervisor/router_core.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional


# ----------------------------------------------------------------------------------------------
# Streaming (cut-through) deliveries: a message that has not fully arrived is routed on its
# first bytes and its body follows in chunks (DESIGN.md "How a delivery travels", streaming)
# ----------------------------------------------------------------------------------------------
class StreamTransfer(NamedTuple):
    """Worker -> core: the start of an inbound delivery that has not fully arrived (its routing
    fields have): routed now, the rest follows as TransferChunk. Fields as RouterTransfer's
    (``router``: it came on an inter-router link; ``phase``/``ingress``/``trace`` are then the
    router annotations, else 0/None/[]); ``payload``: the message's first bytes."""
    dlv_id: int
    link_id: int
    to: Optional[str]
    settled: bool
    priority: int
    router: bool
    phase: int
    ingress: Optional[str]
    trace: list
    payload: Any


class TransferChunk(NamedTuple):
    """Worker -> core: more bytes of a StreamTransfer's message, untouched; ``last``: the message
    is complete; ``aborted``: the sender aborted it (or it broke maxMessageSize): no more come."""
    dlv_id: int
    last: bool
    aborted: bool
    payload: Any


class StreamDeliver(NamedTuple):
    """Core -> worker: start sending a delivery whose message is still arriving (``payload``:
    its bytes so far); the rest follows as DeliverChunk. ``to_override`` and ``phase`` are
    RouterDeliver's: on an inter-router link, and on an edge connection's link for a targeted
    sender's message (its address); otherwise None and -1."""
    dlv_id: int
    link_id: int
    settled: bool
    to_override: Optional[str]
    phase: int
    payload: Any


class DeliverChunk(NamedTuple):
    """Core -> worker: more bytes of a StreamDeliver's message (``last``: advance; ``aborted``:
    abort the outbound delivery, nothing more follows)."""
    dlv_id: int
    last: bool
    aborted: bool
    payload: Any


class StreamSent(NamedTuple):
    """Worker -> core: ``nbytes`` more bytes (as the core sent them) of the streaming outbound
    delivery ``dlv_id`` were handed to proton within the connection's byte budget."""
    dlv_id: int
    nbytes: int


class StreamAck(NamedTuple):
    """Core -> worker: ``nbytes`` more bytes of the streaming inbound delivery ``dlv_id`` have
    left the router's buffers (every copy took them, or they were dropped): the sender's
    connection may be read again (the per-delivery window, 1.x's Q2)."""
    dlv_id: int
    nbytes: int


# Bytes of one streaming delivery the router may hold between its sender's socket and its
# receivers' proton buffers (worker, core, IPC). Past it the sender's connection is not read.
STREAM_WINDOW = 1024 * 1024
