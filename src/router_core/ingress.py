"""Ingress: where a delivery enters the core (Transfer from a client link, RouterTransfer from
another router).

Owns: checking the inbound link, the ingress counters, resolving the delivery's address (the
link's target, else its ``to``; from another router ``x-opt-qd.to`` with its phase), its origin
and trace, and handing it to the forwarders (or, for the routing protocol's own addresses, to
relay.control_in).

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from router_core.addressing import CLASS_MOBILE
from common.ipc import DIR_IN, STATE_RELEASED, RouterTransfer, Transfer, UpdateIn
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import key_of, phase_key, phased, trace_ids, unavailable
from router_core.forwarders import route
from router_core.corestate import DIST_MULTICAST
from router_core.records import (
    LINK_CONTROL, MODE_EDGE, ROLE_EDGE, ROLE_INTERNAL, _effect, _fields)
from router_core.relay import CONTROL_FLOOD, CONTROL_LOCAL, control_in, reachable
from router_core.streaming import Stream
from router_core.transfer import reject_unavailable, unroutable
# --- end core parts ---


def on_transfer(core: Any, peer: Any, cmd: Any) -> None:
    dlv_id, link_id, to, settled, priority, payload = _fields(cmd)
    link = core.links.get(link_id)
    if link is None or link.direction != DIR_IN:
        if not settled:
            core._emit(peer, _effect(UpdateIn, (dlv_id, STATE_RELEASED, True, None)))
        return
    if link.router:  # a worker that reports router links as plain transfers
        on_router_transfer(core, peer, RouterTransfer(dlv_id, link_id, to, settled, priority,
                                                      0, None, [], payload))
        return
    link.received += 1
    link.delivery_count += 1
    link.conn.last_delivery_at = core.now
    # 1.19's agent is in the router: what it sends enters through no link, so it is neither
    # ingress nor pre-settled in the router's counters (the link's own counters still count)
    own = link.conn.role == ROLE_INTERNAL
    if not own:
        core.ingress += 1
    if link.from_container:
        core.ingress_container += 1
    addr = link.addr
    key = None
    uplink = None  # an edge's anonymous multicast: the uplink's sender gets a copy too
    if addr is None:
        if link.endpoint is not None:  # a core endpoint's (edge.py): it takes the message
            if settled:
                link.presettled_count += 1
                core.presettled += 1
            else:
                link.in_unsettled += 1
            link.endpoint.transfer(core, link, dlv_id, settled, payload)
            return
        if to is None:  # a sender targeted at a topological address (see linkends.bind_endpoint)
            to = link.address
        if to is not None:
            key = phase_key(core.rules, key_of(core, to), DIR_IN)
            addr = core.addrs.get(key)
            if core.mode == MODE_EDGE and link.conn.role != ROLE_EDGE:
                if addr is None or (not addr.consumers and addr.dist != DIST_MULTICAST):
                    # 1.19's edge router: an anonymous delivery for an address with no
                    # destination here goes up the uplink (the interior knows the network)
                    addr = core.edge.edge_addr
                elif addr.dist == DIST_MULTICAST:
                    uplink = core.edge.edge_addr  # (1.19: and a multicast one goes up too)
    if settled:
        link.presettled_count += 1
        if not own:
            core.presettled += 1
    else:
        link.in_unsettled += 1
    if addr is not None:
        if link.conn.role == ROLE_INTERNAL:  # the agent's (1.19: from an in-process sender)
            addr.from_proc += 1
        elif not link.fallback:  # (1.19: what comes back from a fallback store is not ingress)
            addr.ingress += 1
        if link.from_container:
            addr.from_container += 1
        if addr.fallback is not None and not link.fallback and not has_destination(core, addr):
            to_fallback(core, link, dlv_id, settled, priority, payload, addr, None, None)
        elif link.conn.role == ROLE_EDGE:
            forward_no_echo(core, link, dlv_id, settled, priority, payload, addr)
        elif uplink is not None and uplink.consumers and uplink is not addr:
            forward_with_uplink(core, link, dlv_id, settled, priority, payload, addr,
                                uplink.consumers[0])
        else:
            addr.fwd.forward(core, link, dlv_id, settled, priority, payload, addr, None, None)
    elif key is not None and unavailable(core, key):
        reject_unavailable(core, link, dlv_id, settled)
    else:
        route(core, link, dlv_id, settled, priority, payload, None, key, None, None)


def on_router_transfer(core: Any, peer: Any, cmd: Any) -> None:
    dlv_id, link_id, to, settled, priority, phase, ingress, trace, payload = _fields(cmd)
    link = core.links.get(link_id)
    if link is None or link.direction != DIR_IN:
        if not settled:
            core._emit(peer, _effect(UpdateIn, (dlv_id, STATE_RELEASED, True, None)))
        return
    link.received += 1
    link.delivery_count += 1
    link.conn.last_delivery_at = core.now
    if settled:  # (1.19: the router's pre-settled counter is for endpoint links only)
        link.presettled_count += 1
    else:
        link.in_unsettled += 1
    if to is None:
        unroutable(core, link, dlv_id, settled)
        return
    key = key_of(core, to)
    exclude = trace_ids(trace)
    if link.link_type == LINK_CONTROL or key in CONTROL_LOCAL or key in CONTROL_FLOOD:
        control_in(core, link, dlv_id, settled, key, exclude, payload)
        return
    if phase and key[:1] == CLASS_MOBILE:
        key = phased(key, phase)
    if ingress is not None and ingress[:2] == "0/":
        origin = ingress[2:]
    else:
        origin = link.conn.container
    addr = core.addrs.get(key)
    if addr is not None and addr.fallback is not None and not has_destination(core, addr):
        to_fallback(core, link, dlv_id, settled, priority, payload, addr, origin, exclude)
        return
    route(core, link, dlv_id, settled, priority, payload, addr, key, origin, exclude)


def forward_no_echo(core: Any, link: Any, dlv_id: Any, settled: bool, priority: int,
                    payload: Any, addr: Any) -> None:
    """A delivery that came over an edge connection never goes back on it (1.19's edge
    echo check): the address's forwarder sees its consumers without that connection's."""
    conn = link.conn
    consumers = addr.consumers
    for consumer in consumers:
        if consumer.conn is conn:
            break
    else:
        addr.fwd.forward(core, link, dlv_id, settled, priority, payload, addr, None, None)
        return
    addr.consumers = [c for c in consumers if c.conn is not conn]
    try:
        addr.fwd.forward(core, link, dlv_id, settled, priority, payload, addr, None, None)
    finally:  # (forwarding attaches nothing: the list is as it was)
        addr.consumers = consumers


def forward_with_uplink(core: Any, link: Any, dlv_id: Any, settled: bool, priority: int,
                        payload: Any, addr: Any, up: Any) -> None:
    """An anonymous delivery on an edge for a multicast address: its consumers here and the
    uplink's anonymous sender ``up`` (the interior's receivers), as 1.19 sends it; unless a
    proxy of the address on the uplink is a consumer already (it carries the copy)."""
    consumers = addr.consumers
    for consumer in consumers:
        if consumer.conn is up.conn:
            addr.fwd.forward(core, link, dlv_id, settled, priority, payload, addr, None, None)
            return
    addr.consumers = consumers + [up]
    try:
        addr.fwd.forward(core, link, dlv_id, settled, priority, payload, addr, None, None)
    finally:  # (forwarding attaches nothing: the list is as it was)
        addr.consumers = consumers


def has_destination(core: Any, addr: Any) -> bool:
    """Whether ``addr`` has somewhere to send to: a local consumer, or another router with a
    destination that this router reaches."""
    return bool(addr.consumers) or bool(addr.remotes and core.routers and reachable(core, addr))


def to_fallback(core: Any, link: Any, dlv_id: Any, settled: bool, priority: int, payload: Any,
                addr: Any, origin: Any, exclude: Any) -> None:
    """A delivery for an address with a fallback destination and no destination of its own
    (1.19: no path): it goes to the fallback (``MF<address>``; toward another router with
    ``x-opt-qd.phase`` F) and counts as redirected; with no fallback destination either, the
    address's forwarder treats it as it would any (released or dropped)."""
    alt = addr.fallback
    if has_destination(core, alt):
        addr.redirected += 1
        core.redirected += 1
        alt.fwd.forward(core, link, dlv_id, settled, priority, payload, alt, origin, exclude)
    else:
        addr.fwd.forward(core, link, dlv_id, settled, priority, payload, addr, origin, exclude)


