"""Interior relay: the other routers, the links toward them and the routing protocol's messages.

Owns (interior mode only): the routing table the agent gives the core (RouteUpdate: next hop,
cost and valid origins per router; RemoteAddress: which routers have a destination for a key),
choosing the data link toward a router (per priority), the least-cost/least-busy router for an
anycast delivery, one data link per distinct next hop for a multicast one, topological
addresses (``_topo/0/<router>/...``, ``_topo/0/all/...``), sending a delivery toward another
router (queued on its data link without credit), the routing protocol's own messages
(ControlIn to the agent, ControlSend from it, flooded or routed), and telling the agent about
local destinations (LocalAddress). The forwarders (forwarders.py) decide when a delivery goes
to another router; this module knows how.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from router_core.addressing import CLASS_ROUTER, CLASS_TOPOLOGICAL, mobile_text
from router_core.corestate import DIST_BALANCED, DIST_CLOSEST, DIST_MULTICAST, DIST_UNAVAILABLE
from common.ipc import STATE_ACCEPTED, ControlIn, LocalAddress, UpdateIn
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import address_of, drop_fallback, key_of
from router_core.records import (
    STALL_ON, Address, Link, RemoteRouter, _effect, _in_delivery, _own, set_treatment)
from router_core.settlement import count_outcome
from router_core.streamlinks import stream_link
from router_core.transfer import (
    forward_multicast, release_queue, send_or_queue, send_router, unroutable, unstall)
from router_core.linkroute import is_route_key, remote_route
# --- end core parts ---

# The routing protocol's own addresses: what arrives for them goes to the agent (ControlIn).
CONTROL_LOCAL = frozenset(["Lqdhello", "Lqdrouter", "Lqdrouter.ma"])
CONTROL_FLOOD = frozenset(["Tqdrouter", "Tqdrouter.ma"])
_CONTROL_BACKLOG = 1000   # routing messages queued on a control link without credit, at most
# The treatment hint a router advertises with a mobile address (MAU), by distribution code
_HINT_OF_DIST = {DIST_MULTICAST: 1, DIST_CLOSEST: 2, DIST_BALANCED: 3, DIST_UNAVAILABLE: 5}
_DIST_OF_HINT = {0: DIST_MULTICAST, 1: DIST_MULTICAST, 2: DIST_CLOSEST, 3: DIST_BALANCED,
                 4: DIST_BALANCED, 5: DIST_UNAVAILABLE}


# --- links toward other routers ------------------------------------------------------------------
def data_link(conn: Any, prio: int) -> Any:
    """The outbound data link of ``prio`` on an inter-router connection (another priority
    if that one is missing), None if there is none."""
    if conn is None:
        return None
    links = conn.data_links
    link = links[prio]
    if link is not None and not link.closed:
        return link
    for link in links:
        if link is not None and not link.closed:
            return link
    return None


def next_hop_links(core: Any, router_ids: Any, exclude: Any, prio: int, payload: Any) -> list:
    """The data link of every distinct next hop toward ``router_ids``, except next hops in
    the trace (a streaming link instead for a message still arriving: streamlinks.py)."""
    links = []
    done = set()
    for router_id in router_ids:
        router = core.routers.get(router_id)
        if router is None or router.conn is None:
            continue
        if (exclude and router.next_hop in exclude) or router.conn.conn_id in done:
            continue
        done.add(router.conn.conn_id)
        out = data_link(router.conn, prio)
        if out is not None:
            links.append(stream_link(core, out, payload))
    return links


def pick_remote(core: Any, addr: Address, closest: bool, origin: Any, exclude: Any,
                prio: int) -> Any:
    """(data link, router id) toward the best other router with a destination for
    ``addr``: least cost for closest; for balanced least cost plus what is outstanding on
    the link, among routers for which the delivery's ingress router is a valid origin."""
    best = None
    best_id = None
    best_score = 0
    for router_id in addr.remotes:
        router = core.routers.get(router_id)
        if router is None or (exclude and router.next_hop in exclude):
            continue
        if (not closest and origin is not None and origin != core.router_id
                and origin not in router.valid_origins):
            continue
        out = data_link(router.conn, prio)
        if out is None:
            continue
        score = router.cost
        if not closest:
            score += len(out.unsettled) + len(out.queue)
        if best is None or score < best_score or (score == best_score and router_id < best_id):
            best, best_id, best_score = out, router_id, score
    return None if best is None else (best, best_id)


