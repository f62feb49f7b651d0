"""The router core: message routing, credit and settlement for one router, sans-I/O.

Owns: the :class:`RouterCore` object (every table of the core's state, the router-wide
counters, the effect queue and the senders' credit), the command dispatch and the public API.
Takes typed commands from peers (:mod:`common.ipc`) and queues typed effects per peer
index; the core process loop (coreproc.py) does the I/O. The work is split along Qpid
Dispatch's own seams, one module each, as functions of the core (``f(core, ...)``):

  records.py      the records (Connection, Link, Address, deliveries) and the integer codes
  addrkeys.py     the address table: hash keys, phases, treatments, dynamic addresses
  settlement.py   dispositions, settlement, multicast outcomes; held deliveries let go
  streaming.py    messages routed on their first bytes: chunks, the per-delivery window, aborts
  transfer.py     sending, holding, queueing, receivers' credit; a receiver lost
  streamlinks.py  interior: extra links toward another router for messages still arriving
  relay.py        interior: other routers, data links, topological addresses, routing messages
  forwarders.py   one forwarder per treatment (closest, balanced, multicast, unavailable)
  ingress.py      where a delivery enters (Transfer, RouterTransfer)
  linkroute.py    link routing: the link-route table, attach routing, routed pairs' credit
  linkends.py     a link attached (endpoint, router, the router's own) and dropped; protocol errors
  lifecycle.py    open/close, attach/detach as transition tables
  edge.py         edge mode: an edge router's uplink, address proxy, heartbeats, lookups
  edgeserver.py   edge mode: an interior router's edge connections (tracking, heartbeats, lookups)
  autolinks.py    auto-links: attached on their route container's connection, operStatus, retries
  exchanges.py    exchanges and bindings: an exchange's address forwards by message subject

Each of them, and this file, is the pure-Python reference AND part of the compiled build:
setup.py concatenates them in that order (this file last) into one module,
``build/cython_src/router_core/_core.py``, dropping the imports between the parts (the blocks
marked ``core parts``), and compiles it as ``router_core._core`` next to
``cython/_core.pxd``, which augments it (pure-Python mode): the records become final cdef
classes, the forwarders cdef classes (``forward`` is a C virtual call), the per-message
functions cdef functions with typed locals, so a delivery's whole path is C calls within one
extension. So, in every part: no ``from __future__`` import,
plain classes with ``__slots__``, commands typed ``object`` (Cython type-checks ``tuple``
exactly: a NamedTuple is not one to it), ``cython`` imported only for ``_COMPILED``
(records.py), a name defined once across all parts, and the .pxd kept in step.

Hot-path habits (they cost nothing in the pure build either): router-wide counters are plain int
attributes (the management dict is built by :attr:`RouterCore.counters`); effects are built with
``records._effect``, not by calling the NamedTuple (its Python-level ``__new__`` costs ~0.4 µs);
pending credit is kept on the link itself; dicts are keyed by int ids; codes are ints.

Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.

The settlement contract of the docs, made explicit (the connection and link lifecycles are the
tables in lifecycle.py)::

  object        event                               effect / transition
  ------------  ----------------------------------  ---------------------------------------------
  in-link       attach, targeted, address (or its    LinkOpen, LinkCredit(capacity)
                fallback) has a consumer / anonymous
  in-link       attach, targeted, no consumer        LinkOpen; waits; LinkCredit(capacity) when
                                                     the first consumer attaches (never revoked)
  in-link       a delivery leaves the core: pre-     LinkCredit(+1) (coalesced per flush)
                settled, or unsettled from an inter-
                router or edge link or the agent, or
                settled by the router at once (no
                destination: released / dropped)
  in-link       a client's unsettled delivery that   LinkCredit(+1) (as 1.19: on a normal or
                was sent on is settled (either side; route-container connection linkCapacity
                one settled while held: once it is   bounds a sender's unsettled deliveries,
                no longer held)                      Link.settle_credit)
  in-link       targeted, a delivery finds no        LinkStall(on): drain flag, no credit back
                destination (1.19: no path)          (transfer.stall) until a destination:
                                                     LinkStall(off) -> LinkUnstalled(credit)
                                                     -> LinkCredit(capacity - held -
                                                     unsettled sent on - credit)
  out-link      attach                               LinkOpen; becomes a consumer of its address
  out-link      LinkFlow(limit)                      may Deliver while delivered < limit
  out-link      LinkFlow(drain), nothing to send     Drained; delivered := limit
  in-dlv        no consumer, a fallback destination  forwarded to the fallback (redirected,
                (enableFallback) with one            counted; ingress.to_fallback)
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

from common.heap import HeapTrimmer
from router_core.matcher import AddressRules
from common.ipc import (
    CORE_ID_BASE, ConnClosed, ConnectorStatus, ConnOpened, ControlSend, Disposition, InDrained, IpcError,
    LinkAttach, LinkAttached, LinkCredit, LinkDetach, LinkFlow, LinkLost, LinkUnstalled, PeerHello,
    PolicyClose, PolicyEvent,
    DeliveryTag, RemoteAddress, RouteUpdate, RouterTransfer, SenderState, SettleIn, StreamSent,
    StreamTransfer, Transfer, TransferChunk)
from router_core.policycount import PolicyCounts
from router_core.corestate import DIST_CODES, GONE_MAX, gone_entry, management_snapshot
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import reapply_rules
from router_core.ingress import on_router_transfer, on_stream_transfer, on_transfer
from router_core.lifecycle import (
    TEST_REFUSALS, close_connection_of, on_attach, on_attached, on_conn_closed, on_conn_opened,
    on_detach, on_link_lost)
from router_core.linkends import detach_own, open_link
from router_core.peers import on_connector_status, on_hello, on_policy_close, on_policy_event
from router_core.linkroute import (
    LinkRouteTable, add_conn_link_route, add_link_route, delete_conn_link_route,
    delete_link_route, on_delivery_tag, on_in_drained, on_sender_state)
from router_core.edge import EdgeUplink
from router_core.edgeserver import EdgeServer, HeartbeatServer
from router_core.records import MODE_CODES, MODE_EDGE, MODE_INTERIOR, STALL_NONE, Link
from router_core.relay import on_control_send, on_remote_address, on_route_update
from router_core.settlement import (
    STUCK_PROD, STUCK_TEST, credit_seen, on_disposition, on_settle_in, scan_blocked, scan_stuck)
from router_core.streaming import on_stream_chunk, on_stream_sent
from router_core.streamlinks import (POOL_MAX, SCRUB_INTERVAL, TEST_POOL_MAX,
                                     TEST_SCRUB_INTERVAL, idle_surplus)
from router_core.transfer import on_flow, on_link_unstalled
from router_core.autolinks import (
    NEVER, auto_links_conn_opened, auto_links_tick, auto_links_view, create_auto_link,
    remove_auto_link)
from router_core.exchanges import (
    add_binding, add_exchange, exchanges_view, remove_binding, remove_exchange)
# --- end core parts ---


class RouterCore:
    """One router's routing and settlement state. Feed commands with :meth:`handle`, collect
    effects with :meth:`take_effects`."""

    def __init__(self, router_id: str, *, default_distribution: str = "balanced",
                 addresses: Optional[list] = None, area: str = "0",
                 seed: Optional[int] = None, mode: str = "standalone",
                 link_routes: Optional[list] = None, test_hooks: bool = False,
                 allow_resumable_link_route: bool = True,
                 exchanges: Optional[list] = None, bindings: Optional[list] = None) -> None:
        if default_distribution not in DIST_CODES:
            raise ValueError(f"unknown distribution {default_distribution!r}")
        if mode not in MODE_CODES:
            raise ValueError(f"unknown router mode {mode!r}")
        self.router_id = router_id
        self.area = area
        self.mode = MODE_CODES[mode]  # MODE_*: inter-router links only in interior mode
        self.default_distribution = DIST_CODES[default_distribution]
        self.rules = AddressRules(addresses)
        self.peers = {}          # peer index -> kind
        self.conns = {}          # conn_id -> Connection
        self.internal_conns = {}  # conn_id -> Connection of the agent's own (role internal)
        self.links = {}          # link_id -> Link
        self.addrs = {}          # key -> Address
        self.in_unsettled = {}   # inbound dlv_id -> InDelivery (unsettled, not yet final)
        self.out_unsettled = {}  # outbound dlv_id -> OutDelivery
        # streaming deliveries (streaming.py): inbound dlv_id -> Stream while its message is
        # arriving; outbound dlv_id -> StreamCopy of each copy started for one of them
        self.streams = {}
        self.stream_outs = {}
        # router-wide management counters (see the ``counters`` property for their names)
        self.presettled = 0
        self.dropped_presettled = 0
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0
        self.ingress = 0
        self.egress = 0
        self.transit = 0
        self.ingress_container = 0
        self.egress_container = 0
        self.redirected = 0  # deliveries sent to a fallback destination (ingress.to_fallback)
        # inbound deliveries settled more than 1 s / 10 s after they came in (count_delay)
        self.delayed_1sec = 0
        self.delayed_10sec = 0
        # deliveries found stuck (settlement.scan_stuck) and not settled since; the sweep's
        # period and age (1.19's stuck delivery detection: 30 s and 10 s, with -T 5 s and 3 s)
        self.stuck = 0
        self.stuck_interval, self.stuck_age = STUCK_TEST if test_hooks else STUCK_PROD
        self.stuck_next_scan = self.stuck_interval
        # links the sweep found blocked with zero credit (settlement.scan_blocked)
        self.links_blocked = 0
        # auto-links (autolinks.py): identity -> AutoLink, in creation order; the core time of
        # the soonest retry among them
        self.auto_links = {}
        self.al_next_retry = NEVER
        self.al_logs = []  # their ROUTER_CORE info lines, for the core process to log
        # ROUTER_CORE info on (set by the core process): connections and links opened and
        # closed are kept in info_logs as (LOG_*, record) for it to log (router_core/corelog.py)
        self.log_info = False
        self.info_logs = []
        # the streaming-link scrubber (streamlinks.py): its period, the idle links it leaves a
        # connection (shorter and fewer with test hooks, as 1.19's -T) and its next scan
        self.sl_interval, self.sl_pool_max = ((TEST_SCRUB_INTERVAL, TEST_POOL_MAX) if test_hooks
                                              else (SCRUB_INTERVAL, POOL_MAX))
        self.sl_next_scrub = self.sl_interval
        self._next_out = 1
        self.next_link_id = CORE_ID_BASE  # links the core attaches itself (AttachOut)
        self._key_cache = {}
        self._rng = random.Random(seed)
        self._heap = HeapTrimmer()  # freed memory back to the OS (see tick)
        self.now = 0.0  # the time given with the latest command batch or tick
        self._effects = {}       # peer -> [effect]
        self._credited = []      # links with a LinkCredit placeholder in _effects (coalesced)
        # interior mode: the agent's peer index, and every other router the routing protocol
        # reaches (router id -> RemoteRouter), from its latest RouteUpdate
        self.agent_peer = None
        self.routers = {}
        self.neighbour_conns = {}  # router id -> its inter-router Connection with control links
        # the routing protocol's addresses (relay.CONTROL_LOCAL/FLOOD keys): [to the agent,
        # from the agent], shown as 1.19's in-process counts (corestate.control_address_views)
        self.control_counts = {}
        # qdrouterd -T: the test endpoints' refusals (lifecycle.TEST_REFUSALS), else empty
        self.test_refusals = dict(TEST_REFUSALS) if test_hooks else {}
        # router allowResumableLinkRoute: off, a link-routed attach whose terminus outlives
        # its link (linkroute.resumable) is refused
        self.allow_resumable_lr = bool(allow_resumable_link_route)
        # the final view of what was removed lately (corestate.gone_entry; snapshot["gone"])
        self.gone = deque(maxlen=GONE_MAX)
        self.gone_seq = 0
        # protocol errors of peers (linkends.protocol_error), for the core process to log
        self.errors = []
        # commands of the current handle_batch handled so far (coreproc: which one failed)
        self.batch_pos = 0
        # Commands off the per-message path (the per-message ones are tested first in _handle).
        self._dispatch = {LinkAttach: on_attach, LinkDetach: on_detach, LinkLost: on_link_lost,
                          LinkAttached: on_attached, InDrained: on_in_drained,
                          SenderState: on_sender_state, LinkUnstalled: on_link_unstalled,
                          DeliveryTag: on_delivery_tag,
                          ConnOpened: _conn_opened, ConnClosed: on_conn_closed,
                          PeerHello: on_hello, ControlSend: on_control_send,
                          RouteUpdate: on_route_update, RemoteAddress: on_remote_address,
                          PolicyEvent: on_policy_event, PolicyClose: on_policy_close,
                          StreamTransfer: on_stream_transfer,
                          TransferChunk: on_stream_chunk, StreamSent: on_stream_sent,
                          ConnectorStatus: on_connector_status}
        # connector name -> (status, message) as its worker last reported it (management)
        self.connector_status = {}
        # router-wide policy connection counts and denial counters (policycount.py)
        self.policy_counts = PolicyCounts()
        # link routes and their addresses (linkroute.py)
        self.lr = LinkRouteTable()
        # (inbound link, in dlv_id, tag): the client's tag of the link-routed delivery whose
        # transfer comes next (linkroute.on_delivery_tag); None almost always
        self.routed_tag = None
        for attributes in link_routes or ():
            add_link_route(self, attributes)
        # exchanges and bindings (exchanges.py): identity -> Exchange / Binding
        self.exchanges = {}
        self.bindings = {}
        for attributes in exchanges or ():
            add_exchange(self, attributes)
        for attributes in bindings or ():
            add_binding(self, attributes)
        # edge mode (edge.py): an edge router's uplink, or an interior router's service of
        # its edge connections; None in standalone mode
        self.edge = None
        self.heartbeats = HeartbeatServer(self)  # every mode, as 1.19's (edgeserver.py)
        if self.mode == MODE_EDGE:
            self.edge = EdgeUplink(self)
        elif self.mode == MODE_INTERIOR:
            self.edge = EdgeServer(self)

    # ------------------------------------------------------------------------------------------
    # Public API
    # ------------------------------------------------------------------------------------------
    def handle(self, peer: int, cmd: Any, now: float) -> None:
        self.now = now
        self._handle(peer, cmd)

    def handle_batch(self, peer: int, cmds: Any, now: float) -> None:
        """``handle`` for every command of one peer's batch, in order. If one raises,
        ``batch_pos`` is its index (the ones before it were handled)."""
        self.now = now
        self.batch_pos = 0
        for cmd in cmds:
            self._handle(peer, cmd)
            self.batch_pos += 1

    def _handle(self, peer: Any, cmd: Any) -> None:
        kind = type(cmd)
        # In order of frequency: two or three per message, then credit, then the rest.
        if kind is Transfer:
            on_transfer(self, peer, cmd)
        elif kind is Disposition:
            on_disposition(self, peer, cmd)
        elif kind is LinkFlow:
            on_flow(self, peer, cmd)
        elif kind is SettleIn:
            on_settle_in(self, peer, cmd)
        elif kind is RouterTransfer:
            on_router_transfer(self, peer, cmd)
        else:
            handler = self._dispatch.get(kind)
            if handler is None:
                raise IpcError(f"the core does not handle {kind.__name__}")
            handler(self, peer, cmd)

    def command_failed(self, peer: int, cmd: Any, text: str) -> None:
        """``cmd`` from ``peer`` raised (``text`` says what): the core process calls this and
        goes on. The connection it concerns (if any) is closed with amqp:internal-error."""
        close_connection_of(self, peer, cmd, text)

    def take_errors(self) -> list:
        """The protocol errors since the last call (texts for the core process's log)."""
        errors = self.errors
        self.errors = []
        return errors

    def tick(self, now: float) -> None:
        """Called by the core process's loop. Once a second, heap memory freed since (closed
        connections, released deliveries) goes back to the OS (common.heap); auto-link
        retries that are due; every 30 s (5 s with test hooks) the streaming-link scrubber (streamlinks.py) and the
        stuck delivery sweep (settlement.scan_stuck; every 5 s with test hooks)."""
        self.now = now
        self._heap.maybe_trim(now)
        if now >= self.al_next_retry:
            auto_links_tick(self)
        if now >= self.stuck_next_scan:
            self.stuck_next_scan = now + self.stuck_interval
            scan_stuck(self, self.stuck_age)
            scan_blocked(self, self.stuck_age)
        if self.edge is not None:  # heartbeats sent (edge): edge.py
            self.edge.tick(self, now)
        self.heartbeats.tick(self, now)
        if now >= self.sl_next_scrub:
            self.sl_next_scrub = now + self.sl_interval
            for link in idle_surplus(self):
                detach_own(self, link)

    def take_effects(self) -> dict:
        """Every effect queued since the last call, as ``{peer: [effect, ...]}``."""
        effects = self._effects
        for link in self._credited:
            effects[link.peer][link.credit_slot] = LinkCredit(link.link_id, link.credit_pending)
            link.credit_pending = 0
            link.credit_slot = -1
            if link.zero_at >= 0.0:  # granted credit: not (or no longer) blocked
                credit_seen(self, link)
        self._credited = []
        self._effects = {}
        return effects

    def peer_lost(self, peer: int) -> None:
        """A peer went away: every connection it owned is closed."""
        for conn_id in [c.conn_id for c in self.conns.values() if c.peer == peer]:
            on_conn_closed(self, peer, ConnClosed(conn_id, "peer lost"))
        self.peers.pop(peer, None)
        if peer == self.agent_peer:  # until the restarted agent says hello (it is told then)
            self.agent_peer = None

    def snapshot(self, gone_after: Optional[int] = None) -> dict:
        """management_snapshot(); ``gone_after``: include the removed entities with a greater
        seq (the metrics sink), None: none of them (management, /metrics)."""
        state = management_snapshot(self, gone_after)
        state["autoLinks"] = auto_links_view(self)
        state.update(exchanges_view(self))
        return state

    @property
    def counters(self) -> dict:
        """The router-wide delivery counters, by their management attribute names."""
        return {"presettledDeliveries": self.presettled,
                "droppedPresettledDeliveries": self.dropped_presettled,
                "acceptedDeliveries": self.accepted, "rejectedDeliveries": self.rejected,
                "releasedDeliveries": self.released, "modifiedDeliveries": self.modified,
                "deliveriesIngress": self.ingress, "deliveriesEgress": self.egress,
                "deliveriesTransit": self.transit,
                "deliveriesIngressRouteContainer": self.ingress_container,
                "deliveriesEgressRouteContainer": self.egress_container,
                "deliveriesRedirectedToFallback": self.redirected,
                "deliveriesDelayed1Sec": self.delayed_1sec,
                "deliveriesDelayed10Sec": self.delayed_10sec,
                "deliveriesStuck": self.stuck, "linksBlocked": self.links_blocked,
                "blockedLinkCount": self.links_blocked}

    def add_auto_link(self, attributes: dict) -> None:
        """A configured auto-link (``router.config.autoLink`` attributes, canonical names),
        attached at once if its container is connected (autolinks.py). ValueError if invalid."""
        create_auto_link(self, attributes)

    def delete_auto_link(self, identity: str) -> bool:
        """Forget the auto-link ``identity`` (its link is detached); False if there is none."""
        return remove_auto_link(self, identity)

    def create_exchange(self, attributes: dict) -> None:
        """Add a ``router.config.exchange`` (validated attributes with ``identity``:
        common/exchanges.py); ValueError if the core refuses it."""
        add_exchange(self, attributes)

    def delete_exchange(self, identity: str) -> bool:
        """Remove the exchange ``identity`` and its bindings; False if there is none."""
        return remove_exchange(self, identity)

    def create_binding(self, attributes: dict) -> None:
        """Add a ``router.config.binding`` to its exchange; ValueError if refused."""
        add_binding(self, attributes)

    def delete_binding(self, identity: str) -> bool:
        return remove_binding(self, identity)

    def set_address_config(self, addresses: list) -> None:
        """Replace the configured ``address`` rules (same dicts as the constructor's
        ``addresses=``).

        Applied at once: every existing mobile address takes the distribution and priority the
        new rules give it (or the defaults), as a new address would. Deliveries already held or
        sent keep going: held anycast deliveries still drain to consumers with credit whatever
        the new distribution (even multicast or unavailable), queued multicast copies still go
        to their links, and each delivery keeps the priority queue it was held in. Invalid
        rules raise before anything changes.
        """
        self.rules = AddressRules(addresses)
        reapply_rules(self)

    def create_link_route(self, attributes: dict) -> None:
        """Add a ``linkRoute`` (validated attributes, ``identity`` set: common/linkroutes.py)."""
        add_link_route(self, attributes)

    def delete_link_route(self, identity: str) -> bool:
        """Remove the ``linkRoute`` ``identity``; False if there is none."""
        return delete_link_route(self, identity)

    def create_conn_link_route(self, attributes: dict) -> str:
        """Add a ``router.connection.linkRoute`` on connection ``attributes["connId"]``; the
        problem as text ("" when added)."""
        return add_conn_link_route(self, attributes)

    def delete_conn_link_route(self, conn_id: int, identity: str) -> bool:
        """Remove connection ``conn_id``'s link route ``identity``; False if there is none."""
        return delete_conn_link_route(self, conn_id, identity)

    def attach_out(self, conn_id: int, direction: int, name: str, address: Optional[str],
                   source: Optional[dict], target: Optional[dict], settle: list,
                   owner: Any = None) -> Optional[int]:
        """Attach a link from the router's side on connection ``conn_id`` (see
        linkends.open_link); the new link's id, or None if the core has no such connection."""
        conn = self.conns.get(conn_id)
        if conn is None:
            return None
        return open_link(self, conn, direction, name, address, source, target, settle,
                         owner).link_id

    # ------------------------------------------------------------------------------------------
    # Services every part uses: effects, the senders' credit, removal records
    # ------------------------------------------------------------------------------------------
    def _emit(self, peer: int, effect: Any) -> None:
        lst = self._effects.get(peer)
        if lst is None:
            lst = self._effects[peer] = []
        lst.append(effect)

    def _credit(self, link: Link, credit: int) -> None:
        link.granted += credit
        link.credit_pending += credit
        if link.credit_slot < 0:
            lst = self._effects.get(link.peer)
            if lst is None:
                lst = self._effects[link.peer] = []
            link.credit_slot = len(lst)
            lst.append(None)  # placeholder, filled in by take_effects
            self._credited.append(link)

    def _replenish_sent(self, link: Link, settled: bool) -> None:
        """A delivery from ``link`` left the core (sent on): its credit goes back now, unless
        it is unsettled on a link that gives credit back at settlement (``settle_credit``,
        1.19's endpoint links), where settlement.count_settled_in gives it back."""
        if settled or not link.settle_credit:
            self._replenish(link)
        else:
            link.settle_owed += 1

    def _replenish(self, link: Link) -> None:
        if link.credited and not link.closed and link.stall == STALL_NONE:
            owed = link.credit_owed + 1
            if owed >= link.credit_batch:
                link.credit_owed = 0
                self._credit(link, owed)
            else:
                link.credit_owed = owed

    def _record_gone(self, kind: str, obj: Any) -> None:
        """Keep the final counts of a removed address, link or connection (removal paths only)."""
        self.gone_seq += 1
        self.gone.append(gone_entry(kind, obj, self.gone_seq, self.now))


def _conn_opened(core: Any, peer: Any, cmd: Any) -> None:
    """ConnOpened: the connection's lifecycle (lifecycle.py), then the auto-links of its
    container attach on it."""
    on_conn_opened(core, peer, cmd)
    if core.auto_links:
        conn = core.conns.get(cmd[0])
        if conn is not None:
            auto_links_conn_opened(core, conn)
