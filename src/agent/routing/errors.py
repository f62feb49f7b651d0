"""The one error taxonomy of the routing-protocol package ``agent.routing``.

Owns :class:`RoutingError` and its subclasses; every module of the package raises only these.
Must not import anything from the router (no proton, zmq, sockets or clocks).
"""
from __future__ import annotations

__all__ = ["RoutingError", "ProtocolError", "LocalProtocolError"]


class RoutingError(Exception):
    """Base class of every error raised by ``agent.routing``."""


class ProtocolError(RoutingError):
    """A control message from another router is malformed (the *remote* side broke the protocol).

    The facade catches it, logs it and drops the message; a router never stops for one.
    """


class LocalProtocolError(RoutingError):
    """This router was asked to do something the protocol does not allow (a bug in the caller)."""
