"""The one IPC schema: every message that crosses a process boundary in the router.

Why this module is over 500 lines: it is the ONE schema (CONVENTIONS: one IPC schema module), so
every message type, its code and its encoding sit in one place that a reader checks once.

Processes (see DESIGN.md): the core owns routing and settlement; I/O workers own AMQP
connections; the agent (control plane) owns management and the routing protocol. Workers and the
agent are *peers* of the core and talk to it over one ZeroMQ DEALER/ROUTER pair each.

Wire format of one batch (ONE ZeroMQ frame; a ROUTER socket adds the peer's identity frame)::

    4 bytes   n, the length of the header (unsigned, little-endian)
    n bytes   msgpack([IPC_VERSION, peer_index, [[code, field, field, ...], ...]])
    the rest  (only if some message carries a payload) the payloads, back to back

A message type whose last field is ``payload`` carries the payload object in memory; on the wire
that field holds the payload's length, and the bytes follow the header in item order. One frame,
not a header frame and a payload frame: every frame of a multipart message costs pyzmq a send, a
receive and an RCVMORE check (about 3 µs a frame here), per batch and per hop. Message bytes
are never decoded or re-encoded: the core hands zero-copy slices of the received frame straight
to the outbound peer's batch.

Commands flow from peers to the core, effects from the core to peers. Both are NamedTuples: cheap
to build on the hot path, typed, immutable, and packed by msgpack as arrays.

Identifiers: connections, links and inbound deliveries are numbered by the peer that owns them
with :func:`id_allocator`, so they are unique router-wide without a round trip. Outbound deliveries
are numbered by the core.

This module must not import proton, zmq or anything from router_io/agent.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, NamedTuple, Optional

from common.builds import choose

IPC_VERSION = 2


class IpcError(Exception):
    """A batch that does not follow this schema (wrong version, unknown code, bad shape)."""


# Delivery states, by their AMQP descriptor codes (0 = no state).
STATE_NONE = 0
STATE_RECEIVED = 0x23
STATE_ACCEPTED = 0x24
STATE_REJECTED = 0x25
STATE_RELEASED = 0x26
STATE_MODIFIED = 0x27
TERMINAL_STATES = (STATE_ACCEPTED, STATE_REJECTED, STATE_RELEASED, STATE_MODIFIED)
STATE_NAMES = {STATE_NONE: "none", STATE_RECEIVED: "received", STATE_ACCEPTED: "accepted",
               STATE_REJECTED: "rejected", STATE_RELEASED: "released",
               STATE_MODIFIED: "modified"}

# Link directions, from the router's point of view.
DIR_IN = 0   # the router receives on this link (the client is a sender)
DIR_OUT = 1  # the router sends on this link (the client is a receiver)

# A terminus (source or target) as it crosses processes: a dict with these keys. ``type``:
# TERMINUS_SOURCE, TERMINUS_TARGET or TERMINUS_COORDINATOR (a transaction coordinator target);
# the last four fields are AMQP-encoded bytes (None: absent), opaque to the core.
TERMINUS_FIELDS = ("type", "address", "dynamic", "durable", "expiry", "timeout",
                   "distribution_mode", "capabilities", "properties", "filter", "outcomes")
TERMINUS_SOURCE = 1
TERMINUS_TARGET = 2
TERMINUS_COORDINATOR = 3


def terminus(kind: int, address: Optional[str], dynamic: bool = False,
             capabilities: Any = None) -> dict:
    """A terminus dict with proton's defaults (not durable, expires with the session)."""
    return {"type": kind, "address": address, "dynamic": dynamic, "durable": 0, "expiry": 1,
            "timeout": 0, "distribution_mode": 0, "capabilities": capabilities,
            "properties": None, "filter": None, "outcomes": None}


# Ids the core mints (links it attaches itself): far above any peer's generations of ids
CORE_ID_BASE = 1 << 60


# ----------------------------------------------------------------------------------------------
# Peer -> core commands
# ----------------------------------------------------------------------------------------------
class PeerHello(NamedTuple):
    """First message of every peer; the core learns its ZeroMQ identity from it."""
    peer: int
    kind: str  # "worker" or "agent"
    pid: int


