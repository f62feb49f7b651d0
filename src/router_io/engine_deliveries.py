"""Whole deliveries at the worker: a complete message in, a message out.

Inbound: a complete delivery is read once, its routing fields scanned, and handed to the core
as Transfer (RouterTransfer on an inter-router link); a partial one waits, or becomes a
streamed delivery (engine_stream_in.py) past STREAM_START bytes. Outbound: Deliver and
RouterDeliver are sent whole, tagged with the core's id, within the connection's byte budget
(beyond it they wait in its out_queue: enqueue, refill). Router annotations on egress.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

from typing import Any, Optional

from cproton_ffi import ffi, lib

from common import ipc
from common.ipc import (
    DIR_OUT, STATE_ACCEPTED, STATE_RELEASED, Disposition, RouterTransfer, SettleIn, Transfer)
from common import amqpscan_select as scanner
from router_io import msgrepr
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import (
    EDGE, KIND_WHOLE, SCAN_MA_INGRESS, SCAN_MA_PHASE, SCAN_MA_TO, SCAN_MA_TRACE,
    SCAN_PRIORITY, SCAN_TO, STREAM_START, _cdata, _command, _fields, _has_annotations, _key,
    _pn_delivery_aborted, _pn_delivery_link, _pn_delivery_partial, _pn_delivery_pending,
    _pn_delivery_remote_state, _pn_delivery_settle, _pn_delivery_settled, _pn_delivery_tagged,
    _pn_delivery_update, _pn_link_advance, _pn_link_current, _pn_link_flow, _pn_link_recv_message,
    _pn_link_send_all, _rewrite_annotations, _scan, _tag, _text)
from router_io.engine_records import Link
from router_io.engine_conn import Connection, _waiting
# --- end engine parts ---


def _on_delivery(self, d_ptr: Any) -> None:
    l_ptr = _pn_delivery_link(d_ptr)
    link = self.link_ptrs.get(l_ptr)
    if link is None:  # a link we refused or forgot; proton still reports on it
        return
    if link.direction == DIR_OUT:
        _on_outbound_update(self, d_ptr)
        return
    d_key = d_ptr  # compiled: the address as a Python int once, for the three maps below
    if self.in_streams:
        rec = self.in_streams.get(d_key)
        if rec is not None:  # a delivery being streamed: more bytes (or its end)
            _stream_in(self, rec)
            return
    if d_ptr != _pn_link_current(l_ptr):
        # advanced past: a delivery we forwarded (the sender settled it, or gave a state)
        # or one settled here; the link's current one is new (or still arriving)
        dlv_id = self.in_ids.get(d_key)
        if dlv_id is None:
            return
        if _pn_delivery_settled(d_ptr):
            _drop_in(self, dlv_id)
            self.outbox.append(_command(SettleIn,
                                        (dlv_id, _pn_delivery_remote_state(d_ptr))))
            _pn_delivery_settle(d_ptr)
        else:  # the sender gave it a state: on to the delivery forwarded for it (as 1.19)
            _sender_state(self, d_ptr, dlv_id)
        return
    if _pn_delivery_aborted(d_ptr):
        _drop_aborted(self, d_ptr, l_ptr)
        return
    max_size = link.max_size  # maxMessageSize: one comparison per transfer frame
    if max_size and (self.oversize or _pn_delivery_pending(d_ptr) > max_size):
        if _oversize(self, _cdata("pn_delivery_t *", d_ptr), link):
            return
    if _pn_delivery_partial(d_ptr):
        if link.stream and _pn_delivery_pending(d_ptr) >= STREAM_START:
            _stream_begin(self, _cdata("pn_delivery_t *", d_ptr), d_key, link)
        return  # wait for the rest of the message
    payload = _pn_link_recv_message(l_ptr, _pn_delivery_pending(d_ptr))
    _pn_link_advance(l_ptr)
    if not payload:  # a transfer without a message: 1.19 refuses it at once
        _reject_empty(self, d_ptr, l_ptr)
        return
    if not link.open:
        _pn_delivery_update(d_ptr, STATE_RELEASED)
        _pn_delivery_settle(d_ptr)
        return
    settled = bool(_pn_delivery_settled(d_ptr))
    conn = link.conn  # compiled: a Connection, its switches read at a fixed offset
    try:  # the routing fields only (~0.2 us compiled); the body is never decoded
        scan = _scan(payload)
    except scanner.MessageFormatError as exc:
        self.log("warning", f"[C{link.conn.conn_id}] rejecting malformed message: {exc}")
        _reject_local(self, _cdata("pn_delivery_t *", d_ptr), "amqp:decode-error", str(exc))
        return
    fields = _fields(scan)
    if link.router:  # inter-router link: annotations kept and handed over for routing
        to = fields[SCAN_MA_TO]
        trace = fields[SCAN_MA_TRACE]
        phase = fields[SCAN_MA_PHASE]
        if conn.msg_log:  # messageLoggingComponents with MESSAGE trace on
            _log_message(self, link, payload, False)
        dlv_id = self.new_id()
        cmd = _command(RouterTransfer, (
            dlv_id, link.link_id, fields[SCAN_TO] if to is None else to, settled,
            fields[SCAN_PRIORITY], phase if phase else 0, fields[SCAN_MA_INGRESS],
            [] if trace is None else trace, payload))
    else:
        stripped = _strips_in(link, fields)
        to = _endpoint_to(link, fields, stripped)
        if link.check:  # vhost policy / multiTenant (set at attach; see _police_transfer)
            # judged on the bytes as sent: ``scan``'s offsets are theirs, not the stripped ones'
            to = _police_transfer(self, link, _cdata("pn_delivery_t *", d_ptr), scan,
                                  payload, to)
            if to is False:
                return
        if stripped:
            payload = _rewrite_annotations(payload, scan, strip=True)
        dlv_id = self.new_id()
        cmd = _command(Transfer, (dlv_id, link.link_id, to, settled, fields[SCAN_PRIORITY],
                                  payload))
        if link.routed:  # link routes only: the client's tag and state go with it
            _routed_transfer(self, d_ptr, d_key, link, dlv_id, settled, cmd)
            return
        if conn.msg_log:  # messageLoggingComponents with MESSAGE trace on
            _log_message(self, link, payload, False)
    if settled:
        _pn_delivery_settle(d_ptr)
    else:
        self.in_dlvs[dlv_id] = (d_key, link)
        self.in_ids[d_key] = dlv_id
    self.outbox.append(cmd)
    if not settled and _pn_delivery_remote_state(d_ptr):  # a state on the transfer (rare)
        _sender_state(self, d_ptr, dlv_id)


def _strips_in(link: Link, fields: Any) -> bool:
    """A client's message carries router annotations (x-opt-qd.to, .trace, .ingress, .phase)
    that its connection strips on the way in (stripAnnotations in or both): they go before it
    is routed, as 1.19 strips them. One rule for whole and streamed deliveries. ``fields``:
    the message's ScanResult as a tuple (_fields)."""
    conn = link.conn
    if not conn.strip_in:
        return False
    return _router_annotated(fields)


