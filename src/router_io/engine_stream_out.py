"""Streamed outbound deliveries: a message still arriving, sent to proton in parts.

StreamDeliver starts one (first bytes, annotations as any delivery), DeliverChunk adds parts or
aborts it; one at a time per link (what comes behind it waits in ``Link.waiting``); each part
handed to proton is acknowledged to the core (StreamSent), which releases the sender's Q2.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

from collections import deque
from typing import Any

from cproton_ffi import lib

from common.ipc import DeliverChunk, StreamDeliver, StreamSent
from router_io import msgrepr
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import KIND_LAST, KIND_PART, _fields
from router_io.engine_records import OutStream
from router_io.engine_conn import _waiting
from router_io.engine_lifecycle import SE_ABORT, SE_GO, SE_SENT, stream_to
# --- end engine parts ---


# --- streaming outbound deliveries -------------------------------------------------------
def _fx_stream_deliver(self, fx: StreamDeliver) -> None:
    """Start an outbound delivery whose message is still arriving: its first bytes now
    (annotations as for any delivery), the rest as DeliverChunks; one at a time per link."""
    dlv_id, link_id, settled, to_override, phase, payload = _fields(fx)
    link = self.links.get(link_id)
    if link is None:
        return
    if link.router or to_override is not None or phase != -1:  # (as _fx_router_deliver:
        # a targeted sender's address on an edge connection's streaming link)
        first = _router_egress(self, link.conn, payload, to_override, phase)
    else:
        first = _egress_annotations(self, link.conn, payload)
    if first is payload:
        first = bytes(payload)
    rec = OutStream(dlv_id, link, settled)
    if link.conn.msg_log:  # messageLoggingComponents with MESSAGE trace on: the text from its
        rec.logged = msgrepr.message_repr(first, link.conn.msg_log)  # head, logged once sent
    self.out_streams[dlv_id] = rec
    rec.parts.append((first, len(payload), KIND_PART))
    link.queued += 1
    if link.out_stream is None:
        _stream_go(self, rec)
    else:
        link.waiting.append(rec)
        _report_flow(self, link)


def _stream_go(self, rec: OutStream) -> None:
    """``rec`` becomes its link's delivery in progress: its parts join the out_queue."""
    link = rec.link
    link.out_stream = rec
    rec.started = True
    stream_to(rec, SE_GO)
    _report_flow(self, link)  # no more for this link until it ends
    parts = rec.parts
    rec.parts = deque()
    for payload, ack, kind in parts:
        _stream_part(self, rec, payload, ack, kind)


def _stream_part(self, rec: OutStream, payload: Any, ack: int, kind: int) -> None:
    conn = rec.link.conn
    _waiting(conn).append([rec.link, rec.dlv_id, rec.settled, payload, 0, None, 0, kind, ack,
                           rec])
    if conn.out_room > 0:
        refill(self, conn)


def _fx_deliver_chunk(self, fx: DeliverChunk) -> None:
    dlv_id, last, aborted, payload = _fields(fx)
    rec = self.out_streams.get(dlv_id)
    if rec is None:
        return
    if aborted:
        _stream_abort_out(self, rec)
        return
    payload = bytes(payload)  # a slice of the IPC batch frame: never keep the frame
    kind = KIND_LAST if last else KIND_PART
    ack = 0 if last else len(payload)
    if rec.started:
        _stream_part(self, rec, payload, ack, kind)
    else:
        rec.parts.append((payload, ack, kind))


def _stream_part_sent(self, entry: list, d_ptr: Any) -> None:
    """A part of a streamed delivery is inside proton (out_queue entry ``entry``)."""
    link, dlv_id, settled, _, _, _, _, kind, ack, rec = entry
    if rec.d is None:
        rec.d = d_ptr
        if not settled:  # dispositions from now on (the receiver may answer early)
            _track_out(self, dlv_id, d_ptr, link)
    if kind == KIND_PART:
        if ack:
            self.outbox.append(StreamSent(dlv_id, ack))
        return
    lib.pn_link_advance(link.ptr)  # the last part: the delivery is complete
    link.sent += 1
    stream_to(rec, SE_SENT)
    if rec.logged is not None:
        _log_message_text(self, link, rec.logged, True)
    _stream_out_end(self, rec)
    if rec.settled or rec.settle:
        if rec.state:
            lib.pn_delivery_update(d_ptr, rec.state)
        _untrack_out(self, dlv_id)
        lib.pn_delivery_settle(d_ptr)


def _stream_settled(self, dlv_id: Any, state: int) -> None:
    rec = self.out_streams[dlv_id]
    rec.settle = True
    if state:
        rec.state = state


def _stream_out_end(self, rec: OutStream) -> None:
    """``rec`` no longer occupies its link: the next delivery waiting there goes."""
    link = rec.link
    self.out_streams.pop(rec.dlv_id, None)
    link.queued -= 1
    if link.out_stream is rec:
        link.out_stream = None
    elif rec in link.waiting:
        link.waiting.remove(rec)
    waiting = link.waiting
    while waiting and link.out_stream is None and link.open:
        item = waiting.popleft()
        if type(item) is OutStream:
            _stream_go(self, item)
        else:
            link.queued -= 1
            _send(self, link, item[0], item[1], item[2])
    _report_flow(self, link)
    self.dirty.add(link.conn)


def _stream_abort_out(self, rec: OutStream) -> None:
    """The message will not complete: what proton has of it is aborted (the receiver sees
    an aborted transfer), what waits is dropped."""
    stream_to(rec, SE_ABORT)
    link = rec.link
    conn = link.conn
    if any(e[9] is rec for e in conn.out_queue if len(e) > 9):
        conn.out_queue = deque(e for e in conn.out_queue if len(e) < 10 or e[9] is not rec)
    _untrack_out(self, rec.dlv_id)
    if rec.d is not None:
        # proton drops the bytes of it not yet encoded into frames: they will never be
        # written to the socket, so they leave the connection's budget now (else the
        # budget shrinks by them for good, and a later delivery waits forever)
        dropped = lib.pn_delivery_pending(rec.d)
        lib.pn_delivery_abort(rec.d)
        room = conn.out_room + dropped
        conn.out_room = room if room < conn.out_budget else conn.out_budget
        link.sent += 1  # proton gives the credit back: counted as sent, the core's view
    elif rec.started:
        link.sent += 1  # nothing reached proton; the core counted it as delivered
    if self.msg_trace is not None:  # 1.19 logs an aborted send whatever the components
        _log_message_text(self, link, "aborted message", True)
    _stream_out_end(self, rec)
    if conn.out_queue and conn.out_room > 0:
        refill(self, conn)


# cross calls between engine parts (at the end: the pure build imports them after this part's
# own functions exist, so the parts may call each other)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_links import _report_flow
from router_io.engine_deliveries import (
    _egress_annotations, _log_message_text, _router_egress, _send, _track_out, refill)
from router_io.engine_dispositions import _untrack_out
# --- end engine parts ---