class ConnOpened(NamedTuple):
    """An AMQP connection finished its OPEN exchange (or an internal connection was created)."""
    conn_id: int
    role: str          # normal | inter-router | route-container | edge | internal
    direction: str     # "in" (accepted on a listener) or "out" (made by a connector)
    host: str          # peer address "ip:port"
    container: str     # remote container-id
    listener: str      # name of the listener/connector it came through
    user: str
    sasl: str          # SASL mechanism used ("" if none)
    # a worker's connection: [has TLS, encrypted, TLS protocol, cipher, ssf, authenticated,
    # the peer's open properties (a map), may it create connection-scoped link routes (its
    # vhost policy's allowDynamicLinkRoutes)], opaque to the core (router_core/corestate.py reads
    # it for management); the agent's internal connection: False
    encrypted: Any
    link_capacity: int
    cost: int = 1      # inter-router: max(local configured cost, the peer's qd.inter-router-cost)
    # accepted connections: [global maxConnections, vhost (None: no vhost policy), user, remote
    # ip, vhost maxConnections, max per user, max per host] for the core's router-wide counts
    # (router_core/policycount.py); None: not counted
    policy: Optional[list] = None
    # the peer offered the qd.streaming-links capability (1.19's: it takes extra inter-router
    # links for messages still arriving; router_core/streamlinks.py)
    streaming_links: bool = False


class ConnClosed(NamedTuple):
    conn_id: int
    error: str  # "" for an orderly close


class LinkAttach(NamedTuple):
    """A remote peer attached a link. The worker waits for LinkOpen/LinkRefuse before answering.

    Also sent for the links the worker itself creates on the connecting side of an inter-router
    connection (already open locally: the core's LinkOpen is then a no-op)."""
    link_id: int
    conn_id: int
    direction: int          # DIR_IN or DIR_OUT
    name: str
    address: Optional[str]  # target address for DIR_IN, source address for DIR_OUT; None if null
    dynamic: bool           # dynamic source (DIR_OUT) or dynamic target (DIR_IN)
    presettled: bool        # snd-settle-mode is settled (DIR_IN: the client will presettle)
    capacity: int           # credit window the router uses for this link (linkCapacity)
    # endpoint | router-control (terminus capability qd.router) | inter-router (qd.router-data)
    link_type: str = "endpoint"
    # the peer's termini as it sent them (see TERMINUS_FIELDS; None: a null terminus) and its
    # [snd-settle-mode, rcv-settle-mode]: what a link route forwards to the far end
    source: Optional[dict] = None
    target: Optional[dict] = None
    settle: Optional[list] = None


class LinkDetach(NamedTuple):
    link_id: int
    closed: bool  # True for close, False for a non-closing detach
    error: str


class LinkFlow(NamedTuple):
    """Credit state of an outbound link: ``limit`` = deliveries sent so far + credit now."""
    link_id: int
    limit: int
    drain: bool


class Transfer(NamedTuple):
    """A complete inbound delivery, raw message bytes in ``payload``."""
    dlv_id: int
    link_id: int
    to: Optional[str]      # anonymous links only: x-opt-qd.to, else properties.to; None otherwise
    settled: bool          # pre-settled by the sender
    priority: int          # 0..9
    payload: Any           # bytes-like (bytes, zmq.Frame)


class Disposition(NamedTuple):
    """A receiver changed the state of an outbound delivery (core-numbered ``dlv_id``)."""
    dlv_id: int
    state: int
    settled: bool
    info: Optional[dict]   # rejected: {"condition", "description"}; modified: {"failed",
    # "undeliverable", "annotations"?: the message-annotations map, AMQP-encoded bytes, opaque};
    # received: {"section_number", "section_offset"}; an extension state (any other
    # descriptor): {"data"?: its value, AMQP-encoded bytes, opaque}


class SettleIn(NamedTuple):
    """The sender settled an inbound delivery on its own (or its state changed before settling)."""
    dlv_id: int
    state: int