def _router_annotated(fields: Any) -> bool:
    """The scanned message (its ScanResult as a tuple) has a router annotation."""
    return (fields[SCAN_MA_TO] is not None or fields[SCAN_MA_TRACE] is not None
            or fields[SCAN_MA_INGRESS] is not None or fields[SCAN_MA_PHASE] is not None)


def _endpoint_to(link: Link, fields: Any, stripped: bool) -> Any:
    """The address a client's message on an endpoint link is routed by: None on a link with a
    target (its own address); on an anonymous link its x-opt-qd.to, unless absent or
    ``stripped``, else its properties 'to'."""
    if not link.anonymous:
        return None
    ma_to = fields[SCAN_MA_TO]
    if ma_to is None or stripped:
        return fields[SCAN_TO]
    return ma_to


# 1.19 keeps a delivery's tag in 32 bytes: a link-routed one with a longer tag is refused
TAG_MAX = 32
TAG_TOO_LONG = ("amqp:invalid-field", "delivery tag length exceeded")


def _routed_tag(self, d: Any, link: Link, dlv_id: Any) -> bool:
    """A link-routed delivery's tag (``d`` a cffi delivery) goes to the core before its
    transfer (DeliveryTag), so the far end gets the sender's own tag, as through 1.19. False:
    longer than 1.19 allows (the caller refuses the delivery)."""
    tag = lib.pn_delivery_tag(d)
    if tag.size > TAG_MAX:
        return False
    self.outbox.append(_command(ipc.DeliveryTag, (dlv_id, link.link_id,
                                                  bytes(ffi.buffer(tag.start, tag.size)))))
    return True


