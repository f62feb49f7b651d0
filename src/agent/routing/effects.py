"""Effects the routing-protocol engines hand back to their caller (the control plane).

Owns the frozen dataclasses every engine returns: :class:`Send` (a control message to put on the
wire), :class:`Topology` (what the core must be told after a topology change; it computes the
routes),
:class:`RemoteAddressAdded` / :class:`RemoteAddressRemoved` (mobile addresses learned from other
routers) and :class:`Log`. Must not import proton, zmq, sockets, clocks or any engine module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, Mapping, Optional, Tuple, Union

__all__ = ["Send", "Topology", "RouterState", "RemoteAddressAdded", "RemoteAddressRemoved", "Log",
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
class RouterState:
    """One router as the routing protocol knows it, for the core's route computation.

    ``instance``/``pv``: ``None`` until known; ``index``: its mask-bit index (0 is this router);
    ``ls_seq``/``peers``: the link state held (0 and ``{}``: none yet); ``conns``: for this
    router only, each neighbour router id -> the control link (the core's conn_id) it is reached
    over.
    """

    router: str
    instance: Optional[int]
    pv: Optional[int]
    index: int
    ls_seq: int
    peers: Mapping[str, int]
    conns: Mapping[str, Hashable]


@dataclass(frozen=True)
class Topology:
    """What changed in the topology since the last report (the core computes the routes).

    ``full``: the first report of this node table (a new agent): ``states`` is every known
    router, and the core forgets any other; else ``states`` are the routers that changed and
    ``gone`` the ids of the routers deleted since."""

    full: bool
    states: Tuple[RouterState, ...]
    gone: Tuple[str, ...]


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


Effect = Union[Send, Topology, RemoteAddressAdded, RemoteAddressRemoved, Log]