class LinkAttached(NamedTuple):
    """The peer answered a link the router attached (AttachOut) with its own attach: its
    termini (None: null, as a refusing peer sends before its detach) and settle modes. From
    here on the link is like any other; a refusal's detach follows as LinkDetach."""
    link_id: int
    source: Optional[dict]
    target: Optional[dict]
    settle: Optional[list]


class InDrained(NamedTuple):
    """The sender of an inbound link the core asked to drain (LinkDrain) has used up its
    credit (it advanced its delivery-count): a link route answers the receiver's drain."""
    link_id: int


class SenderState(NamedTuple):
    """The sender of a link-routed inbound delivery gave it a state before settling (a
    transactional send's transactional-state, on the transfer or in a disposition); ``info``:
    ``{"data": the state's fields, AMQP-encoded}`` or None. The core passes it on
    (DeliverState) to the delivery it forwarded."""
    dlv_id: int
    state: int
    info: Optional[dict]


# ----------------------------------------------------------------------------------------------
# Core -> peer effects
# ----------------------------------------------------------------------------------------------
class LinkOpen(NamedTuple):
    """Answer an attach: open the link locally, with this terminus address (dynamic ones filled).

    With ``source``/``target``/``settle`` given (a link route mirrors the far end's answer), the
    local termini and settle modes are exactly these instead of copies of the peer's."""
    link_id: int
    address: Optional[str]
    source: Optional[dict] = None
    target: Optional[dict] = None
    settle: Optional[list] = None


class AttachOut(NamedTuple):
    """The router attaches a link itself on connection ``conn_id`` (auto-links, link routes).

    ``link_id`` is minted by the core (from CORE_ID_BASE); ``direction`` as for LinkAttach
    (DIR_IN: the router receives); termini as in TERMINUS_FIELDS (None: null); ``settle``:
    [snd-settle-mode, rcv-settle-mode]; ``capacity``: the credit window when the router
    receives. The peer's answer comes back as LinkAttached (or LinkDetach)."""
    link_id: int
    conn_id: int
    direction: int
    name: str
    source: Optional[dict]
    target: Optional[dict]
    settle: list
    capacity: int


class LinkDrain(NamedTuple):
    """Ask the remote sender of an inbound link to drain the credit it has (AMQP flow with
    drain set; no new credit). The worker answers InDrained once the sender has drained."""
    link_id: int


class LinkStall(NamedTuple):
    """The target of an inbound link has no destination and a delivery on it went nowhere
    (1.19: no path): ``on`` sets the drain flag on the link, keeping the credit the sender
    has (a flow with drain goes out); off clears it again (the address has a destination),
    and the worker answers LinkUnstalled."""
    link_id: int
    on: bool


class LinkUnstalled(NamedTuple):
    """Answer to LinkStall off: ``credit`` is what the sender of the inbound link may still
    send (the credit proton shows, a drained sender's 0, plus the deliveries proton holds
    that the core has not been told about yet); the core gives the rest of the window."""
    link_id: int
    credit: int


class DeliverOrigin(NamedTuple):
    """Core -> agent, just before the Deliver (or StreamDeliver) ``dlv_id`` on one of the
    agent's links: the connection the message came in on. Management uses the requesting
    connection as 1.19 does: connection-scoped entities (``router.connection.linkRoute``) are
    created on it and visible through it, and its policy decides whether it may change a
    connection's adminStatus."""
    dlv_id: int
    conn_id: int


class DeliverState(NamedTuple):
    """Set the local state of an outbound delivery (core-numbered) without settling it: the
    sender's state of a link-routed delivery (see SenderState)."""
    dlv_id: int
    state: int
    info: Optional[dict]


class LinkRefuse(NamedTuple):
    """Answer an attach with a detach carrying an error (condition symbol + description)."""
    link_id: int
    condition: str
    description: str


class LinkCredit(NamedTuple):
    """Grant ``credit`` more to the remote sender of an inbound link."""
    link_id: int
    credit: int


class Deliver(NamedTuple):
    """Send a delivery on an outbound link. ``dlv_id`` is core-numbered."""
    dlv_id: int
    link_id: int
    settled: bool
    payload: Any