def _routed_transfer(self, d_ptr: Any, d_key: Any, link: Link, dlv_id: Any, settled: bool,
                     cmd: Any) -> None:
    """A whole delivery on a link-routed link: its tag first (a tag over 32 bytes is
    REJECTED amqp:invalid-field, its credit given back, as 1.19 does), then the transfer,
    then the sender's state on it (transactions)."""
    if not _routed_tag(self, _cdata("pn_delivery_t *", d_ptr), link, dlv_id):
        _reject_local(self, _cdata("pn_delivery_t *", d_ptr), TAG_TOO_LONG[0], TAG_TOO_LONG[1])
        _pn_link_flow(link.key, 1)
        self.dirty.add(link.conn)
        return
    if link.conn.msg_log:  # messageLoggingComponents with MESSAGE trace on
        _log_message(self, link, cmd.payload, False)
    if settled:
        _pn_delivery_settle(d_ptr)
    else:
        self.in_dlvs[dlv_id] = (d_key, link)
        self.in_ids[d_key] = dlv_id
    self.outbox.append(cmd)
    if not settled:
        _sender_state(self, d_ptr, dlv_id)


def _sender_state(self, d_ptr: Any, dlv_id: Any) -> None:
    """SenderState for an unsettled delivery whose sender gave it a state (on the transfer or
    in a disposition: a transactional send, received, an extension state), with what the
    state carries; 1.19 moves it to the delivery it forwarded, link-routed or not."""
    state = _pn_delivery_remote_state(d_ptr)
    if state:
        info = None
        if state != STATE_ACCEPTED and state != STATE_RELEASED:
            info = _remote_info(_cdata("pn_delivery_t *", d_ptr), state) or None
        self.outbox.append(ipc.SenderState(dlv_id, state, info))


def _reject_empty(self, d_ptr: Any, l_ptr: Any) -> None:
    """A complete delivery of no bytes is no message: REJECTED amqp:decode-error "invalid
    message format" and its credit given back, as 1.19 does on every link."""
    _reject_local(self, _cdata("pn_delivery_t *", d_ptr), "amqp:decode-error",
                  "invalid message format")
    _pn_link_flow(l_ptr, 1)


def _drop_aborted(self, d_ptr: Any, l_ptr: Any) -> None:
    # An aborted transfer is discarded; the sender's credit comes back with the next flow.
    _pn_delivery_settle(d_ptr)
    _pn_link_flow(l_ptr, 1)


def _reject_local(self, d_ptr: Any, condition: str, description: str) -> None:
    _set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(d_ptr)),
                   condition, description)
    lib.pn_delivery_update(d_ptr, ipc.STATE_REJECTED)
    lib.pn_delivery_settle(d_ptr)


def _drop_in(self, dlv_id: int) -> None:
    ptr, _ = self.in_dlvs.pop(dlv_id)
    self.in_ids.pop(ptr, None)


