"""IPC messages from a peer (a worker or the agent) to the core: commands.

Connections, links, transfers and dispositions as a worker sees them (PeerHello first). Part of
the one IPC schema: their codes are in ``common.ipc.MESSAGE_TYPES``, which re-exports them.

Must not import proton, zmq or anything from router_io/agent/supervisor/router_core.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional


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


class LinkLost(NamedTuple):
    """A link whose session the peer ended: no detach will come for it (1.19's QD_LOST). The
    core drops it as at a detach; a link-routed partner is detached with qd:routed-link-lost."""
    link_id: int


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


class DeliveryTag(NamedTuple):
    """The delivery tag the sender of a link-routed inbound delivery gave it, sent just before
    that delivery's Transfer/StreamTransfer: a link route hands the receiver the client's own
    tag (DeliverTag), as 1.19 does, where other links carry the router's."""
    dlv_id: int
    link_id: int
    tag: bytes


class SenderState(NamedTuple):
    """The sender of a link-routed inbound delivery gave it a state before settling (a
    transactional send's transactional-state, on the transfer or in a disposition); ``info``:
    ``{"data": the state's fields, AMQP-encoded}`` or None. The core passes it on
    (DeliverState) to the delivery it forwarded."""
    dlv_id: int
    state: int
    info: Optional[dict]
