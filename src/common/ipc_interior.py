"""IPC messages of interior mode: inter-router links (worker <-> core) and the routing
protocol (agent <-> core): router transfers, control messages, topology and addresses.

Part of the one IPC schema: their codes are in ``common.ipc.MESSAGE_TYPES``, which re-exports
them.

Must not import proton, zmq or anything from router_io/agent/supervisor/router_core.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional


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


class PolicyClose(NamedTuple):
    """Worker -> core: an accepted connection under vhost policy closed, with what it held;
    the core logs 1.19's POLICY line with its vhost's router-wide denial counts."""
    conn_id: int
    vhost: str
    host: str           # the connection's name (``127.0.0.1:45678``)
    n_sessions: int
    n_senders: int
    n_receivers: int
    n_connections: int  # the router's accepted connections after this one