class UpdateIn(NamedTuple):
    """Set the state of an inbound delivery and optionally settle it."""
    dlv_id: int
    state: int
    settled: bool
    info: Optional[dict]


class SettleOut(NamedTuple):
    """The sender settled: settle this outbound delivery (with the state if any)."""
    dlv_id: int
    state: int


class Drained(NamedTuple):
    """The core has nothing more for a draining outbound link: consume the rest of its credit."""
    link_id: int


class CloseConnection(NamedTuple):
    conn_id: int
    condition: str
    description: str


class DetachLink(NamedTuple):
    link_id: int
    condition: str
    description: str


# ----------------------------------------------------------------------------------------------
# Child process -> supervisor
# ----------------------------------------------------------------------------------------------
class ChildStatus(NamedTuple):
    """A child process reports "ready" (its sockets are bound) or "failed" (it cannot run)."""
    kind: str     # core | worker | agent
    index: int
    pid: int
    status: str   # ready | failed
    detail: str


SUPERVISOR_PEER = -2  # the peer index of the supervisor's batches to the core (PeerLost)


class PeerLost(NamedTuple):
    """Supervisor -> core: the process behind peer ``peer`` died; drop all it owned.

    Its connections close as if each had dropped: deliveries they had in flight end RELEASED or
    MODIFIED toward their senders. A restarted peer says PeerHello again with a new pid.
    """
    peer: int
    pid: int


# ----------------------------------------------------------------------------------------------
# Management plumbing (agent <-> core process <-> workers); relayed by router_core/coreproc.py
# ----------------------------------------------------------------------------------------------
class CoreQuery(NamedTuple):
    """Agent -> core: ask for a consistent snapshot of the core's state (``what`` = "snapshot")."""
    request_id: int
    what: str


class CoreState(NamedTuple):
    """Core -> agent: the answer to a CoreQuery (plain msgpack-able dicts)."""
    request_id: int
    state: dict


class ConfigChange(NamedTuple):
    """Agent -> core -> every worker (or the owning one): apply a runtime configuration change.

    op: create | delete | update; entity_type: long or short type name (listener, connector,
    log, router.config.address, connection...); attributes: the entity's attributes.
    """
    request_id: int
    op: str
    entity_type: str
    attributes: dict


ENTITY_TYPE_PREFIX = "org.apache.qpid.dispatch."


def short_type(entity_type: str) -> str:
    """A ConfigChange's entity type without the management prefix: ``listener`` for
    ``org.apache.qpid.dispatch.listener`` (a short name is returned as it is)."""
    if entity_type.startswith(ENTITY_TYPE_PREFIX):
        return entity_type[len(ENTITY_TYPE_PREFIX):]
    return entity_type


class ConfigResult(NamedTuple):
    """Worker/core -> agent: the outcome of a ConfigChange on one peer.

    status: of a failure, the management status it calls for: NOT_SUPPORTED (501) when that
    process cannot make such a change, else 0 (an error; the agent answers 500, or 400 when
    the request asked for something impossible)."""
    request_id: int
    peer: int
    ok: bool
    detail: str
    status: int = 0


NOT_SUPPORTED = 501  # ConfigResult.status: the change is not supported (management's 501)


class LogQuery(NamedTuple):
    """Agent -> core -> every worker: send your log report (GET-LOG, ``logStats``)."""
    request_id: int


class ConnectorStatus(NamedTuple):
    """Worker -> core: how the worker running connector ``name`` last found it, for management
    (1.19's connector ``connectionStatus``/``connectionMsg``): ``CONNECTING`` with the text of
    the last failed attempt or lost connection (``[Cn] Connection to HOST:PORT failed: ...``,
    "" before any), or "" once the connector is deleted (forgotten). An open connection of the
    connector is ``SUCCESS``; the core sees that from its ConnOpened."""
    name: str
    status: str
    message: str


class LogReport(NamedTuple):
    """Core/worker -> agent: one process's ``common.log.RouterLog.report()`` (``counts``:
    module -> lines per level; ``entries``: the recent ones), relayed by the core process.
    peer: the worker's index, -1 for the core."""
    request_id: int
    peer: int
    report: dict


