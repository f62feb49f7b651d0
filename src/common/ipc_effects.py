"""IPC messages from the core to a peer: effects (open, credit, deliver, settle, close).

Part of the one IPC schema: their codes are in ``common.ipc.MESSAGE_TYPES``, which re-exports
them.

Must not import proton, zmq or anything from router_io/agent/supervisor/router_core.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional


# ----------------------------------------------------------------------------------------------
# Core -> peer effects
# ----------------------------------------------------------------------------------------------
class LinkOpen(NamedTuple):
    """Answer an attach: open the link locally, with this terminus address (dynamic ones filled).

    With ``source``/``target``/``settle`` given (a link route mirrors the far end's answer), the
    local termini and settle modes are exactly these instead of copies of the peer's. To a
    link the router attached (AttachOut) as a link route's far side, with ``settle`` only: it
    is link-routed (its deliveries keep their tags, as the client's link's do)."""
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


class DeliverTag(NamedTuple):
    """The tag the next Deliver/StreamDeliver of this (core-numbered) delivery goes out with,
    instead of the 8-byte id: the client's tag of a link-routed delivery (see DeliveryTag)."""
    dlv_id: int
    tag: bytes


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
    """Detach one of our links toward its peer; ``condition`` "" for an orderly one.
    ``closed`` False: a detach that does not close the link (a link route passes on its
    partner's detach(closed=false), as 1.19 does)."""
    link_id: int
    condition: str
    description: str
    closed: bool = True