def send_anycast_remote(core: Any, link: Link, dlv_id: Any, settled: bool, payload: Any,
                        addr: Any, out: Link, to_override: Any, phase: int) -> None:
    """One delivery to another router on ``out`` (or on a streaming link of its connection:
    streamlinks.py), queued there without credit."""
    send_or_queue(core, link, dlv_id, settled, payload, addr, stream_link(core, out, payload),
                  to_override, phase)


def route_topo(core: Any, link: Link, dlv_id: Any, settled: bool, priority: int, payload: Any,
               key: str, exclude: Any) -> None:
    """``_topo/0/<router>/...`` (key ``R<router>``): toward that router; ``_topo/0/all/...``
    (``T...``): one copy to every next hop."""
    prio = 9 if priority > 9 else (0 if priority < 0 else priority)
    # a sender targeted at the address: the next router reads it from x-opt-qd.to
    to_override = None if link.router else link.address
    if key[:1] == CLASS_ROUTER:
        router = core.routers.get(key[1:])
        if router is None or (exclude and router.next_hop in exclude):
            unroutable(core, link, dlv_id, settled)
            return
        out = data_link(router.conn, prio)
        if out is None:
            unroutable(core, link, dlv_id, settled)
            return
        send_anycast_remote(core, link, dlv_id, settled, payload, None, out, to_override, -1)
        return
    targets = next_hop_links(core, core.routers, exclude, prio, payload)
    if not targets:
        unroutable(core, link, dlv_id, settled)
        return
    dlv = _in_delivery(dlv_id, link, settled, payload, None, True, core.now)
    dlv.to_override = to_override
    forward_multicast(core, targets, dlv)


# --- the routing protocol's messages -------------------------------------------------------------
def control_in(core: Any, link: Link, dlv_id: Any, settled: bool, key: str, exclude: Any,
               payload: Any) -> None:
    """A routing-protocol message: to the agent if it is for this router, onward (flooded
    or toward its router) if it is for others. Always consumed here."""
    if not settled:  # routing messages are pre-settled; accept one that is not
        link.in_unsettled -= 1
        count_outcome(core, link, STATE_ACCEPTED, True)
        if not link.closed:
            core._emit(link.peer, _effect(UpdateIn, (dlv_id, STATE_ACCEPTED, True, None)))
    if (key in CONTROL_LOCAL or key in CONTROL_FLOOD) and core.agent_peer is not None:
        core._emit(core.agent_peer, ControlIn(link.conn.conn_id, payload))
        count_control(core, key, 0)
    cls = key[:1]
    if cls == CLASS_TOPOLOGICAL:
        flood_control(core, payload, exclude)
    elif cls == CLASS_ROUTER:
        control_toward(core, key[1:], payload, exclude)
    core._replenish(link)


def control_toward(core: Any, router_id: str, payload: Any, exclude: Any) -> None:
    """A routing message for one router: straight to it if it is a neighbour (even while
    the routes still say otherwise, e.g. an LSR answering a neighbour's RA right after a
    topology change), else along the next hop."""
    conn = core.neighbour_conns.get(router_id)
    if conn is None:
        router = core.routers.get(router_id)
        if router is None or router.next_hop in exclude:
            return
        conn = router.conn
    if conn is not None:
        send_control(core, conn.control_out, payload)


def count_control(core: Any, key: str, which: int) -> None:
    """One routing-protocol message to (0) or from (1) the agent on ``key``."""
    counts = core.control_counts.get(key)
    if counts is None:
        counts = core.control_counts[key] = [0, 0]
    counts[which] += 1


def on_control_send(core: Any, peer: Any, cmd: Any) -> None:
    conn_id, to, payload = cmd
    if to is not None:
        count_control(core, key_of(core, to), 1)
    if conn_id >= 0:
        conn = core.conns.get(conn_id)
        if conn is not None:
            send_control(core, conn.control_out, payload)
        return
    key = key_of(core, to)
    cls = key[:1]
    if cls == CLASS_TOPOLOGICAL:
        flood_control(core, payload, ())
    elif cls == CLASS_ROUTER:
        control_toward(core, key[1:], payload, ())