class ReloadRequest(NamedTuple):
    """Supervisor -> agent: apply these configuration changes (from a re-read config file).

    changes: [{"op": create|delete|update, "type": entity type, "name": ..., "attributes": {...}}]
    """
    request_id: int
    changes: list


class ReloadResult(NamedTuple):
    """Agent -> supervisor: how a ReloadRequest went; ``applied`` lists the change indexes done."""
    request_id: int
    ok: bool
    applied: list
    detail: str


# ----------------------------------------------------------------------------------------------
# Interior mode: inter-router links (worker <-> core) and the routing protocol (agent <-> core)
# ----------------------------------------------------------------------------------------------
class RouterTransfer(NamedTuple):
    """Worker -> core: a complete delivery received on an inter-router link (control or data).

    Router annotations are never stripped on these links; the worker hands over what the core
    routes by. ``to``: ``x-opt-qd.to`` if present, else ``properties.to`` (None if neither);
    ``phase``: ``x-opt-qd.phase`` (0 if absent); ``ingress``: ``x-opt-qd.ingress`` ("0/<id>",
    None if absent); ``trace``: the ``x-opt-qd.trace`` entries ([] if absent)."""
    dlv_id: int
    link_id: int
    to: Optional[str]
    settled: bool
    priority: int
    phase: int
    ingress: Optional[str]
    trace: list
    payload: Any


class RouterDeliver(NamedTuple):
    """Core -> worker: send a delivery on an inter-router link (like Deliver).

    The worker adds ``x-opt-qd.ingress`` (this router) when the message has none and appends
    this router to ``x-opt-qd.trace``, as for any non-stripping connection; it also sets
    ``x-opt-qd.to`` to ``to_override`` unless that is None (kept as is), and ``x-opt-qd.phase``
    to ``phase`` unless it is -1 (kept as is)."""
    dlv_id: int
    link_id: int
    settled: bool
    to_override: Optional[str]
    phase: int
    payload: Any


class ControlIn(NamedTuple):
    """Core -> agent: a routing-protocol message for this router (HELLO, RA, LSR, LSU, MAU,
    MAR), as the raw message bytes, and the inter-router connection it arrived on."""
    conn_id: int
    payload: Any


class ControlSend(NamedTuple):
    """Agent -> core: send a routing-protocol message (raw, pre-settled).

    ``conn_id`` >= 0: on that inter-router connection's outgoing control link (HELLO, one hop);
    -1: routed by ``to`` (``_topo/0/all/...`` to every known router, ``_topo/0/<id>/...`` along
    the least-cost path), on control links."""
    conn_id: int
    to: str
    payload: Any


class RouterLinkUp(NamedTuple):
    """Core -> agent: an inter-router connection has both control links; ``cost`` is the
    connection's cost, ``container`` the peer's container id (its router id)."""
    conn_id: int
    cost: int
    container: str


class RouterLinkDown(NamedTuple):
    """Core -> agent: an inter-router connection (or one of its control links) went away."""
    conn_id: int


class RouteUpdate(NamedTuple):
    """The result of a route computation, as the core applies it. Never crosses a process any
    more: the core process computes it from the agent's LinkStates (router_core/routetable.py)
    and hands it to RouterCore.handle itself.

    ``next_hop``: router id -> neighbour router id for every reachable router (a neighbour is
    its own next hop); ``cost``: router id -> path cost; ``valid_origins``: router id -> list of
    router ids; ``neighbours``: neighbour router id -> the inter-router conn_id it is reached
    over."""
    next_hop: dict
    cost: dict
    valid_origins: dict
    neighbours: dict


class LinkState(NamedTuple):
    """Agent -> core: one router as the routing protocol knows it (added, or replacing what
    the core held for it). The core computes the routes from these (router_core/routetable.py).

    ``instance``/``pv``: the router's instance and protocol version (-1: not known yet);
    ``index``: its mask-bit index (0 is this router); ``ls_seq``: the sequence of the link
    state held (0: none yet); ``peers``: peer router id -> cost, as the router advertised it
    (``{}``: no link state yet; a known router without one is listed by management, unreachable
    unless some link state names it); ``conns``: this router's own entry only: each neighbour
    router id -> the inter-router conn_id its HELLOs come over (``{}`` for every other router).
    """
    router: str
    instance: int
    pv: int
    index: int
    ls_seq: int
    peers: dict
    conns: dict


