"""Transfer and credit on outbound links: sending, holding, draining, and losing a receiver.

Owns: sending a delivery on a client link (Deliver) or a router link (RouterDeliver) and
tracking it until the receiver settles it; holding an anycast delivery at its address when no
consumer has credit; queueing multicast copies per link; the receivers' credit (LinkFlow,
Drained) and what waits for it; and what happens to queued and unsettled deliveries when an
outbound link goes away (released, or the receiver's outcome, or MODIFIED in doubt).
The senders' side of credit (LinkCredit, coalesced per flush, replenished as deliveries leave the
core) is RouterCore's ``_credit``/``_replenish`` (core.py): every part gives credit back.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from collections import deque
from typing import Any, Optional

from common.ipc import (
    DIR_OUT, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED, Deliver, DeliverOrigin, Drained,
    LinkStall, RouterDeliver, UpdateIn)
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.records import (
    LINK_CONTROL, LINK_DATA, ROLE_EDGE, ROLE_INTER_ROUTER, ROLE_INTERNAL, STALL_NONE, STALL_ON,
    STALL_RESTORING,
    Address, InDelivery, Link, OutDelivery, _effect, _fields, _held_queues, _in_delivery,
    _out_delivery, _own)
from router_core.linkroute import (
    copy_sent, held_tag_out, mirror_credit, routed_sent, tag_held, tag_next)
from router_core.settlement import (
    copy_done, copy_unqueued, count_outcome, credit_seen, forget_out, release_waiting, settle_in,
    unhold)
from router_core.streaming import Stream, start_copy, stream_bytes
from router_core.streamlinks import stream_link
# --- end core parts ---

_MODIFIED_FAILED = {"failed": True, "undeliverable": False}
_UNAVAILABLE_REJECT = {"condition": "amqp:not-found",
                       "description": "Deliveries cannot be sent to an unavailable address"}


def send(core: Any, link: Link, dlv: Optional[InDelivery], settled: bool,
         payload: Any, origin: Link) -> Optional[OutDelivery]:
    """``payload``, which came in on ``origin``, on the client link ``link`` (which has
    credit). To the agent (the router's internal connection) the origin's connection goes
    first (DeliverOrigin: management checks the requesting connection's policy)."""
    out_id = core._next_out
    core._next_out = out_id + 1
    link.delivered += 1
    link.conn.last_delivery_at = core.now
    addr = link.addr
    if not link.fallback:  # (1.19: a fallback store is not egress)
        if addr is not None:  # (a streaming link: its sender counted it, streamlinks.py)
            addr.egress += 1
        role = link.conn.role
        if role == ROLE_INTER_ROUTER:  # a link-routed link toward another router (1.19)
            core.transit += 1
        elif role != ROLE_INTERNAL:  # (1.19: its agent takes them in-process)
            core.egress += 1
    if link.to_container and addr is not None:
        addr.to_container += 1
        core.egress_container += 1
    if link.conn.role == ROLE_INTERNAL:
        core._emit(link.peer, _effect(DeliverOrigin, (out_id, origin.conn.conn_id)))
    # on an edge connection (either end) a targeted sender's address travels in x-opt-qd.to,
    # as 1.19 annotates every delivery of a targeted link (the next router may not know it)
    to_override = None
    if link.conn.role == ROLE_EDGE and origin.address is not None and not origin.router:
        to_override = origin.address
    if type(payload) is Stream:  # a message still arriving (streaming.py)
        if not payload.done:
            start_copy(core, link, out_id, settled, payload, to_override, -1)
            return track_out(core, link, dlv, settled, out_id)
        payload = stream_bytes(payload)  # it completed while this copy waited: sent whole
    link.delivery_count += 1  # (a copy started above counts once its last frame went on)
    if to_override is not None:
        core._emit(link.peer, _effect(RouterDeliver, (out_id, link.link_id, settled,
                                                      to_override, -1, payload)))
    else:
        core._emit(link.peer, _effect(Deliver, (out_id, link.link_id, settled, payload)))
    return track_out(core, link, dlv, settled, out_id)


def send_router(core: Any, link: Link, dlv: Any, settled: bool, payload: Any,
                to_override: Any, phase: int) -> Any:
    """``payload`` on the router link ``link`` (which has credit)."""
    out_id = core._next_out
    core._next_out = out_id + 1
    link.delivered += 1
    link.conn.last_delivery_at = core.now
    if link.link_type == LINK_DATA:
        core.transit += 1
    if type(payload) is Stream:  # a message still arriving (streaming.py)
        if not payload.done:
            start_copy(core, link, out_id, settled, payload, to_override, phase)
            return track_out(core, link, dlv, settled, out_id)
        payload = stream_bytes(payload)  # it completed while this copy waited: sent whole
    link.delivery_count += 1
    core._emit(link.peer, _effect(RouterDeliver, (out_id, link.link_id, settled, to_override,
                                                  phase, payload)))
    return track_out(core, link, dlv, settled, out_id)


def track_out(core: Any, link: Link, dlv: Any, settled: bool, out_id: Any) -> Any:
    """After sending ``out_id`` on ``link``: count it (pre-settled) or remember it until
    the receiver settles it."""
    if settled:
        link.presettled_count += 1
        return None
    out = _out_delivery(out_id, link, dlv)
    core.out_unsettled[out_id] = out
    link.unsettled[out_id] = out
    return out


def send_copy(core: Any, link: Link, dlv: InDelivery) -> Any:
    """``dlv``'s message on ``link``, a client link or one toward another router; the
    OutDelivery to track (None when pre-settled)."""
    track = None if dlv.settled else dlv
    if link.router:
        return send_router(core, link, track, dlv.settled, dlv.payload, dlv.to_override,
                           dlv.phase)
    return send(core, link, track, dlv.settled, dlv.payload, dlv.link)


def send_local(core: Any, link: Link, target: Link, dlv_id: Any, settled: bool, payload: Any,
               addr: Address) -> None:
    """One anycast delivery to the local consumer ``target`` (which has credit); a message
    still arriving for a consumer on an edge connection whose peer takes streaming links
    goes on a streaming link of that connection instead (streamlinks.py)."""
    if type(payload) is Stream and target.conn.streaming_links and not target.router:
        if not (payload.done or target.peer_link is not None or target.fallback):
            addr.egress += 1  # (send counts a streaming link's delivery nowhere)
            send_or_queue(core, link, dlv_id, settled, payload, addr,
                          stream_link(core, target, payload), None, -1)
            return
    if core.routed_tag is not None:  # a link route's client tag (linkroute.tag_next)
        tag_next(core, link, target, dlv_id)
    if settled:
        send(core, target, None, True, payload, link)
    else:
        dlv = _in_delivery(dlv_id, link, False, None, addr, False, core.now)
        core.in_unsettled[dlv_id] = dlv
        dlv.out = send(core, target, dlv, False, payload, link)
    core._replenish_sent(link, settled)


def send_or_queue(core: Any, link: Link, dlv_id: Any, settled: bool, payload: Any, addr: Any,
                  out: Link, to_override: Any, phase: int) -> None:
    """One anycast delivery on ``out``, a link toward another router (a data or streaming
    link) or a streaming link of an edge connection: sent if it has credit and nothing
    waits on it, else queued there (without credit, as 1.19 queues on a link)."""
    dlv = None
    if not settled:
        dlv = _in_delivery(dlv_id, link, False, None, addr, False, core.now)
        core.in_unsettled[dlv_id] = dlv
    if not out.queue and out.limit > out.delivered:
        if out.router:
            sent = send_router(core, out, dlv, settled, payload, to_override, phase)
        else:
            sent = send(core, out, dlv, settled, payload, link)
        if dlv is not None:
            dlv.out = sent
        core._replenish_sent(link, settled)
        return
    if dlv is None:
        dlv = _in_delivery(dlv_id, link, True, None, addr, False, core.now)
    dlv.payload = _own(payload)
    dlv.to_override = to_override
    dlv.phase = phase
    dlv.pending = 1
    dlv.queued_on = out
    if settled and link.peer_link is None:  # as 1.19: its credit back now, the queue bounded
        if len(out.queue) >= out.capacity > 0:
            drop_queued_presettled(core, out)
        dlv.credit_back = True
        core._replenish(link)
    else:
        link.held += 1
    out.queue.append(dlv)
    if type(payload) is Stream:  # it keeps its chunks while this delivery waits
        payload.dlv = dlv


def unroutable(core: Any, link: Link, dlv_id: Any, settled: bool) -> None:
    """No destination: a pre-settled delivery is dropped, an unsettled one RELEASED."""
    end_unrouted(core, link, dlv_id, settled, STATE_RELEASED, None)


def reject_unavailable(core: Any, link: Link, dlv_id: Any, settled: bool) -> None:
    """A client's delivery to an address whose treatment is ``unavailable`` (an anonymous
    sender's: a targeted one is refused at attach): REJECTED amqp:not-found as 1.19 does; a
    pre-settled one is dropped."""
    end_unrouted(core, link, dlv_id, settled, STATE_REJECTED, _UNAVAILABLE_REJECT)


def end_unrouted(core: Any, link: Link, dlv_id: Any, settled: bool, state: int,
                 info: Any) -> None:
    """A delivery that goes nowhere: pre-settled, dropped and counted; unsettled, settled back
    to its sender with ``state`` (and a copy of ``info``, effects are never shared)."""
    if settled:
        link.dropped_presettled_count += 1
        core.dropped_presettled += 1
    else:
        link.in_unsettled -= 1
        count_outcome(core, link, state, True)
        if not link.closed:
            core._emit(link.peer, _effect(UpdateIn, (dlv_id, state, True,
                                                     None if info is None else dict(info))))
    if link.addr is not None and link.credited and link.peer_link is None:
        if link.stall != STALL_ON:
            stall(core, link)
    else:
        core._replenish(link)


def stall(core: Any, link: Link) -> None:
    """A delivery on a targeted sender's link went nowhere: its address has no destination
    (no local consumer, no reachable router with one; 1.19's "no path"). As 1.19 does, the
    sender is asked to drain (LinkStall on: the drain flag, its credit left as it is) and
    gets no credit back for this delivery or any other while the address has no
    destination; it waits with the senders not yet credited (``addr.waiting``) and gets its
    window back when a destination appears (:func:`unstall`). Nothing happens when the last
    consumer goes, only when a delivery finds none."""
    link.addr.waiting.append(link)  # (not there: never stalled, or restoring)
    link.stall = STALL_ON
    if not link.closed:
        core._emit(link.peer, _effect(LinkStall, (link.link_id, True)))


def unstall(core: Any, link: Link) -> None:
    """The stalled link's address (or its fallback) has a destination again: the drain flag
    is cleared (LinkStall off) and the worker's LinkUnstalled, saying the credit the sender
    has, brings the window back to its capacity (:func:`on_link_unstalled`), as 1.19 gives
    a stalled sender its credit back (all of it when it drained)."""
    link.stall = STALL_RESTORING
    if not link.closed:
        link.stall_offs += 1
        core._emit(link.peer, _effect(LinkStall, (link.link_id, False)))


def on_link_unstalled(core: Any, peer: Any, cmd: Any) -> None:
    """LinkUnstalled(link, credit): the sender's credit when the drain flag was cleared.
    Only the answer to the latest LinkStall off counts (the link may have stalled again
    meanwhile: then it waits for its next destination)."""
    link = core.links.get(cmd[0])
    if link is None or link.stall_offs <= 0:
        return
    link.stall_offs -= 1
    if link.stall_offs or link.stall != STALL_RESTORING:
        return
    link.stall = STALL_NONE
    credit = cmd[1] if cmd[1] > 0 else 0
    link.granted = link.received + credit
    link.credit_owed = 0
    owed = link.capacity - link.held - link.settle_owed - credit
    if owed > 0:
        core._credit(link, owed)


def hold(core: Any, link: Link, dlv_id: Any, settled: bool, priority: int, payload: Any,
         addr: Address) -> None:
    """Local consumers, none with credit: hold the delivery at the address.

    A pre-settled one gives its sender the credit back at once, as 1.19 gives it back for
    every pre-settled delivery that has a destination, waiting or not; what waits is then
    bounded as 1.19 bounds a receiver's list of undelivered deliveries: when as many wait as
    the consumers' capacity, the waiting pre-settled ones are dropped (all but the next one
    to go), counted on the consumer's link (droppedPresettledCount) and the router's
    droppedPresettledDeliveries (:func:`drop_held_presettled`)."""
    if core.routed_tag is not None:  # a link route's client tag (linkroute.tag_held)
        tag_held(core, link, dlv_id)
    dlv = _in_delivery(dlv_id, link, settled, _own(payload), addr, False, core.now)
    if not settled:
        core.in_unsettled[dlv_id] = dlv
    if addr.priority >= 0:
        priority = addr.priority
    dlv.priority = 9 if priority > 9 else (0 if priority < 0 else priority)
    if addr.queues is None:
        addr.queues = _held_queues()
    if settled and link.peer_link is None:  # (a link-routed sender's credit is mirrored)
        if addr.held and addr.held >= held_bound(addr):
            drop_held_presettled(core, addr)
        dlv.credit_back = True
        core._replenish(link)
    else:
        link.held += 1
    addr.queues[dlv.priority].append(dlv)
    addr.held += 1
    dlv.pending = 1
    if type(payload) is Stream:  # it keeps its chunks while this delivery waits
        payload.dlv = dlv


def held_bound(addr: Address) -> int:
    """How many deliveries may wait at ``addr`` before its pre-settled ones are dropped: the
    capacity of its consumers (1.19 bounds each receiver's list by its link's capacity;
    0: no bound)."""
    bound = 0
    for consumer in addr.consumers:
        if consumer.capacity > 0:
            bound += consumer.capacity
    return bound if bound > 0 else 1 << 62


def drop_held_presettled(core: Any, addr: Address) -> None:
    """Drop the pre-settled deliveries waiting at ``addr``, all but the next one to go (as
    1.19 keeps the head of a receiver's list: it may be on its way). They are counted on
    the consumer whose turn it is (one consumer: the receiver they waited for) and the
    router; their senders had their credit back when they were held."""
    queues = addr.queues
    consumers = addr.consumers
    charged = consumers[addr.rr % len(consumers)] if consumers else None
    kept_next = False
    for p in range(9, -1, -1):
        queue = queues[p]
        if not queue:
            continue
        kept = deque()
        for dlv in queue:
            if not kept_next or not dlv.credit_back:
                kept_next = True
                kept.append(dlv)
                continue
            addr.held -= 1
            if charged is not None:  # (1.19 counts a dropped one as that link's pre-settled)
                charged.dropped_presettled_count += 1
                charged.presettled_count += 1
            core.dropped_presettled += 1
            unhold(core, dlv)
        queues[p] = kept


def drop_queued_presettled(core: Any, link: Link) -> None:
    """``link``'s queue is as long as its capacity: the pre-settled deliveries (multicast
    copies; anycast ones toward another router) queued on it, but the one at its head, are
    dropped and counted on the link and the router, as 1.19 drops them from a link's list of
    undelivered deliveries. Their senders had their credit back when they were queued."""
    queue = link.queue
    if len(queue) < 2:
        return
    kept = deque()
    kept.append(queue.popleft())
    for dlv in queue:
        if not dlv.credit_back:
            kept.append(dlv)
            continue
        link.dropped_presettled_count += 1
        link.presettled_count += 1  # (1.19 counts a dropped one as the link's pre-settled)
        core.dropped_presettled += 1
        if dlv.multicast:
            copy_unqueued(core, dlv)
        else:
            unhold(core, dlv)
    link.queue = kept


def forward_multicast(core: Any, targets: list, dlv: InDelivery) -> None:
    """One copy of ``dlv`` to every link of ``targets`` (local consumers, and one data
    link per next-hop router), queued on a link without credit."""
    settled = dlv.settled
    dlv.targets = targets
    if not settled:
        core.in_unsettled[dlv.dlv_id] = dlv
        dlv.open = len(targets)
        dlv.copies = []
    for link in targets:
        if link.queue or link.limit <= link.delivered:
            if not dlv.pending:
                dlv.payload = _own(dlv.payload)
            if settled and len(link.queue) >= link.capacity > 0:
                drop_queued_presettled(core, link)
            link.queue.append(dlv)
            dlv.pending += 1
        else:
            out = send_copy(core, link, dlv)
            if not settled:
                dlv.copies.append(out)
    if dlv.pending:
        if settled and dlv.link.peer_link is None:  # its credit is back at once (as hold)
            dlv.credit_back = True
            core._replenish(dlv.link)
        else:
            dlv.link.held += 1
        if type(dlv.payload) is Stream:  # it keeps its chunks while a copy waits
            dlv.payload.dlv = dlv
    else:
        dlv.payload = None
        core._replenish_sent(dlv.link, settled)


def drain_queue(core: Any, link: Link) -> None:
    """Send what waits on an outbound link, as far as its credit goes: multicast copies
    (client or router link), anycast deliveries toward another router, or raw routing
    messages on a control link."""
    queue = link.queue
    if link.link_type == LINK_CONTROL or link.endpoint is not None:  # raw messages
        while queue and link.limit > link.delivered:
            send_router(core, link, None, True, queue.popleft(), None, -1)
        return
    while queue and link.limit > link.delivered:
        dlv = queue.popleft()
        sent = send_copy(core, link, dlv)
        if dlv.multicast:
            if not dlv.settled:
                dlv.copies.append(sent)
                if core.lr.held_states:
                    copy_sent(core, dlv, sent)  # its sender's state, given while it waited
            copy_unqueued(core, dlv)
        else:
            if not dlv.settled:
                dlv.out = sent
                if core.lr.held_states:
                    routed_sent(core, dlv)  # its sender's state, given while it was queued
            unhold(core, dlv)


def on_flow(core: Any, peer: Any, cmd: Any) -> None:
    link_id, limit, drain = _fields(cmd)
    link = core.links.get(link_id)
    if link is None or link.direction != DIR_OUT:
        return
    link.limit = limit
    if link.zero_at >= 0.0 and limit > link.delivered:  # credit again: not blocked
        credit_seen(core, link)
    addr = link.addr
    if addr is None:  # a router link
        if link.queue:
            drain_queue(core, link)
        if drain and (link.limit > link.delivered or not link.queue):
            core._emit(link.peer, Drained(link_id))
            if link.limit > link.delivered:
                link.delivered = link.limit
        return
    if link.queue:
        drain_queue(core, link)
    elif addr.held:  # anycast deliveries held at the address (whatever its dist is now)
        queues = addr.queues
        while addr.held and link.limit > link.delivered:
            for p in range(9, -1, -1):
                if queues[p]:
                    dlv = queues[p].popleft()
                    break
            addr.held -= 1
            if core.lr.held_tags and link.peer_link is not None:
                held_tag_out(core, link, dlv)  # its client's tag goes first
            if dlv.settled:
                send(core, link, None, True, dlv.payload, dlv.link)
            else:
                dlv.out = send(core, link, dlv, False, dlv.payload, dlv.link)
                if core.lr.held_states:
                    routed_sent(core, dlv)  # its sender's state, given while it was held
            unhold(core, dlv)
    if link.peer_link is not None:  # link-routed: the sender gets this credit and drain
        mirror_credit(core, link, drain)
        return
    if drain and (link.limit > link.delivered or not (link.queue or addr.held)):
        core._emit(link.peer, Drained(link_id))
        if link.limit > link.delivered:
            link.delivered = link.limit


def release_held(core: Any, addr: Address) -> None:
    """No consumer left: every delivery held at the address is released or dropped."""
    if addr.queues is None:
        return
    for queue in addr.queues:
        while queue:
            addr.held -= 1
            release_waiting(core, queue.popleft())


def release_queue(core: Any, link: Link) -> None:
    """Everything queued on an outbound link (not sent yet) is released: unsettled
    deliveries go back RELEASED, pre-settled ones are dropped (counted by the router, as
    1.19 counts a closing link's undelivered ones); their senders get the credit back."""
    queue = link.queue
    link.queue = deque()
    for dlv in queue:
        if dlv.multicast:
            copy_unqueued(core, dlv)
            if not dlv.settled:
                copy_done(core, dlv, STATE_RELEASED, None)
            else:
                core.dropped_presettled += 1
        else:
            release_waiting(core, dlv)


def fail_outbound(core: Any, link: Link) -> None:
    """An outbound link is gone: what was queued for it is released (an anycast delivery
    toward another router), what was sent and not settled gets the receiver's outcome if it
    gave one, else MODIFIED (in doubt)."""
    release_queue(core, link)
    for out in list(link.unsettled.values()):
        if out.out_id not in core.out_unsettled:
            continue
        forget_out(core, out)
        dlv = out.in_dlv
        if out.state:
            state, info = out.state, out.info
        else:
            state, info = STATE_MODIFIED, dict(_MODIFIED_FAILED)  # effects are not shared
        if dlv.multicast:
            if not out.done:
                out.done = True
                copy_done(core, dlv, state, info)
        else:
            settle_in(core, dlv, state, info)
