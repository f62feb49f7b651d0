"""Streamed inbound deliveries: a large message routed on its first bytes (cut-through).

A partial delivery past STREAM_START bytes is read as it arrives: StreamTransfer once its
routing fields are in, TransferChunk for the rest, at most STREAM_WINDOW unacknowledged bytes
(Q2: past it the delivery is not read from proton until the core's StreamAck; its connection's
socket is not read only while every streamed delivery of it is held so), an abort passed on.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

from typing import Any

from cproton_ffi import ffi, lib

from common.ipc import (
    STATE_REJECTED, STATE_RELEASED, STREAM_WINDOW, SettleIn, StreamAck, StreamTransfer,
    TransferChunk)
from common import amqpscan_select as scanner
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import STREAM_CHUNK, _fields, _key, _rewrite_annotations, _scan
from router_io.engine_records import InStream, Link
from router_io.engine_lifecycle import (
    SE_ACKED, SE_ACKED_SOME, SE_DISCARD, SE_END, SE_ROUTED, SE_WINDOW_FULL, stream_to)
# --- end engine parts ---


def _forget_streams(self, link: Link) -> None:
    """A link goes: its streamed deliveries with it (the core aborts or fails them)."""
    for rec in [r for r in self.in_streams.values() if r.link is link]:
        _stream_end(self, rec, False)
    for rec in [r for r in self.out_streams.values() if r.link is link]:
        self.out_streams.pop(rec.dlv_id, None)
    if link.waiting:
        link.queued -= len(link.waiting)
        if self.pending_states:
            for w in link.waiting:
                self.pending_states.pop(w[0] if type(w) is tuple else w.dlv_id, None)
        link.waiting.clear()
    if link.out_stream is not None:
        link.out_stream = None
        link.queued -= 1


# --- streaming inbound deliveries (cut-through; DESIGN.md "How a delivery travels") --------
def _stream_begin(self, d: Any, d_key: Any, link: Link) -> None:
    """A partial delivery past STREAM_START bytes: from now on read as it arrives."""
    rec = InStream(link, d, d_key)
    self.in_streams[d_key] = rec
    conn = link.conn
    conn.streams += 1
    if conn.q2:
        self.q2_changed.add(conn)  # one that is not held: the socket is read again
    _stream_in(self, rec)


def _stream_in(self, rec: InStream) -> None:
    """New bytes (or the end, or an abort) of a streamed inbound delivery."""
    d = rec.d
    link = rec.link
    l_ptr = link.ptr
    if lib.pn_delivery_aborted(d):
        _stream_end(self, rec, False)
        if rec.started:
            self.outbox.append(TransferChunk(rec.dlv_id, True, True, b""))
        else:
            lib.pn_link_flow(l_ptr, 1)  # the core never saw it: its credit comes back
        lib.pn_delivery_settle(d)
        self.dirty.add(link.conn)
        return
    if rec.started and rec.unacked >= STREAM_WINDOW:
        return  # Q2: the rest waits in proton
    pending = lib.pn_delivery_pending(d)
    partial = bool(lib.pn_delivery_partial(d))
    if partial and pending < (STREAM_CHUNK if rec.started else 1):
        return
    held = 0  # bytes left in proton beyond the window (read once the core acknowledges)
    if rec.started and rec.discard is None:
        room = STREAM_WINDOW - rec.unacked
        if room < STREAM_CHUNK:
            room = STREAM_CHUNK
        if pending > room:
            held = pending - room
    if link.max_size and rec.total + pending > link.max_size and rec.discard is None:
        # maxMessageSize while streaming: the copies are aborted, the rest is discarded,
        # then the delivery rejected and link and connection closed (as a whole one)
        _stream_end(self, rec, False)
        if rec.started:
            self.outbox.append(TransferChunk(rec.dlv_id, True, True, b""))
        self.oversize[int(ffi.cast("uintptr_t", d))] = True
        _oversize(self, d, link)
        return
    pending -= held
    data = bytearray(pending)
    if pending:
        lib.pn_link_recv(l_ptr, ffi.from_buffer(data), pending)
    rec.total += pending
    if rec.discard is not None:
        if not partial:
            lib.pn_link_advance(l_ptr)
            _stream_end(self, rec, False)
            state, condition, description = rec.discard
            if state == STATE_REJECTED:
                _reject_local(self, d, condition, description)
            else:
                lib.pn_delivery_update(d, state)
                lib.pn_delivery_settle(d)
            self.dirty.add(link.conn)
        return
    if not rec.started:
        rec.head += data
        _stream_start(self, rec, partial)
        return
    last = not partial and not held
    if last:
        lib.pn_link_advance(l_ptr)
    self.outbox.append(TransferChunk(rec.dlv_id, last, False, data))
    if not last:
        rec.unacked += pending
        if rec.unacked >= STREAM_WINDOW:
            _q2_block(self, rec)
    else:
        _stream_end(self, rec, True)


def _stream_start(self, rec: InStream, partial: bool) -> None:
    """Route the delivery once its routing fields (every section before the body) are
    here: StreamTransfer with the bytes so far; a complete one ends at once."""
    link = rec.link
    d = rec.d
    payload = rec.head
    try:  # the routing fields only; the body is never decoded
        scan = _scan(payload)
    except scanner.MessageFormatError as exc:
        if partial:
            return  # truncated so far: the sections before the body are not all here
        lib.pn_link_advance(link.ptr)
        _stream_end(self, rec, False)
        self.log("warning", f"[C{link.conn.conn_id}] rejecting malformed message: {exc}")
        _reject_local(self, d, "amqp:decode-error", str(exc))
        self.dirty.add(link.conn)
        return
    if partial and scan.body_start >= len(payload):
        return  # a section before the body may still come
    if not link.open:
        rec.discard = (STATE_RELEASED, "", "")
        stream_to(rec, SE_DISCARD)
        if not partial:
            _stream_in(self, rec)
        return
    settled = bool(lib.pn_delivery_settled(d))
    router = link.router
    if router:
        to = scan.ma_to
        trace = scan.ma_trace
        phase = scan.ma_phase
        to = scan.to if to is None else to
        phase = phase if phase else 0
        ingress = scan.ma_ingress
        trace = [] if trace is None else trace
    else:  # (never a policed link: those are not streamed, engine_links.py)
        stripped = _strips_in(link, _fields(scan))
        to = _endpoint_to(link, _fields(scan), stripped)
        if stripped:
            payload = _rewrite_annotations(payload, scan, strip=True)
        phase, ingress, trace = 0, None, []
    dlv_id = self.new_id()
    if link.routed and not _routed_tag(self, d, link, dlv_id):  # link routes: the tag first
        rec.discard = (STATE_REJECTED, TAG_TOO_LONG[0], TAG_TOO_LONG[1])
        stream_to(rec, SE_DISCARD)
        if not partial:
            _stream_in(self, rec)
        return
    if link.conn.msg_log:  # messageLoggingComponents with MESSAGE trace on
        _log_message(self, link, payload, False)
    rec.dlv_id = dlv_id
    rec.started = True
    stream_to(rec, SE_ROUTED)
    rec.head = None
    rec.settled = settled
    self.in_stream_ids[dlv_id] = rec
    if not settled:
        self.in_dlvs[dlv_id] = (rec.d_key, link)
        self.in_ids[rec.d_key] = dlv_id
    self.outbox.append(StreamTransfer(dlv_id, link.link_id, to, settled, scan.priority,
                                      router, phase, ingress, trace, bytes(payload)))
    rec.unacked = len(payload)
    if not partial:
        lib.pn_link_advance(link.ptr)
        self.outbox.append(TransferChunk(dlv_id, True, False, b""))
        _stream_end(self, rec, True)
    elif rec.unacked >= STREAM_WINDOW:
        _q2_block(self, rec)


def _stream_end(self, rec: InStream, complete: bool) -> None:
    """A streamed inbound delivery is complete (``complete``) or ends otherwise (aborted,
    discarded): forget it as a stream; a complete one settles as a whole one would."""
    stream_to(rec, SE_END)
    if self.in_streams.pop(rec.d_key, None) is not None:
        conn = rec.link.conn
        conn.streams -= 1
        if conn.q2:
            self.q2_changed.add(conn)  # maybe every one left is held now
    if rec.dlv_id is not None:
        self.in_stream_ids.pop(rec.dlv_id, None)
    if rec.blocked:
        _q2_unblock(self, rec)
    d = rec.d
    if not complete:
        if rec.dlv_id is not None and rec.dlv_id in self.in_dlvs:
            _drop_in(self, rec.dlv_id)
        return
    if rec.settled:
        lib.pn_delivery_settle(d)
    elif rec.settle:  # the core settled it while it arrived
        if rec.dlv_id in self.in_dlvs:
            _drop_in(self, rec.dlv_id)
        lib.pn_delivery_settle(d)
    elif lib.pn_delivery_settled(d):  # the sender settled it with its last frame
        _drop_in(self, rec.dlv_id)
        self.outbox.append(SettleIn(rec.dlv_id, lib.pn_delivery_remote_state(d)))
        lib.pn_delivery_settle(d)
    self.dirty.add(rec.link.conn)


def _q2_block(self, rec: InStream) -> None:
    """``rec`` filled its window: it is read no further from proton. Its connection's socket
    is read on while another streamed delivery of it is not held (1.19's Q2 holds one
    delivery, not the connection: the deliveries queued behind this one may be what it waits
    for, e.g. an earlier one to the same receiver); worker._q2_update decides."""
    rec.blocked = True
    stream_to(rec, SE_WINDOW_FULL)
    conn = rec.link.conn
    conn.q2 += 1
    self.q2_changed.add(conn)


def _q2_unblock(self, rec: InStream) -> None:
    rec.blocked = False
    conn = rec.link.conn
    conn.q2 -= 1
    self.q2_changed.add(conn)


def _fx_stream_ack(self, fx: StreamAck) -> None:
    """The core took ``nbytes`` more of a streamed delivery: read on (Q2 released)."""
    rec = self.in_stream_ids.get(fx[0])
    if rec is None:
        return
    rec.unacked -= fx[1]
    stream_to(rec, SE_ACKED if rec.unacked < STREAM_WINDOW else SE_ACKED_SOME)
    if rec.unacked < STREAM_WINDOW:
        if rec.blocked:
            _q2_unblock(self, rec)
        _stream_in(self, rec)  # what proton already holds (no new event announces it)
        link = rec.link
        if rec.d_key not in self.in_streams and link.open:
            # it ended here, outside the events: the link's next delivery may be in proton
            # already (its connection went on being read), and its events came while this
            # one was current (ignored then); nothing would announce it again
            nxt = lib.pn_link_current(link.ptr)
            if nxt != ffi.NULL:
                _on_delivery(self, _key(nxt))


def _stream_in_settled(self, dlv_id: Any) -> None:
    self.in_stream_ids[dlv_id].settle = True


# cross calls between engine parts (at the end: the pure build imports them after this part's
# own functions exist, so the parts may call each other)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_policy import _oversize
from router_io.engine_deliveries import (
    TAG_TOO_LONG, _drop_in, _endpoint_to, _log_message, _on_delivery, _reject_local,
    _routed_tag, _strips_in)
# --- end engine parts ---