class RouterGone(NamedTuple):
    """Agent -> core: the routing protocol deleted router ``router`` (an orphan)."""
    router: str


class TopologyReset(NamedTuple):
    """Agent -> core: forget every router; the LinkStates that follow in the same batch are the
    whole topology. A new agent (first start, or a restart) sends it with its first topology, so
    a core never keeps routers its agent does not know."""


class Reachable(NamedTuple):
    """Core -> agent: after a route computation that changed the set (or followed a
    TopologyReset), every router the core now has a route to (sorted ids). The routing protocol
    sends LSR/MAR only to these and its neighbours."""
    routers: list


class RemoteAddress(NamedTuple):
    """Agent -> core: router ``router`` gained (present) or lost a destination for the address
    key ``key`` (``M0orders``); ``hint``: its treatment hint 0..5, -1 if none."""
    key: str
    router: str
    present: bool
    hint: int


class LocalAddress(NamedTuple):
    """Core -> agent: the mobile address key ``key`` gained its first (present) or lost its
    last local destination; ``hint``: the treatment hint this router advertises (0..5)."""
    key: str
    present: bool
    hint: int


class PolicyEvent(NamedTuple):
    """A policy denial a worker decided alone, for the router-wide vhostStats/policy counters."""
    vhost: str   # "" if none
    kind: str    # connection | session | sender | receiver | maxMessageSize
    count: int


# ----------------------------------------------------------------------------------------------
# Streaming (cut-through) deliveries: a message that has not fully arrived is routed on its
# first bytes and its body follows in chunks (DESIGN.md "How a delivery travels", streaming)
# ----------------------------------------------------------------------------------------------
class StreamTransfer(NamedTuple):
    """Worker -> core: the start of an inbound delivery that has not fully arrived (its routing
    fields have): routed now, the rest follows as TransferChunk. Fields as RouterTransfer's
    (``router``: it came on an inter-router link; ``phase``/``ingress``/``trace`` are then the
    router annotations, else 0/None/[]); ``payload``: the message's first bytes."""
    dlv_id: int
    link_id: int
    to: Optional[str]
    settled: bool
    priority: int
    router: bool
    phase: int
    ingress: Optional[str]
    trace: list
    payload: Any


class TransferChunk(NamedTuple):
    """Worker -> core: more bytes of a StreamTransfer's message, untouched; ``last``: the message
    is complete; ``aborted``: the sender aborted it (or it broke maxMessageSize): no more come."""
    dlv_id: int
    last: bool
    aborted: bool
    payload: Any


class StreamDeliver(NamedTuple):
    """Core -> worker: start sending a delivery whose message is still arriving (``payload``:
    its bytes so far); the rest follows as DeliverChunk. On an inter-router link ``to_override``
    and ``phase`` are RouterDeliver's; on any other link they are None and -1."""
    dlv_id: int
    link_id: int
    settled: bool
    to_override: Optional[str]
    phase: int
    payload: Any


class DeliverChunk(NamedTuple):
    """Core -> worker: more bytes of a StreamDeliver's message (``last``: advance; ``aborted``:
    abort the outbound delivery, nothing more follows)."""
    dlv_id: int
    last: bool
    aborted: bool
    payload: Any


class StreamSent(NamedTuple):
    """Worker -> core: ``nbytes`` more bytes (as the core sent them) of the streaming outbound
    delivery ``dlv_id`` were handed to proton within the connection's byte budget."""
    dlv_id: int
    nbytes: int


class StreamAck(NamedTuple):
    """Core -> worker: ``nbytes`` more bytes of the streaming inbound delivery ``dlv_id`` have
    left the router's buffers (every copy took them, or they were dropped): the sender's
    connection may be read again (the per-delivery window, 1.x's Q2)."""
    dlv_id: int
    nbytes: int


