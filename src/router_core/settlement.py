"""Settlement: pairing outbound copies with their inbound delivery and carrying outcomes back.

Owns: dispositions from receivers (Disposition -> UpdateIn to the sender), settlement by the
sender (SettleIn -> SettleOut to every copy, or dropping what the core still holds), the
multicast outcome precedence, and the outcome counters. Also the two ways a held delivery stops
waiting (:func:`unhold`, :func:`copy_unqueued`), which give the sender its credit back.

A held delivery is found where it waits without searching: held at its address (its priority's
queue), or queued on one router data link (``InDelivery.queued_on``), or, multicast, on its
``targets``.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from router_core.corestate import MCAST_RANK
from common.ipc import (
    DIR_IN, STATE_ACCEPTED, STATE_MODIFIED, STATE_RECEIVED, STATE_REJECTED, STATE_RELEASED,
    SettleOut, UpdateIn)
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.records import (
    LOG_LINK_BLOCKED, LOG_LINK_STUCK, ROLE_INTERNAL, InDelivery, Link, OutDelivery, _effect,
    _fields)
# --- end core parts ---


# 1.19's stuck delivery detection (delivery_tracker.c): (sweep period, stuck age) in seconds, in
# production and with test hooks (-T)
STUCK_PROD = (30.0, 10.0)
STUCK_TEST = (5.0, 3.0)


def count_outcome(core: Any, link: Link, state: int, router_wide: bool) -> None:
    if state == STATE_ACCEPTED:
        link.accepted += 1
        link.rate_at = core.now
        if router_wide:
            core.accepted += 1
    elif state == STATE_RELEASED:
        link.released += 1
        if router_wide:
            core.released += 1
    elif state == STATE_MODIFIED:
        link.modified += 1
        if router_wide:
            core.modified += 1
    elif state == STATE_REJECTED:
        link.rejected += 1
        link.rate_at = core.now
        if router_wide:
            core.rejected += 1


def count_delay(core: Any, link: Link, dlv: InDelivery, router_wide: bool) -> None:
    """deliveriesDelayed1Sec/10Sec: an unsettled delivery settled more than 1 s (10 s) after
    it came in (1.19 qdr_delivery_increment_counters_CT: an outbound copy counts from its
    inbound delivery's ingress time; the router-wide counters only inbound deliveries)."""
    delay = core.now - dlv.at
    if delay > 10.0:
        link.delayed_10sec += 1
        if router_wide:
            core.delayed_10sec += 1
    elif delay > 1.0:
        link.delayed_1sec += 1
        if router_wide:
            core.delayed_1sec += 1


def scan_stuck(core: Any, age: float) -> None:
    """1.19's stuck delivery detection, one sweep: an unsettled delivery on a link where nothing
    was accepted or rejected for more than ``age`` seconds (since its attach) is stuck, counted
    once (deliveriesStuck) until it is settled; the link's first one is logged. Deliveries still
    queued in the core (not sent) are not looked at."""
    now = core.now
    for dlv in core.in_unsettled.values():
        link = dlv.link
        if not dlv.stuck and not link.closed and now - link.rate_at > age:
            dlv.stuck = True
            stick(core, link, age)
    for link in core.links.values():
        if link.unsettled and not link.closed and now - link.rate_at > age:
            for out in link.unsettled.values():
                if not out.stuck:
                    out.stuck = True
                    stick(core, link, age)


def stick(core: Any, link: Link, age: float) -> None:
    link.stuck += 1
    core.stuck += 1
    if link.stuck == 1 and core.log_info:
        core.info_logs.append((LOG_LINK_STUCK, link, age, None))


def unstick(core: Any, link: Link) -> None:
    link.stuck -= 1
    core.stuck -= 1


def scan_blocked(core: Any, age: float) -> None:
    """1.19's blocked links, in the same sweep: a link whose credit has been zero for more than
    ``age`` seconds (since its attach, or since the sweep first saw it at zero) is blocked,
    counted in linksBlocked and logged once, until it has credit again (:func:`credit_seen`).
    Whether deliveries wait does not matter (1.19: an idle receiver granting no credit is
    blocked too). The time credit ran out is only looked at here, not per delivery, so a link
    that spent its credit is found blocked up to one sweep later than 1.19 would."""
    now = core.now
    for link in core.links.values():
        if link.closed or link.conn.role == ROLE_INTERNAL:
            continue
        if link.direction == DIR_IN:
            credit = link.granted - link.received
        else:
            credit = link.limit - link.delivered
        if credit > 0:
            credit_seen(core, link)
        elif link.zero_at < 0.0:
            link.zero_at = now
        elif not link.blocked and int(now - link.zero_at) > age:  # whole seconds, as 1.19
            link.blocked = True
            core.links_blocked += 1
            if core.log_info:
                core.info_logs.append((LOG_LINK_BLOCKED, link, now - link.zero_at, None))


def credit_seen(core: Any, link: Link) -> None:
    """``link`` has credit (a receiver's flow, the router's grant, or the sweep saw it)."""
    link.zero_at = -1.0
    if link.blocked:
        link.blocked = False
        core.links_blocked -= 1


def settle_in(core: Any, dlv: InDelivery, state: int, info: Any) -> None:
    """Final outcome of an unsettled inbound delivery: tell its sender (if still there)."""
    if core.in_unsettled.pop(dlv.dlv_id, None) is None:
        return
    link = dlv.link
    if not link.closed:
        core._emit(link.peer, _effect(UpdateIn, (dlv.dlv_id, state, True, info)))
    count_settled_in(core, dlv, state)  # (then the credit it gives back, if any)


def count_settled_in(core: Any, dlv: InDelivery, state: int) -> None:
    """The counts of an unsettled inbound delivery just taken out of ``core.in_unsettled``
    with its outcome ``state`` (by the router, settle_in, or by its sender, on_settle_in)."""
    link = dlv.link
    link.in_unsettled -= 1
    if link.settle_credit and not dlv.pending:  # it left the core: its credit comes back now
        link.settle_owed -= 1                   # (still held: when it stops being held, unhold)
        core._replenish(link)
    count_outcome(core, link, state, True)
    count_delay(core, link, dlv, True)
    if dlv.stuck:
        unstick(core, link)


def forget_out(core: Any, out: OutDelivery) -> None:
    del core.out_unsettled[out.out_id]
    del out.link.unsettled[out.out_id]
    dlv = out.in_dlv
    if dlv.out is out:  # anycast: break the dlv <-> out cycle, or only the GC frees them
        dlv.out = None
    if out.state:
        count_outcome(core, out.link, out.state, False)
    count_delay(core, out.link, dlv, False)
    if out.stuck:
        unstick(core, out.link)


def copy_done(core: Any, dlv: InDelivery, state: int, info: Any) -> None:
    """One copy of an unsettled multicast delivery reached its outcome."""
    if MCAST_RANK.get(state, 3) > MCAST_RANK.get(dlv.outcome, 0):
        dlv.outcome = state if state in MCAST_RANK else STATE_ACCEPTED
        dlv.info = info
    dlv.open -= 1
    if dlv.open > 0:
        return
    settle_in(core, dlv, dlv.outcome, dlv.info)
    for out in dlv.copies:
        if out.out_id in core.out_unsettled:
            forget_out(core, out)
            if not out.link.closed:
                core._emit(out.link.peer, _effect(SettleOut, (out.out_id, out.state)))
    dlv.copies = []


def unhold(core: Any, dlv: InDelivery) -> None:
    """An anycast delivery the core held (at its address, or queued toward another router)
    stops waiting: sent, settled by its sender, or released. Its sender gets the credit."""
    dlv.pending = 0
    dlv.queued_on = None
    if core.lr.held_states:  # a routed delivery's sender state not passed on (linkroute.py)
        core.lr.held_states.pop(dlv.dlv_id, None)
    if core.lr.held_tags:  # a routed delivery's tag (sent: already taken by held_tag_out)
        core.lr.held_tags.pop(dlv.dlv_id, None)
    stop_holding(core, dlv)


def copy_unqueued(core: Any, dlv: InDelivery) -> None:
    """One queued multicast copy left its queue (sent or dropped)."""
    dlv.pending -= 1
    if dlv.pending == 0:
        if core.lr.held_states:  # its sender's state, kept for the queued copies
            core.lr.held_states.pop(dlv.dlv_id, None)
        stop_holding(core, dlv)


def stop_holding(core: Any, dlv: InDelivery) -> None:
    """The core holds ``dlv`` no longer: its payload goes, and its sender gets the credit back
    now, or at its settlement if it is still unsettled on a link that gives credit back then
    (Link.settle_credit; count_settled_in)."""
    dlv.payload = None
    if dlv.credit_back:  # pre-settled, held at its address: its credit came back then
        return
    link = dlv.link
    link.held -= 1
    core._replenish_sent(link, dlv.settled or dlv.dlv_id not in core.in_unsettled)


def release_waiting(core: Any, dlv: InDelivery) -> None:
    """A held anycast delivery can go nowhere (what it waited for went away): RELEASED if
    unsettled, else dropped, counted by the router only, as 1.19 counts what a link it was
    waiting on had when it went (not the sender's link, whose delivery had a destination)."""
    if dlv.settled:
        core.dropped_presettled += 1
    else:
        settle_in(core, dlv, STATE_RELEASED, None)
    unhold(core, dlv)


def on_disposition(core: Any, peer: Any, cmd: Any) -> None:
    out_id, state, settled, info = _fields(cmd)
    out = core.out_unsettled.get(out_id)
    if out is None:
        return
    terminal = state in MCAST_RANK
    # a link-routed delivery passes every state on as it is (transactional, received,
    # extension states: their fields travel in info["data"], opaque), settled or not
    if not terminal and state and out.link.peer_link is not None:
        terminal = True
    if terminal:
        out.state = state
        out.info = info
    dlv = out.in_dlv
    if dlv.multicast:
        if settled:
            if not out.state:
                out.state = STATE_ACCEPTED
            forget_out(core, out)
        if not out.done and (terminal or settled):
            out.done = True
            copy_done(core, dlv, out.state, out.info)
        return
    if settled:
        # Settled with no outcome ever given: the receiver consumed it (its default outcome);
        # settled with an extension state: that state and its value go to the sender.
        if not out.state:
            if state and state != STATE_RECEIVED:
                out.state = state
                out.info = info
            else:
                out.state = STATE_ACCEPTED
        forget_out(core, out)
        settle_in(core, dlv, out.state, out.info)
    elif terminal:
        if dlv.link.closed:  # nobody upstream will ever settle: settle here
            forget_out(core, out)
            settle_in(core, dlv, state, info)
            core._emit(out.link.peer, _effect(SettleOut, (out_id, state)))
        else:
            core._emit(dlv.link.peer, _effect(UpdateIn, (dlv.dlv_id, state, False, info)))
    elif state and not dlv.link.closed:
        # a non-terminal state (received, or an extension state such as descriptor 999 with
        # its value): on to the sender as it is, as 1.19 does
        core._emit(dlv.link.peer, _effect(UpdateIn, (dlv.dlv_id, state, False, info)))


def on_settle_in(core: Any, peer: Any, cmd: Any) -> None:
    dlv_id, state = _fields(cmd)
    dlv = core.in_unsettled.pop(dlv_id, None)
    if dlv is None:
        return
    count_settled_in(core, dlv, state)
    if dlv.pending:
        withdraw_held(core, dlv)
    outs = dlv.copies if dlv.multicast else ([dlv.out] if dlv.out is not None else [])
    for out in outs:
        if out.out_id in core.out_unsettled:
            forget_out(core, out)
            if not out.link.closed:
                core._emit(out.link.peer, _effect(SettleOut, (out.out_id, state)))
    dlv.copies = []
    dlv.out = None


def withdraw_held(core: Any, dlv: InDelivery) -> None:
    """A delivery still waiting in the core (held at its address, queued toward another
    router, or multicast copies queued on their links) is taken out of where it waits."""
    if dlv.multicast:
        for consumer in dlv.targets:
            queue = consumer.queue
            while dlv in queue:
                queue.remove(dlv)
                copy_unqueued(core, dlv)
    else:
        out_link = dlv.queued_on
        if out_link is not None:  # queued toward another router
            if dlv in out_link.queue:
                out_link.queue.remove(dlv)
        elif dlv.addr is not None and dlv.addr.queues is not None:  # held at its address
            held = dlv.addr.queues[dlv.priority]
            if dlv in held:
                held.remove(dlv)
                dlv.addr.held -= 1
        unhold(core, dlv)