def _fx_deliver(self, fx: ipc.Deliver) -> None:
    dlv_id, link_id, settled, payload = _fields(fx)
    link = self.links.get(link_id)
    if link is None:
        if self.out_tags:
            self.out_tags.pop(dlv_id, None)
        return  # the link went away; the core learns it from our LinkDetach
    _send(self, link, dlv_id, settled, _egress_annotations(self, link.conn, payload))


def _fx_router_deliver(self, fx: ipc.RouterDeliver) -> None:
    dlv_id, link_id, settled, to_override, phase, payload = _fields(fx)
    link = self.links.get(link_id)
    if link is None:
        return  # the link went away; the core learns it from our LinkDetach
    _send(self, link, dlv_id, settled,
          _router_egress(self, link.conn, payload, to_override, phase))


def _send(self, link: Link, dlv_id: int, settled: bool, payload: Any) -> None:
    """One outbound delivery: tagged with the core's id, sent whole, settled or remembered.

    Beyond the connection's byte budget it waits in the connection's out_queue instead."""
    conn = link.conn
    if link.out_stream is not None:  # a streamed delivery in progress on this link
        link.waiting.append((dlv_id, settled, payload))
        link.queued += 1
        return
    if conn.out_queue or len(payload) > conn.out_room:
        enqueue(self, link, dlv_id, settled, payload)
        return
    conn.out_room -= len(payload)
    l_ptr = link.key
    if self.out_tags:  # (link routes: the sender's own tag)
        d_ptr = _key(_tagged_out(self, link.ptr, dlv_id, settled or link.settle_for_receiver))
    else:
        d_ptr = _pn_delivery_tagged(l_ptr, dlv_id)
    if self.pending_states:  # (link routes: a sender's state given while it waited)
        _pending_state(self, dlv_id, _cdata("pn_delivery_t *", d_ptr))
    _pn_link_send_all(l_ptr, payload)
    _pn_link_advance(l_ptr)
    link.sent += 1
    if conn.msg_log:  # messageLoggingComponents with MESSAGE trace on
        _log_message(self, link, payload, True)
    if settled:
        _pn_delivery_settle(d_ptr)
    elif link.settle_for_receiver:
        _settle_for_receiver(self, dlv_id, d_ptr)
    else:
        self.out_dlvs[dlv_id] = (d_ptr, link)
    self.dirty.add(conn)


def _settle_for_receiver(self, dlv_id: int, d_ptr: Any) -> None:
    """An unsettled delivery to a receiver that asked for pre-settled ones (snd-settle-mode
    settled): it leaves settled and the core hears ACCEPTED, settled, as the router
    settled it on the receiver's behalf (as 1.19 does)."""
    _pn_delivery_settle(d_ptr)
    self.outbox.append(_command(Disposition, (dlv_id, STATE_ACCEPTED, True, None)))


def enqueue(self, link: Link, dlv_id: int, settled: bool, payload: Any) -> None:
    """Keep an outbound delivery until the connection's socket drains (see OUT_BUDGET): one
    copy of its bytes (a slice of an IPC batch frame is copied out, so the frame is not
    kept for it), sent by :meth:`refill`."""
    if type(payload) is memoryview and payload.nbytes * 2 < len(payload.obj):
        payload = bytes(payload)
    entry = [link, dlv_id, settled, payload, 0, None, 0, KIND_WHOLE, 0, None]
    _waiting(link.conn).append(entry)
    link.queued += 1
    if not settled:
        self.queued_out[dlv_id] = entry
    if not link.capped:
        # Backpressure: the socket does not drain, so the core should stop giving this link
        # deliveries (it holds them at the address, holding its senders' credit) instead of
        # the worker queueing as many as the receiver's credit allows (a receiver that
        # grants 100k and stops reading would make the router hold 100k messages).
        link.capped = True
        _report_flow(self, link)
    if link.conn.out_room > 0:
        refill(self, link.conn)