# Bytes of one streaming delivery the router may hold between its sender's socket and its
# receivers' proton buffers (worker, core, IPC). Past it the sender's connection is not read.
STREAM_WINDOW = 1024 * 1024


# One table of codes: the order is the wire contract, append only.
MESSAGE_TYPES: tuple = (
    PeerHello, ConnOpened, ConnClosed, LinkAttach, LinkDetach, LinkFlow, Transfer, Disposition,
    SettleIn, LinkOpen, LinkRefuse, LinkCredit, Deliver, UpdateIn, SettleOut, Drained,
    CloseConnection, DetachLink, ChildStatus, CoreQuery, CoreState, ConfigChange, ConfigResult,
    ReloadRequest, ReloadResult, RouterTransfer, RouterDeliver, ControlIn, ControlSend,
    RouterLinkUp, RouterLinkDown, RouteUpdate, RemoteAddress, LocalAddress, PeerLost,
    PolicyEvent, LinkState, RouterGone, TopologyReset, Reachable, AttachOut, LinkAttached,
    LinkDrain, InDrained, SenderState, DeliverState,
    StreamTransfer, TransferChunk, StreamDeliver, DeliverChunk, StreamSent, StreamAck,
    LogQuery, LogReport, DeliverOrigin, LinkStall, LinkUnstalled, ConnectorStatus,
)
CODE_OF = {cls: code for code, cls in enumerate(MESSAGE_TYPES, start=1)}
TYPE_OF = {code: cls for cls, code in CODE_OF.items()}
_HAS_PAYLOAD = frozenset(cls for cls in MESSAGE_TYPES if cls._fields[-1:] == ("payload",))
# code -> (class, number of fields, carries a payload): one lookup per decoded item
_DECODE = {code: (cls, len(cls._fields), cls in _HAS_PAYLOAD) for code, cls in TYPE_OF.items()}
# class -> (code, carries a payload): one lookup per encoded item
_ENCODE = {cls: (code, cls in _HAS_PAYLOAD) for cls, code in CODE_OF.items()}
# The codec (common/ipccodec.py, compiled: common._ipccodec), bound to this schema's tables.
_CODEC = choose("common._ipccodec", "common.ipccodec").Codec(IPC_VERSION, _ENCODE, _DECODE,
                                                             IpcError)
# encode_frame(peer, messages) -> bytes: the one frame of a batch, for the hot paths that send
# it alone; decode_frame(frame) -> (peer, [message, ...]), payloads as memoryview slices of it.
encode_frame = _CODEC.encode
decode_frame = _CODEC.decode


def encode_batch(peer: int, messages: Iterable[tuple]) -> list:
    """Return the frames of one batch: a list of ONE frame (length of the header, the msgpack
    header, then the payloads back to back), for ``send_multipart``; :func:`encode_frame` is the
    frame itself, for the hot paths that send it alone."""
    return [encode_frame(peer, messages)]


def decode_batch(frames: list) -> tuple:
    """Parse the frames of one batch (a list of one frame) into ``(peer, [message, ...])``; raise
    IpcError if malformed. Payloads come back as zero-copy memoryview slices of the frame."""
    if len(frames) != 1:
        raise IpcError(f"a batch is one frame, not {len(frames)}")
    return decode_frame(frames[0])


GENERATION_SPAN = 1 << 40  # ids one incarnation of a peer can mint before the next one's range


def id_allocator(peer_index: int, peer_count: int, generation: int = 0) -> Callable[[], int]:
    """Router-wide unique ids without coordination: peer ``p`` of ``n`` hands out p+1, p+1+n, ...

    A restarted peer (``generation`` g > 0) starts at ``g * GENERATION_SPAN``, so no id of its
    dead predecessor that the core may still name is ever reused. The allocator is the
    ``__next__`` of an ``itertools.count``: a worker mints one per inbound delivery, and a C
    call costs less than a Python method's frame.
    """
    if not 0 <= peer_index < peer_count:
        raise ValueError("peer_index out of range")
    return itertools.count(generation * GENERATION_SPAN + peer_index + 1, peer_count).__next__
