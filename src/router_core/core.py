"""The router core: message routing, credit and settlement for one router, sans-I/O.

Owns: connections, links, addresses, inbound/outbound delivery tracking and the management
counters. Takes typed commands from peers (:mod:`router_core.ipc`) and queues typed effects per peer
index; the core process loop (coreproc.py) does the I/O. This file is the pure-Python reference AND
the source of the compiled build (cython/_core.pyx includes it textually), so: no ``from
__future__`` import, no ``import cython``, plain classes with ``__slots__``, no annotations with
builtin container types on arguments (Cython would type-check them exactly).

Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.

Lifecycle rules (the settlement contract of the docs, made explicit)::

  object        event                               effect / transition
  ------------  ----------------------------------  ---------------------------------------------
  in-link       attach, targeted, address has a      LinkOpen, LinkCredit(capacity)
                consumer / anonymous
  in-link       attach, targeted, no consumer        LinkOpen; waits; LinkCredit(capacity) when
                                                     the first consumer attaches (never revoked)
  in-link       a delivery leaves the core           LinkCredit(+1) (coalesced per flush)
                (forwarded / released / dropped)
  out-link      attach                               LinkOpen; becomes a consumer of its address
  out-link      LinkFlow(limit)                      may Deliver while delivered < limit
  out-link      LinkFlow(drain), nothing to send     Drained; delivered := limit
  in-dlv        no consumer / unavailable            unsettled: UpdateIn(RELEASED, settled)
                                                     presettled: dropped (counted)
  in-dlv        consumers, none with credit          held (address queue; multicast: per link)
  out-dlv       Disposition terminal, not settled    UpdateIn(state, unsettled) (anycast)
  out-dlv       Disposition settled                  UpdateIn(state, settled); forget both
                                                     (no outcome ever given counts as ACCEPTED)
  in-dlv        SettleIn                             SettleOut to every copy; held: drop, +1 credit
  out-dlv       receiver lost, had terminal state    UpdateIn(that state, settled)
  out-dlv       receiver lost, no outcome            UpdateIn(MODIFIED failed, settled)
  in-dlv (mc)   every copy terminal or settled       UpdateIn(REJECTED>ACCEPTED>MODIFIED>RELEASED,
                                                     settled); SettleOut to unsettled copies
  in-link       lost                                 forwarded/held deliveries carry on; their
                                                     outcomes go nowhere
"""
import random
from collections import deque
from typing import Any, Optional

from router_core.addressing import address_key, mobile_text, temp_address
from router_core.addrmatch import AddressRules
from router_core.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED, ConnClosed,
    ConnOpened, Deliver, Disposition, Drained, IpcError, LinkAttach, LinkCredit, LinkDetach,
    LinkFlow, LinkOpen, LinkRefuse, PeerHello, SettleIn, SettleOut, Transfer, UpdateIn)
from router_core.corestate import (
    DIST_CLOSEST, DIST_CODES, DIST_MULTICAST, DIST_UNAVAILABLE, MCAST_RANK, Address, Connection,
    InDelivery, Link, OutDelivery, management_snapshot)

_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_KEY_CACHE_MAX = 8192
_MODIFIED_FAILED = {"failed": True, "undeliverable": False}
_NO_INTERIOR = ("inter-router", "edge")