def refill(self, conn: Connection) -> None:
    """Hand queued deliveries to proton while the connection's byte budget allows; a
    delivery larger than what is left goes in slices (proton sees one partial delivery)."""
    queue = conn.out_queue
    while queue and conn.out_room > 0:
        entry = queue[0]
        link, dlv_id, settled, payload, offset, d_ptr, state, kind, _, rec = entry
        l_ptr = link.ptr
        if d_ptr is None:
            if rec is not None and rec.d is not None:  # a later part of a streamed one
                d_ptr = entry[5] = rec.d
            else:
                if self.out_tags:  # (link routes: the sender's own tag)
                    d_ptr = entry[5] = _tagged_out(self, l_ptr, dlv_id,
                                                   settled or link.settle_for_receiver)
                else:
                    d_ptr = entry[5] = lib.pn_delivery(l_ptr,
                                                       (8, ffi.from_buffer(_tag(dlv_id))))
                if self.pending_states:
                    _pending_state(self, dlv_id, d_ptr)
        n = min(len(payload) - offset, conn.out_room)
        if n:
            lib.pn_link_send(l_ptr, ffi.from_buffer(payload) + offset, n)
            conn.out_room -= n
            offset = entry[4] = offset + n
        if offset < len(payload):
            break  # the rest when the socket has taken more
        queue.popleft()
        if kind != KIND_WHOLE:
            _stream_part_sent(self, entry, d_ptr)
            continue
        link.queued -= 1
        lib.pn_link_advance(l_ptr)
        link.sent += 1
        if conn.msg_log:  # messageLoggingComponents with MESSAGE trace on
            _log_message(self, link, payload, True)
        settled = entry[2]  # a SettleOut may have come while it waited
        if settled:
            self.queued_out.pop(dlv_id, None)
            if self.tag_ids:
                self.tag_ids.pop(_key(d_ptr), None)
            if entry[6]:
                lib.pn_delivery_update(d_ptr, entry[6])
            lib.pn_delivery_settle(d_ptr)
        elif link.settle_for_receiver:
            del self.queued_out[dlv_id]
            lib.pn_delivery_settle(d_ptr)
            self.outbox.append(Disposition(dlv_id, ipc.STATE_ACCEPTED, True, None))
        else:
            del self.queued_out[dlv_id]
            _track_out(self, dlv_id, d_ptr, link)
        if not link.queued and link.drain_after:
            link.drain_after = False
            link.sent += lib.pn_link_drained(l_ptr)
    if not queue:  # drained: the core may send on every capped link again
        for link in list(conn.links.values()):
            if link.capped:
                link.capped = False
                _report_flow(self, link)
    self.dirty.add(conn)


def _log_message(self, link: Link, payload: Any, sent: bool) -> None:
    """1.19's MESSAGE trace line of a message received (before it is routed) or sent (once
    proton has all of it) on ``link``, read from its bytes (router_io/msgrepr.py): none for a
    message without application properties. Called only when its connection's ``msg_log``
    is set, so with MESSAGE trace off no message is looked at."""
    trace = self.msg_trace
    if trace is None:
        return
    what = msgrepr.message_repr(payload, link.conn.msg_log)
    if what is not None:
        _log_message_text(self, link, what, sent)


def _log_message_text(self, link: Link, what: str, sent: bool) -> None:
    l_ptr = link.ptr
    self.msg_trace(link.conn.conn_id, msgrepr.log_text(
        link.conn.conn_id, sent, what, _text(lib.pn_link_name(l_ptr)),
        _text(lib.pn_terminus_get_address(lib.pn_link_source(l_ptr))),
        _text(lib.pn_terminus_get_address(lib.pn_link_target(l_ptr)))))


def _fx_deliver_tag(self, fx: ipc.DeliverTag) -> None:
    """DeliverTag: the sender's own tag for the link-routed delivery the next
    Deliver/StreamDeliver names, kept until its proton delivery is made (_tagged_out)."""
    self.out_tags[fx.dlv_id] = fx.tag