def on_stream_transfer(core: Any, peer: Any, cmd: Any) -> None:
    """The start of a message still arriving (streaming.py): routed as a Transfer or
    RouterTransfer whose payload is its Stream; its chunks follow (TransferChunk)."""
    dlv_id, link_id, to, settled, priority, router, phase, ingress, trace, payload = \
        _fields(cmd)
    link = core.links.get(link_id)
    if link is None or link.direction != DIR_IN:
        if not settled:
            core._emit(peer, _effect(UpdateIn, (dlv_id, STATE_RELEASED, True, None)))
        return
    stream = Stream(dlv_id, link, peer, payload)
    core.streams[dlv_id] = stream
    if link.router:
        key = key_of(core, to) if to is not None else None
        if link.link_type == LINK_CONTROL or key in CONTROL_LOCAL or key in CONTROL_FLOOD:
            # routing-protocol messages are never streamed: this one goes nowhere
            link.received += 1
            link.delivery_count += 1
            if not settled:
                link.in_unsettled += 1
            unroutable(core, link, dlv_id, settled)
            return
        on_router_transfer(core, peer, _effect(RouterTransfer, (
            dlv_id, link_id, to, settled, priority, phase, ingress, trace, stream)))
    else:
        on_transfer(core, peer, _effect(Transfer, (dlv_id, link_id, to, settled, priority,
                                                   stream)))