def flood_control(core: Any, payload: Any, exclude: Any) -> None:
    """One copy on the control link of every distinct next hop, except routers in the
    trace."""
    done = set()
    for router in core.routers.values():
        conn = router.conn
        if conn is None or router.next_hop in exclude or conn.conn_id in done:
            continue
        done.add(conn.conn_id)
        send_control(core, conn.control_out, payload)


def send_control(core: Any, link: Any, payload: Any) -> None:
    if link is None or link.closed:
        return
    if not link.queue and link.limit > link.delivered:
        send_router(core, link, None, True, payload, None, -1)
    elif len(link.queue) < _CONTROL_BACKLOG:
        link.queue.append(_own(payload))


# --- the routing table ---------------------------------------------------------------------------
def on_route_update(core: Any, peer: Any, cmd: Any) -> None:
    next_hop, cost, valid_origins, neighbours = cmd
    routers = {}
    for router_id, hop in next_hop.items():
        if router_id == core.router_id:
            continue
        conn = core.conns.get(neighbours.get(hop, -1))
        routers[router_id] = RemoteRouter(router_id, hop, conn, int(cost.get(router_id, 1)),
                                          frozenset(valid_origins.get(router_id, ())))
    core.routers = routers
    # A neighbour the routing protocol lost (no HELLO for helloMaxAge) while its connection
    # stays up, e.g. a frozen router: what waits on its data links would wait (and hold its
    # senders' credit) until the connection times out. Release it; new traffic takes the
    # new routes.
    reachable_conns = set(neighbours.values())
    for conn in core.conns.values():
        if conn.router_up and conn.conn_id not in reachable_conns:
            for link in conn.data_links + conn.stream_links:
                if link is not None and link.queue:
                    release_queue(core, link)
    for addr in list(core.addrs.values()):
        if (addr.waiting or addr.fallback_for is not None) and reachable(core, addr):
            credit_waiting(core, addr)
    if core.edge is not None:  # edges' senders: their addresses may be reachable or not now
        core.edge.routes_changed(core)


def on_remote_address(core: Any, peer: Any, cmd: Any) -> None:
    key, router, present, hint = cmd
    if is_route_key(key):  # a link-route destination (Cqueue...): linkroute.py
        remote_route(core, key, router, present)
        return
    addr = core.addrs.get(key)
    if present:
        if addr is None:
            addr = address_of(core, key)
            text = mobile_text(key)
            if (hint in _DIST_OF_HINT and text is not None
                    and (not len(core.rules) or core.rules.lookup(text) is None)):
                set_treatment(addr, _DIST_OF_HINT[hint], addr.priority)
        addr.remotes[router] = hint
        if (addr.waiting or addr.fallback_for is not None) and router in core.routers:
            credit_waiting(core, addr)
        if core.edge is not None:
            core.edge.address_changed(core, addr)
    elif addr is not None and router in addr.remotes:
        del addr.remotes[router]
        if core.edge is not None:
            core.edge.address_changed(core, addr)
        if addr.refs <= 0 and addr.held == 0 and not addr.remotes:
            del core.addrs[key]
            core._record_gone("address", addr)
            if addr.fallback is not None:
                drop_fallback(core, addr)


def reachable(core: Any, addr: Address) -> bool:
    for router_id in addr.remotes:
        if router_id in core.routers:
            return True
    return False


def credit_waiting(core: Any, addr: Address) -> None:
    """``addr`` got a destination: its targeted senders get their window (a stalled one
    its window back: transfer.unstall). A fallback destination's are its primary address's
    senders (but the primary's own fallback auto-links, which wait for a real destination of
    the primary)."""
    waiting = addr.waiting
    addr.waiting = []
    for sender in waiting:
        give_window(core, sender)
    primary = addr.fallback_for
    if primary is not None and primary.waiting:
        keep = []
        for sender in primary.waiting:
            if sender.fallback:
                keep.append(sender)
            else:
                give_window(core, sender)
        primary.waiting = keep


def give_window(core: Any, sender: Link) -> None:
    if sender.stall == STALL_ON:
        unstall(core, sender)
    else:
        sender.credited = True
        core._credit(sender, sender.capacity)


def announce(core: Any, addr: Address, present: bool) -> None:
    """Tell the agent a mobile address gained its first / lost its last local destination
    (it advertises them to the other routers in MAUs)."""
    addr.announced = present
    if core.agent_peer is not None:
        core._emit(core.agent_peer, LocalAddress(addr.key, present,
                                                 _HINT_OF_DIST.get(addr.dist, 3)))