class RouterCore:
    """One router's routing and settlement state. Feed commands with :meth:`handle`, collect
    effects with :meth:`take_effects`."""

    def __init__(self, router_id: str, *, default_distribution: str = "balanced",
                 addresses: Optional[list] = None, area: str = "0",
                 seed: Optional[int] = None) -> None:
        if default_distribution not in DIST_CODES:
            raise ValueError(f"unknown distribution {default_distribution!r}")
        self.router_id = router_id
        self.area = area
        self.default_distribution = DIST_CODES[default_distribution]
        self.rules = AddressRules(addresses)
        self.peers = {}          # peer index -> kind
        self.conns = {}          # conn_id -> Connection
        self.links = {}          # link_id -> Link
        self.addrs = {}          # key -> Address
        self.in_unsettled = {}   # inbound dlv_id -> InDelivery (unsettled, not yet final)
        self.out_unsettled = {}  # outbound dlv_id -> OutDelivery
        self.counters = {"presettledDeliveries": 0, "droppedPresettledDeliveries": 0,
                         "acceptedDeliveries": 0, "rejectedDeliveries": 0,
                         "releasedDeliveries": 0, "modifiedDeliveries": 0,
                         "deliveriesIngress": 0, "deliveriesEgress": 0, "deliveriesTransit": 0,
                         "deliveriesIngressRouteContainer": 0,
                         "deliveriesEgressRouteContainer": 0}
        self._next_out = 1
        self._key_cache = {}
        self._rng = random.Random(seed)
        self._effects = {}       # peer -> [effect]
        self._credit_acc = {}    # link_id -> [peer, position, credit] (coalesced LinkCredit)
        self._dispatch = {Transfer: self._on_transfer, Disposition: self._on_disposition,
                          LinkFlow: self._on_flow, SettleIn: self._on_settle_in,
                          LinkAttach: self._on_attach, LinkDetach: self._on_detach,
                          ConnOpened: self._on_conn_opened, ConnClosed: self._on_conn_closed,
                          PeerHello: self._on_hello}

    # ------------------------------------------------------------------------------------------
    # Public API
    # ------------------------------------------------------------------------------------------
    def handle(self, peer: int, cmd: Any, now: float) -> None:
        handler = self._dispatch.get(type(cmd))
        if handler is None:
            raise IpcError(f"the core does not handle {type(cmd).__name__}")
        handler(peer, cmd)

    def handle_batch(self, peer: int, cmds: Any, now: float) -> None:
        dispatch = self._dispatch
        for cmd in cmds:
            handler = dispatch.get(type(cmd))
            if handler is None:
                raise IpcError(f"the core does not handle {type(cmd).__name__}")
            handler(peer, cmd)

    def tick(self, now: float) -> None:
        """No timers yet (single router); kept so the loop's shape does not change later."""

    def take_effects(self) -> dict:
        effects = self._effects
        for link_id, acc in self._credit_acc.items():
            effects[acc[0]][acc[1]] = LinkCredit(link_id, acc[2])
        self._credit_acc = {}
        self._effects = {}
        return effects

    def peer_lost(self, peer: int) -> None:
        """A peer went away: every connection it owned is closed."""
        for conn_id in [c.conn_id for c in self.conns.values() if c.peer == peer]:
            self._on_conn_closed(peer, ConnClosed(conn_id, "peer lost"))
        self.peers.pop(peer, None)

    def snapshot(self) -> dict:
        return management_snapshot(self)

    # ------------------------------------------------------------------------------------------
    # Effects
    # ------------------------------------------------------------------------------------------
    def _emit(self, peer: int, effect: Any) -> None:
        lst = self._effects.get(peer)
        if lst is None:
            lst = self._effects[peer] = []
        lst.append(effect)

    def _credit(self, link: Link, credit: int) -> None:
        link.granted += credit
        acc = self._credit_acc.get(link.link_id)
        if acc is None:
            lst = self._effects.get(link.peer)
            if lst is None:
                lst = self._effects[link.peer] = []
            self._credit_acc[link.link_id] = [link.peer, len(lst), credit]
            lst.append(None)  # placeholder, filled in by take_effects
        else:
            acc[2] += credit

    def _replenish(self, link: Link) -> None:
        if link.credited and not link.closed:
            self._credit(link, 1)

    # ------------------------------------------------------------------------------------------
    # Addresses
    # ------------------------------------------------------------------------------------------
    def _key(self, address: str) -> str:
        key = self._key_cache.get(address)
        if key is None:
            if len(self._key_cache) >= _KEY_CACHE_MAX:
                self._key_cache.clear()
            key = address_key(address, self.router_id, 0, self.area)
            self._key_cache[address] = key
        return key

    def _address(self, key: str) -> Address:
        addr = self.addrs.get(key)
        if addr is None:
            dist = self.default_distribution
            priority = -1
            text = mobile_text(key)
            if text is not None:
                rule = self.rules.lookup(text)
                if rule is not None:
                    dist = DIST_CODES.get(rule.distribution, dist)
                    priority = rule.priority
            elif key[0] == "T":
                dist = DIST_MULTICAST
            else:
                dist = DIST_CLOSEST
            addr = Address(key, dist, priority)
            self.addrs[key] = addr
        return addr

    def _unref(self, addr: Address) -> None:
        addr.refs -= 1
        if addr.refs <= 0 and addr.held == 0 and self.addrs.get(addr.key) is addr:
            del self.addrs[addr.key]

    def _new_temp(self, target: bool) -> tuple:
        rng = self._rng
        while True:
            rand = "".join([_TEMP_ALPHABET[rng.getrandbits(6) % 62] for _ in range(16)])
            address = temp_address(self.router_id, rand, target)
            key = self._key(address)
            if key not in self.addrs:
                return address, key

    # ------------------------------------------------------------------------------------------
    # Connections and links
    # ------------------------------------------------------------------------------------------
    def _on_hello(self, peer: int, cmd: Any) -> None:
        self.peers[peer] = cmd[1]

    def _on_conn_opened(self, peer: int, cmd: Any) -> None:
        old = self.conns.get(cmd[0])
        if old is not None:
            self._on_conn_closed(peer, ConnClosed(cmd[0], "reopened"))
        self.conns[cmd[0]] = Connection(peer, *cmd)

    def _on_conn_closed(self, peer: int, cmd: Any) -> None:
        conn = self.conns.pop(cmd[0], None)
        if conn is None:
            return
        links = list(conn.links.values())
        for link in links:  # first, so no effect goes to a link of this connection
            link.closed = True
        for link in links:
            self._drop_link(link)

    def _on_attach(self, peer: int, cmd: Any) -> None:
        link_id, conn_id, direction, name, address, dynamic, presettled, capacity = cmd
        conn = self.conns.get(conn_id)
        if conn is None:
            self._emit(peer, LinkRefuse(link_id, "amqp:not-found", "unknown connection"))
            return
        if conn.role in _NO_INTERIOR:
            self._emit(conn.peer, LinkRefuse(
                link_id, "amqp:not-allowed",
                f"links on {conn.role} connections are not supported by this router"))
            return
        if link_id in self.links:
            self._emit(conn.peer, LinkRefuse(link_id, "amqp:internal-error", "duplicate link id"))
            return
        if direction == DIR_OUT and address is None and not dynamic:
            self._emit(conn.peer, LinkRefuse(link_id, "qd:no-route-to-dest",
                                             "No route to the destination node"))
            return
        link = Link(link_id, conn, direction, name, address, bool(presettled), capacity)
        if dynamic:
            address, key = self._new_temp(direction == DIR_IN)
            link.address = address
        elif address is not None:
            key = self._key(address)
        else:
            key = None
        self.links[link_id] = link
        conn.links[link_id] = link
        self._emit(conn.peer, LinkOpen(link_id, address))
        if key is None:  # anonymous sender
            link.credited = True
            self._credit(link, capacity)
            return
        addr = self._address(key)
        link.addr = addr
        addr.refs += 1
        if direction == DIR_OUT:
            addr.consumers.append(link)
            if link.to_container:
                addr.container_count += 1
            if addr.waiting:
                waiting = addr.waiting
                addr.waiting = []
                for sender in waiting:
                    sender.credited = True
                    self._credit(sender, sender.capacity)
        elif addr.consumers:
            link.credited = True
            self._credit(link, capacity)
        else:
            addr.waiting.append(link)

    def _on_detach(self, peer: int, cmd: Any) -> None:
        link = self.links.get(cmd[0])
        if link is None:
            return
        link.closed = True
        self._drop_link(link)

    def _drop_link(self, link: Link) -> None:
        self.links.pop(link.link_id, None)
        link.conn.links.pop(link.link_id, None)
        addr = link.addr
        if link.direction == DIR_IN:
            if addr is not None:
                if link in addr.waiting:
                    addr.waiting.remove(link)
                self._unref(addr)
            return
        addr.consumers.remove(link)
        if link.to_container:
            addr.container_count -= 1
        # Copies queued for this receiver (multicast) were never sent: released.
        queue = link.queue
        link.queue = deque()
        for dlv in queue:
            self._copy_unqueued(dlv)
            if not dlv.settled:
                self._copy_done(dlv, STATE_RELEASED, None)
        # Sent and unsettled: the receiver's outcome if it gave one, else in doubt (MODIFIED).
        for out in list(link.unsettled.values()):
            if out.out_id not in self.out_unsettled:
                continue
            self._forget_out(out)
            dlv = out.in_dlv
            if out.state:
                state, info = out.state, out.info
            else:
                state, info = STATE_MODIFIED, dict(_MODIFIED_FAILED)  # effects are not shared
            if dlv.multicast:
                if not out.done:
                    out.done = True
                    self._copy_done(dlv, state, info)
            else:
                self._settle_in(dlv, state, info)
        if not addr.consumers and addr.held:
            self._release_held(addr)
        self._unref(addr)

    # ------------------------------------------------------------------------------------------
    # Deliveries
    # ------------------------------------------------------------------------------------------
    def _on_transfer(self, peer: int, cmd: Any) -> None:
        dlv_id, link_id, to, settled, priority, payload = cmd
        link = self.links.get(link_id)
        if link is None or link.direction != DIR_IN:
            if not settled:
                self._emit(peer, UpdateIn(dlv_id, STATE_RELEASED, True, None))
            return
        link.received += 1
        link.delivery_count += 1
        counters = self.counters
        counters["deliveriesIngress"] += 1
        if link.from_container:
            counters["deliveriesIngressRouteContainer"] += 1
        addr = link.addr
        if addr is None and to is not None:
            addr = self.addrs.get(self._key(to))
        if settled:
            link.presettled_count += 1
            counters["presettledDeliveries"] += 1
        else:
            link.in_unsettled += 1
        if addr is not None:
            addr.ingress += 1
            if link.from_container:
                addr.from_container += 1
        if addr is None or not addr.consumers or addr.dist == DIST_UNAVAILABLE:
            if settled:
                link.dropped_presettled_count += 1
                counters["droppedPresettledDeliveries"] += 1
            else:
                link.in_unsettled -= 1
                self._count_outcome(link, STATE_RELEASED, True)
                if not link.closed:
                    self._emit(link.peer, UpdateIn(dlv_id, STATE_RELEASED, True, None))
            self._replenish(link)
            return
        if addr.dist == DIST_MULTICAST:
            self._forward_multicast(addr, InDelivery(dlv_id, link, settled, payload, addr, True))
            return
        target = self._pick(addr)
        if target is not None:
            if settled:
                self._send(target, None, True, payload)
            else:
                dlv = InDelivery(dlv_id, link, False, None, addr, False)
                self.in_unsettled[dlv_id] = dlv
                dlv.out = self._send(target, dlv, False, payload)
            self._replenish(link)
            return
        dlv = InDelivery(dlv_id, link, settled, payload, addr, False)
        if not settled:
            self.in_unsettled[dlv_id] = dlv
        if addr.priority >= 0:
            priority = addr.priority
        dlv.priority = 9 if priority > 9 else (0 if priority < 0 else priority)
        addr.queues[dlv.priority].append(dlv)
        addr.held += 1
        dlv.pending = 1
        link.held += 1

    def _pick(self, addr: Address) -> Optional[Link]:
        """The consumer link for one anycast delivery, or None if no consumer has credit."""
        consumers = addr.consumers
        n = len(consumers)
        if n == 1:
            link = consumers[0]
            return link if link.limit > link.delivered else None
        start = addr.rr % n if n else 0
        if addr.dist == DIST_CLOSEST:
            for k in range(n):
                i = (start + k) % n
                link = consumers[i]
                if link.limit > link.delivered:
                    addr.rr = i + 1
                    return link
            return None
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

    def _send(self, link: Link, dlv: Optional[InDelivery], settled: bool,
              payload: Any) -> Optional[OutDelivery]:
        out_id = self._next_out
        self._next_out = out_id + 1
        link.delivered += 1
        link.delivery_count += 1
        addr = link.addr
        addr.egress += 1
        counters = self.counters
        counters["deliveriesEgress"] += 1
        if link.to_container:
            addr.to_container += 1
            counters["deliveriesEgressRouteContainer"] += 1
        self._emit(link.peer, Deliver(out_id, link.link_id, settled, payload))
        if settled:
            link.presettled_count += 1
            return None
        out = OutDelivery(out_id, link, dlv)
        self.out_unsettled[out_id] = out
        link.unsettled[out_id] = out
        return out

    def _forward_multicast(self, addr: Address, dlv: InDelivery) -> None:
        settled = dlv.settled
        payload = dlv.payload
        if not settled:
            self.in_unsettled[dlv.dlv_id] = dlv
            dlv.open = len(addr.consumers)
            dlv.copies = []
        for link in addr.consumers:
            if link.queue or link.limit <= link.delivered:
                link.queue.append(dlv)
                dlv.pending += 1
            elif settled:
                self._send(link, None, True, payload)
            else:
                dlv.copies.append(self._send(link, dlv, False, payload))
        if dlv.pending:
            dlv.link.held += 1
        else:
            dlv.payload = None
            self._replenish(dlv.link)

    def _copy_unqueued(self, dlv: InDelivery) -> None:
        """One queued multicast copy left its queue (sent or dropped)."""
        dlv.pending -= 1
        if dlv.pending == 0:
            dlv.payload = None
            dlv.link.held -= 1
            self._replenish(dlv.link)

    def _on_flow(self, peer: int, cmd: Any) -> None:
        link_id, limit, drain = cmd
        link = self.links.get(link_id)
        if link is None or link.direction != DIR_OUT:
            return
        link.limit = limit
        addr = link.addr
        if link.queue:
            queue = link.queue
            while queue and link.limit > link.delivered:
                dlv = queue.popleft()
                if dlv.settled:
                    self._send(link, None, True, dlv.payload)
                else:
                    dlv.copies.append(self._send(link, dlv, False, dlv.payload))
                self._copy_unqueued(dlv)
        elif addr.held and addr.dist != DIST_MULTICAST:
            queues = addr.queues
            while addr.held and link.limit > link.delivered:
                for p in range(9, -1, -1):
                    if queues[p]:
                        dlv = queues[p].popleft()
                        break
                addr.held -= 1
                dlv.pending = 0
                dlv.link.held -= 1
                if dlv.settled:
                    self._send(link, None, True, dlv.payload)
                else:
                    dlv.out = self._send(link, dlv, False, dlv.payload)
                dlv.payload = None
                self._replenish(dlv.link)
        if drain and (link.limit > link.delivered or not (link.queue or addr.held)):
            self._emit(link.peer, Drained(link_id))
            if link.limit > link.delivered:
                link.delivered = link.limit

    def _release_held(self, addr: Address) -> None:
        """No consumer left: every delivery held at the address is released or dropped."""
        for queue in addr.queues:
            while queue:
                dlv = queue.popleft()
                addr.held -= 1
                dlv.pending = 0
                link = dlv.link
                link.held -= 1
                if dlv.settled:
                    link.dropped_presettled_count += 1
                    self.counters["droppedPresettledDeliveries"] += 1
                else:
                    self._settle_in(dlv, STATE_RELEASED, None)
                dlv.payload = None
                self._replenish(link)

    # ------------------------------------------------------------------------------------------
    # Settlement
    # ------------------------------------------------------------------------------------------
    def _count_outcome(self, link: Link, state: int, router_wide: bool) -> None:
        if state == STATE_ACCEPTED:
            link.accepted += 1
            if router_wide:
                self.counters["acceptedDeliveries"] += 1
        elif state == STATE_RELEASED:
            link.released += 1
            if router_wide:
                self.counters["releasedDeliveries"] += 1
        elif state == STATE_MODIFIED:
            link.modified += 1
            if router_wide:
                self.counters["modifiedDeliveries"] += 1
        elif state == STATE_REJECTED:
            link.rejected += 1
            if router_wide:
                self.counters["rejectedDeliveries"] += 1

    def _settle_in(self, dlv: InDelivery, state: int, info: Any) -> None:
        """Final outcome of an unsettled inbound delivery: tell its sender (if still there)."""
        if self.in_unsettled.pop(dlv.dlv_id, None) is None:
            return
        link = dlv.link
        link.in_unsettled -= 1
        self._count_outcome(link, state, True)
        if not link.closed:
            self._emit(link.peer, UpdateIn(dlv.dlv_id, state, True, info))

    def _forget_out(self, out: OutDelivery) -> None:
        del self.out_unsettled[out.out_id]
        del out.link.unsettled[out.out_id]
        if out.state:
            self._count_outcome(out.link, out.state, False)

    def _copy_done(self, dlv: InDelivery, state: int, info: Any) -> None:
        """One copy of an unsettled multicast delivery reached its outcome."""
        if MCAST_RANK.get(state, 3) > MCAST_RANK.get(dlv.outcome, 0):
            dlv.outcome = state if state in MCAST_RANK else STATE_ACCEPTED
            dlv.info = info
        dlv.open -= 1
        if dlv.open > 0:
            return
        self._settle_in(dlv, dlv.outcome, dlv.info)
        for out in dlv.copies:
            if out.out_id in self.out_unsettled:
                self._forget_out(out)
                if not out.link.closed:
                    self._emit(out.link.peer, SettleOut(out.out_id, out.state))
        dlv.copies = []

    def _on_disposition(self, peer: int, cmd: Any) -> None:
        out_id, state, settled, info = cmd
        out = self.out_unsettled.get(out_id)
        if out is None:
            return
        terminal = state in MCAST_RANK
        if terminal:
            out.state = state
            out.info = info
        dlv = out.in_dlv
        if dlv.multicast:
            if settled:
                if not out.state:
                    out.state = STATE_ACCEPTED
                self._forget_out(out)
            if not out.done and (terminal or settled):
                out.done = True
                self._copy_done(dlv, out.state, out.info)
            return
        if settled:
            # Settled with no outcome ever given: the receiver consumed it (its default outcome).
            if not out.state:
                out.state = STATE_ACCEPTED
            self._forget_out(out)
            self._settle_in(dlv, out.state, out.info)
        elif terminal:
            if dlv.link.closed:  # nobody upstream will ever settle: settle here
                self._forget_out(out)
                self._settle_in(dlv, state, info)
                self._emit(out.link.peer, SettleOut(out_id, state))
            else:
                self._emit(dlv.link.peer, UpdateIn(dlv.dlv_id, state, False, info))

    def _on_settle_in(self, peer: int, cmd: Any) -> None:
        dlv_id, state = cmd
        dlv = self.in_unsettled.pop(dlv_id, None)
        if dlv is None:
            return
        link = dlv.link
        link.in_unsettled -= 1
        self._count_outcome(link, state, True)
        if dlv.pending:
            if dlv.multicast:
                for consumer in dlv.addr.consumers:
                    queue = consumer.queue
                    while dlv in queue:
                        queue.remove(dlv)
                        self._copy_unqueued(dlv)
            else:
                dlv.addr.queues[dlv.priority].remove(dlv)
                dlv.addr.held -= 1
                dlv.pending = 0
                dlv.payload = None
                link.held -= 1
                self._replenish(link)
        outs = dlv.copies if dlv.multicast else ([dlv.out] if dlv.out is not None else [])
        for out in outs:
            if out.out_id in self.out_unsettled:
                self._forget_out(out)
                if not out.link.closed:
                    self._emit(out.link.peer, SettleOut(out.out_id, state))
        dlv.copies = []
        dlv.out = None
