"""Streaming (cut-through) deliveries: a message routed on its first bytes, its body following.

Owns: the :class:`Stream` of an inbound delivery whose message has not fully arrived
(``StreamTransfer``), the copies started for it (``StreamDeliver`` on each outbound link the
forwarders chose, multicast included), passing its chunks on (``TransferChunk`` ->
``DeliverChunk``, bytes untouched), the per-delivery window back to the sender's worker
(``StreamSent`` from the outbound workers -> ``StreamAck``: 1.x's Q2), and aborts (the sender's,
or a sender lost mid-message) forwarded as aborted transfers on every copy.

A Stream travels through the forwarders as the delivery's payload, so routing, holding and
multicast queueing are the same code as for a whole message: ``transfer.send``/``send_router``
start a copy when their payload is a Stream. While a copy still waits in the core (held at the
address, queued on a link without credit) the Stream keeps every chunk (so the copy can start
with all bytes so far) and acknowledges nothing: its sender stops after a window of bytes. Once
every copy has started, chunks are passed on and forgotten; the window comes back as the
slowest copy's worker hands the bytes to proton. A Stream whose message completed while a copy
still waited is sent whole (a plain Deliver) when that copy leaves.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from common.ipc import DeliverChunk, SettleIn, StreamAck, StreamDeliver
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.records import Link, _effect, _fields, _own
from router_core.settlement import forget_out, on_settle_in, withdraw_held
# --- end core parts ---


class Stream:
    """The inbound side of a streaming delivery (the payload the forwarders pass around)."""

    __slots__ = ("dlv_id", "link", "peer", "chunks", "received", "acked", "copies", "dlv",
                 "done")

    def __init__(self, dlv_id: Any, link: Link, peer: Any, payload: Any) -> None:
        self.dlv_id = dlv_id
        self.link = link
        self.peer = peer
        self.chunks = [_own(payload)]  # every byte so far, while a copy may still start
        self.received = len(payload)
        self.acked = 0                 # bytes acknowledged to the sender's worker
        self.copies = []               # StreamCopy of every copy started
        self.dlv = None                # the InDelivery while a copy waits in the core
        self.done = False              # the last chunk arrived


class StreamCopy:
    """One outbound copy of a Stream: bytes its worker handed to proton so far."""

    __slots__ = ("out_id", "link", "stream", "acked")

    def __init__(self, out_id: Any, link: Link, stream: Stream) -> None:
        self.out_id = out_id
        self.link = link
        self.stream = stream
        self.acked = 0


def stream_pending(stream: Stream) -> bool:
    """A copy of the stream still waits in the core (held or queued)."""
    dlv = stream.dlv
    return dlv is not None and dlv.pending > 0


def stream_bytes(stream: Stream) -> Any:
    """Every byte of the message so far, as one buffer."""
    chunks = stream.chunks
    if len(chunks) == 1:
        return chunks[0]
    joined = b"".join(chunks)
    stream.chunks = [joined]
    return joined


def start_copy(core: Any, link: Link, out_id: Any, settled: bool, stream: Stream,
               to_override: Any, phase: int) -> None:
    """Start a copy of an unfinished message on ``link`` (``out_id`` minted by the caller)."""
    core._emit(link.peer, _effect(StreamDeliver, (out_id, link.link_id, settled, to_override,
                                                  phase, stream_bytes(stream))))
    if link.streaming:  # a streaming link takes no other message until this one ends
        link.stream_busy = True
    sending = link.sending
    if sending is None:
        link.sending = sending = set()
    sending.add(out_id)
    copy = StreamCopy(out_id, link, stream)
    stream.copies.append(copy)
    core.stream_outs[out_id] = copy


def end_copy(copy: StreamCopy) -> None:
    """The copy's last frame (or its abort) has been passed on: as 1.19 counts it, it is no
    longer undelivered on its link but one delivery (unsettled until settled)."""
    link = copy.link
    link.stream_busy = False
    link.delivery_count += 1
    sending = link.sending
    if sending is not None:
        sending.discard(copy.out_id)
        if not sending:
            link.sending = None


def on_stream_chunk(core: Any, peer: Any, cmd: Any) -> None:
    dlv_id, last, aborted, payload = _fields(cmd)
    stream = core.streams.get(dlv_id)
    if stream is None:  # its link is gone (aborted then) or never streamed: nothing to do
        return
    if aborted:
        abort_stream(core, stream)
        return
    stream.received += len(payload)
    pending = stream_pending(stream)
    if pending:
        stream.chunks.append(_own(payload))
    for copy in stream.copies:
        if not copy.link.closed:
            core._emit(copy.link.peer, _effect(DeliverChunk, (copy.out_id, last, False,
                                                              payload)))
    if last:
        stream.done = True
        del core.streams[dlv_id]
        for copy in stream.copies:
            core.stream_outs.pop(copy.out_id, None)
            end_copy(copy)
        stream.copies = []
        if not pending:
            stream.chunks = None
        return
    if not pending:
        stream.chunks = []
    update_ack(core, stream)


def on_stream_sent(core: Any, peer: Any, cmd: Any) -> None:
    out_id, nbytes = _fields(cmd)
    copy = core.stream_outs.get(out_id)
    if copy is not None:
        copy.acked += nbytes
        update_ack(core, copy.stream)


def update_ack(core: Any, stream: Stream) -> None:
    """Give the sender's worker back the bytes every copy has taken (all of them when no copy
    is left: they are dropped); nothing while a copy waits in the core."""
    if stream.done or stream_pending(stream):
        return
    target = stream.received
    for copy in stream.copies:
        if not copy.link.closed and copy.acked < target:
            target = copy.acked
    if target > stream.acked and not stream.link.closed:
        core._emit(stream.peer, _effect(StreamAck, (stream.dlv_id, target - stream.acked)))
        stream.acked = target


def abort_stream(core: Any, stream: Stream) -> None:
    """The message will never complete (aborted by its sender, over maxMessageSize, or its
    sender gone): every copy started is aborted, a copy still waiting is withdrawn, and the
    inbound delivery is forgotten (its sender already knows)."""
    stream.done = True
    core.streams.pop(stream.dlv_id, None)
    for copy in stream.copies:
        core.stream_outs.pop(copy.out_id, None)
        end_copy(copy)
        if not copy.link.closed:
            core._emit(copy.link.peer, _effect(DeliverChunk, (copy.out_id, True, True, b"")))
        out = core.out_unsettled.get(copy.out_id)
        if out is not None:
            forget_out(core, out)
    stream.copies = []
    stream.chunks = None
    if stream.dlv_id in core.in_unsettled:
        on_settle_in(core, stream.peer, _effect(SettleIn, (stream.dlv_id, 0)))
    elif stream_pending(stream):
        withdraw_held(core, stream.dlv)


def drop_stream_link(core: Any, link: Link) -> None:
    """A link is going away: the streams it was sending are aborted, and the streams it was
    receiving copies of stop waiting for it (their window comes from the other copies)."""
    for stream in list(core.streams.values()):
        if stream.link is link:
            abort_stream(core, stream)
        else:
            for copy in stream.copies:
                if copy.link is link:
                    update_ack(core, stream)
                    break