def _tagged_out(self, l_ptr: Any, dlv_id: Any, settled: bool) -> Any:
    """A proton delivery on ``l_ptr`` (cffi) for ``dlv_id``: with the tag a link route passed
    on (out_tags), found again by its pointer (tag_ids) until it is settled, or with the
    core's id as every other delivery."""
    tag = self.out_tags.pop(dlv_id, None)
    if tag is None:
        return lib.pn_delivery(l_ptr, (8, ffi.from_buffer(_tag(dlv_id))))
    d_ptr = lib.pn_delivery(l_ptr, (len(tag), ffi.from_buffer(tag)))
    if not settled:
        self.tag_ids[_key(d_ptr)] = dlv_id
    return d_ptr


def _track_out(self, dlv_id: int, d_ptr: Any, link: Link) -> None:
    """An unsettled delivery ``refill`` handed to proton (``d_ptr`` a cffi pointer)."""
    self.out_dlvs[dlv_id] = (_key(d_ptr), link)


def _egress_annotations(self, conn: Connection, payload: Any) -> Any:
    """Strip router annotations for a stripping connection, else add ingress and trace.

    Only the message-annotations section is rewritten; the rest is copied unchanged.
    A message without router annotations going to a stripping connection is untouched
    (one without a message-annotations section is not even scanned).
    """
    if conn.strip_out and not _has_annotations(payload):
        return payload
    try:
        scan = _scan(payload)
    except scanner.MessageFormatError:
        return payload  # it was scanned on the way in; never block a delivery here
    if conn.strip_out:
        if not _router_annotated(_fields(scan)):
            return payload
        return _rewrite_annotations(payload, scan, strip=True)
    if conn.role == EDGE and conn.direction == "out":
        return _uplink_annotations(self, payload, scan, None, -1)
    me = self.node_tag
    return _rewrite_annotations(
        payload, scan, ingress=me if scan.ma_ingress is None else None, trace_append=me)


def _uplink_annotations(self, payload: Any, scan: Any, to_override: Optional[str],
                        phase: int) -> Any:
    """What an edge router sends up its uplink (its own ``edge`` connector): 1.19's edge
    routers neither add nor pass on ``x-opt-qd.ingress`` and ``x-opt-qd.trace`` (an interior
    router takes itself as the ingress: a multicast from an edge is forwarded by the valid
    origins of that interior); ``to`` and ``phase`` as for any router link."""
    return _rewrite_annotations(
        payload, scan, strip=True, to_override=scan.ma_to if to_override is None else to_override,
        phase=scan.ma_phase if phase == -1 else phase)


def _router_egress(self, conn: Connection, payload: Any, to_override: Optional[str],
                   phase: int) -> Any:
    """Egress annotations of a RouterDeliver (inter-router links never strip): ingress if
    absent, this router appended to the trace, ``x-opt-qd.to`` set unless ``to_override`` is
    None, ``x-opt-qd.phase`` set unless ``phase`` is -1. Only that section is rewritten."""
    try:
        scan = _scan(payload)
    except scanner.MessageFormatError:
        return payload  # it was scanned on the way in; never block a delivery here
    if conn.role == EDGE and conn.direction == "out":
        return _uplink_annotations(self, payload, scan, to_override, phase)
    me = self.node_tag
    return _rewrite_annotations(
        payload, scan, ingress=me if scan.ma_ingress is None else None, trace_append=me,
        to_override=scanner.KEEP if to_override is None else to_override,
        phase=scanner.KEEP if phase == -1 else phase)


# cross calls between engine parts (at the end: the pure build imports them after this part's
# own functions exist, so the parts may call each other)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_policy import _oversize, _police_transfer
from router_io.engine_links import _report_flow
from router_io.engine_dispositions import (
    _on_outbound_update, _pending_state, _remote_info, _set_condition)
from router_io.engine_stream_in import _stream_begin, _stream_in
from router_io.engine_stream_out import _stream_part_sent
# --- end engine parts ---
