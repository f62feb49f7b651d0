"""Effects the routing-protocol engines hand back to their caller (the control plane).

Owns the frozen dataclasses every engine returns: :class:`Send` (a control message to put on the
wire), :class:`RoutingTable` (what the core must be told after a route computation),
:class:`RemoteAddressAdded` / :class:`RemoteAddressRemoved` (mobile addresses learned from other
routers) and :class:`Log`. Must not import proton, zmq, sockets, clocks or any engine module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Mapping, Optional, Union

__all__ = ["Send", "RoutingTable", "RemoteAddressAdded", "RemoteAddressRemoved", "Log",
           "Effect", "LOG_LEVELS"]

#: Log levels, lowest first (names as in the router's ``log`` entity).
LOG_LEVELS = ("trace", "debug", "info", "notice", "warning", "error", "critical")


@dataclass(frozen=True)
class Send:
    """A pre-settled control message: ``to`` is the ``properties.to`` address, ``body`` the
    amqp-value map, ``properties`` the application-properties map (``{"opcode": opcode}``, key
    typed as the 1.x part that sends this opcode types it).

    ``via_link`` is set only for HELLO, which goes out on one given control link; every other
    message is routed by its address (the core follows the next hop of ``R<id>`` / floods ``T``).
    ``message`` is the typed message the body was encoded from (handy for logs and tests).
    """

    to: str
    opcode: str
    body: Dict[Any, Any]
    via_link: Optional[Hashable] = None
    properties: Dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    message: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RoutingTable:
    """The result of a route computation, published when it differs from the previous one.

    ``next_hop``/``cost``/``valid_origins`` are keyed by every reachable router id;
    ``neighbours`` maps each neighbour router id to the control link it is reached over;
    ``index`` is the mask-bit index of every known router (0 is this router).
    """

    next_hop: Mapping[str, str]
    cost: Mapping[str, int]
    valid_origins: Mapping[str, List[str]]
    radius: int
    neighbours: Mapping[str, Hashable]
    index: Mapping[str, int]


@dataclass(frozen=True)
class RemoteAddressAdded:
    """Router ``router`` has a destination for the mobile address key ``key`` (``M0orders``).

    ``hint`` is the sender's treatment hint (0..5) or ``None`` when it sent none: the core uses its
    own configured distribution for the address if it has one, else the hint, else its default.
    """

    key: str
    router: str
    hint: Optional[int]


@dataclass(frozen=True)
class RemoteAddressRemoved:
    """Router ``router`` no longer has a destination for ``key``."""

    key: str
    router: str


@dataclass(frozen=True)
class Log:
    """A log line for the router's log module ``module`` (``ROUTER``, ``ROUTER_HELLO``,
    ``ROUTER_LS``, ``ROUTER_MA``) at ``level`` (one of :data:`LOG_LEVELS`)."""

    level: str
    module: str
    text: str


Effect = Union[Send, RoutingTable, RemoteAddressAdded, RemoteAddressRemoved, Log]
