"""Forwarders: one object per treatment, deciding where a delivery for an address goes.

Owns: the forwarding decision for every delivery that reached an address, as Qpid Dispatch's
forwarder.c splits it: :class:`ClosestForwarder` (round-robin among local consumers with credit;
else the least-cost router with a destination), :class:`BalancedForwarder` (fewest outstanding
relative to capacity; local consumers and routers compete, a router only for deliveries from
its valid origins), :class:`MulticastForwarder` (every local consumer plus one copy per distinct
next hop) and :class:`UnavailableForwarder` (nothing: released or dropped). An address gets its
forwarder once, with its distribution (``records.set_treatment``: when it is created, when the
address rules change, when another router's advertisement gives it a treatment), so the
distribution is never re-tested per delivery. :func:`route` is the one entry: an address's
forwarder, or a topological address (``R``/``T`` keys, relay.py) without one.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py, where the forwarders are cdef classes with a cdef ``forward``). Must not import
zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any, Optional

from router_core.addressing import CLASS_ROUTER, CLASS_TOPOLOGICAL, mobile_text
from router_core.corestate import DIST_BALANCED, DIST_CLOSEST, DIST_MULTICAST, DIST_UNAVAILABLE
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.records import FORWARDERS, KEY_MOBILE, Address, Link, _in_delivery
from router_core.relay import (
    next_hop_links, pick_remote, route_topo, send_anycast_remote)
from router_core.streamlinks import stream_targets
from router_core.transfer import forward_multicast, hold, send_local, unroutable
# --- end core parts ---


def route(core: Any, link: Link, dlv_id: Any, settled: bool, priority: int, payload: Any,
          addr: Optional[Address], key: Any, origin: Any, exclude: Any) -> None:
    """Forward one inbound delivery (counted already) to its consumers: local links, and in
    a network other routers. ``origin``: the ingress router id of a delivery that came from
    another router (None: this one); ``exclude``: router ids in its trace."""
    if addr is not None:
        addr.fwd.forward(core, link, dlv_id, settled, priority, payload, addr, origin, exclude)
    elif (core.routers and key is not None
          and (key[:1] == CLASS_ROUTER or key[:1] == CLASS_TOPOLOGICAL)):
        route_topo(core, link, dlv_id, settled, priority, payload, key, exclude)
    else:
        unroutable(core, link, dlv_id, settled)


class Forwarder:
    """A treatment. ``forward`` places one delivery (counted already) for ``addr``; ``pick``
    chooses the local consumer of an anycast delivery (None: none has credit)."""

    __slots__ = ()

    def forward(self, core: Any, link: Link, dlv_id: Any, settled: bool, priority: int,
                payload: Any, addr: Address, origin: Any, exclude: Any) -> None:
        unroutable(core, link, dlv_id, settled)

    def pick(self, addr: Address) -> Optional[Link]:
        return None


class ClosestForwarder(Forwarder):
    """Local consumers first (round-robin among those with credit, held if none has credit);
    with no local consumer, the least-cost router with a destination."""

    __slots__ = ()

    def forward(self, core: Any, link: Link, dlv_id: Any, settled: bool, priority: int,
                payload: Any, addr: Address, origin: Any, exclude: Any) -> None:
        if not addr.consumers:
            if addr.remotes and core.routers:
                _forward_anycast(core, self, True, link, dlv_id, settled, priority, payload,
                                 addr, origin, exclude)
            else:
                unroutable(core, link, dlv_id, settled)
            return
        target = self.pick(addr)
        if target is not None:
            send_local(core, link, target, dlv_id, settled, payload, addr)
        else:
            hold(core, link, dlv_id, settled, priority, payload, addr)

    def pick(self, addr: Address) -> Optional[Link]:
        consumers = addr.consumers
        n = len(consumers)
        if n == 1:
            link = consumers[0]
            return link if link.limit > link.delivered else None
        start = addr.rr % n if n else 0
        for k in range(n):
            i = (start + k) % n
            link = consumers[i]
            if link.limit > link.delivered:
                addr.rr = i + 1
                return link
        return None


class BalancedForwarder(Forwarder):
    """The consumer with the fewest outstanding deliveries relative to its capacity; routers
    with a destination compete with local consumers (outstanding + path cost)."""

    __slots__ = ()

    def forward(self, core: Any, link: Link, dlv_id: Any, settled: bool, priority: int,
                payload: Any, addr: Address, origin: Any, exclude: Any) -> None:
        if addr.remotes and core.routers:
            _forward_anycast(core, self, False, link, dlv_id, settled, priority, payload, addr,
                             origin, exclude)
            return
        if not addr.consumers:
            unroutable(core, link, dlv_id, settled)
            return
        target = self.pick(addr)
        if target is not None:
            send_local(core, link, target, dlv_id, settled, payload, addr)
        else:
            hold(core, link, dlv_id, settled, priority, payload, addr)

    def pick(self, addr: Address) -> Optional[Link]:
        consumers = addr.consumers
        n = len(consumers)
        if n == 1:
            link = consumers[0]
            return link if link.limit > link.delivered else None
        start = addr.rr % n if n else 0
        best = None
        best_i = 0
        best_out = 0
        best_cap = 1
        for k in range(n):
            i = (start + k) % n
            link = consumers[i]
            if link.limit > link.delivered:
                out = len(link.unsettled) + len(link.queue)
                cap = link.capacity if link.capacity > 0 else 1
                if best is None or out * best_cap < best_out * cap:
                    best, best_i, best_out, best_cap = link, i, out, cap
        if best is not None:
            addr.rr = best_i + 1
        return best


class MulticastForwarder(Forwarder):
    """A copy to every local consumer (queued on a link without credit) and one per distinct
    next hop toward the routers with a destination."""

    __slots__ = ()

    def forward(self, core: Any, link: Link, dlv_id: Any, settled: bool, priority: int,
                payload: Any, addr: Address, origin: Any, exclude: Any) -> None:
        if addr.remotes and core.routers:
            to_override, phase = _remote_fields(link, addr)
            targets = list(stream_targets(core, addr.consumers, payload, addr))
            remote = next_hop_links(core, addr.remotes, exclude, _remote_priority(addr, priority),
                                    payload)
            if remote:
                addr.transit += 1  # deliveriesTransit: sent on toward other routers
                targets.extend(remote)
            if not targets:
                unroutable(core, link, dlv_id, settled)
                return
            dlv = _in_delivery(dlv_id, link, settled, payload, addr, True, core.now)
            dlv.to_override = to_override
            dlv.phase = phase
            forward_multicast(core, targets, dlv)
            return
        if not addr.consumers:
            unroutable(core, link, dlv_id, settled)
            return
        forward_multicast(core, stream_targets(core, addr.consumers, payload, addr),
                          _in_delivery(dlv_id, link, settled, payload, addr, True, core.now))


class UnavailableForwarder(Forwarder):
    """``distribution: unavailable``: nothing is forwarded (unsettled: RELEASED)."""

    __slots__ = ()


def _remote_priority(addr: Address, priority: int) -> int:
    """The data link priority toward another router: the address's, else the message's."""
    prio = addr.priority if addr.priority >= 0 else priority
    return 9 if prio > 9 else (0 if prio < 0 else prio)


def _remote_fields(link: Link, addr: Address) -> tuple:
    """(x-opt-qd.to, x-opt-qd.phase) to set on a delivery toward another router: a targeted
    sender's address (the next router cannot read it from the message) and its waypoint
    phase, an anonymous multiTenant sender's tenant address (``<vhost>/<to>``); (None, -1):
    keep what the message has. A fallback destination's deliveries always
    carry its address and phase F (22), as 1.19 sends them: the message says neither."""
    if addr.fallback_for is not None:
        return mobile_text(addr.key), addr.phase
    if link.router:
        return None, -1
    if link.addr is None:  # anonymous: the message's own 'to' (or x-opt-qd.to) is routed on,
        # except that 1.19 gives a multiTenant sender's 'to' as the tenant's address
        return (mobile_text(addr.key) if link.tenant else None), -1
    to_override = mobile_text(addr.key)
    if to_override is None:
        to_override = link.address
    phase = addr.phase if addr.cls == KEY_MOBILE and addr.phase != 0 else -1
    return to_override, phase


def _forward_anycast(core: Any, fwd: Forwarder, closest: bool, link: Link, dlv_id: Any,
                     settled: bool, priority: int, payload: Any, addr: Address, origin: Any,
                     exclude: Any) -> None:
    """An anycast delivery for an address with destinations on other routers (and maybe
    here): closest prefers a local consumer; balanced compares outstanding deliveries."""
    prio = _remote_priority(addr, priority)
    local = fwd.pick(addr) if addr.consumers else None
    remote = pick_remote(core, addr, closest, origin, exclude, prio)
    if local is not None and remote is not None and not closest:
        local_score = len(local.unsettled) + len(local.queue)
        router = core.routers[remote[1]]
        if local_score > router.cost + len(remote[0].unsettled) + len(remote[0].queue):
            local = None
    if local is not None:
        send_local(core, link, local, dlv_id, settled, payload, addr)
        return
    if remote is not None:
        addr.transit += 1
        to_override, phase = _remote_fields(link, addr)
        send_anycast_remote(core, link, dlv_id, settled, payload, addr, remote[0], to_override,
                            phase)
        return
    if addr.consumers:
        hold(core, link, dlv_id, settled, priority, payload, addr)
    else:
        unroutable(core, link, dlv_id, settled)


# One stateless instance per distribution code (records.set_treatment reads this table).
FORWARDERS[DIST_CLOSEST] = ClosestForwarder()
FORWARDERS[DIST_BALANCED] = BalancedForwarder()
FORWARDERS[DIST_MULTICAST] = MulticastForwarder()
FORWARDERS[DIST_UNAVAILABLE] = UnavailableForwarder()
