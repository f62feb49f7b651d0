"""Choose the route-computation build: the compiled ``router_core._pathcomp`` or the reference.

Owns the selection only. ``ROUTER_NO_EXTENSIONS=1`` forces the pure-Python reference
``router_core.pathcomp``; a missing extension falls back to it. Both builds take
``(my_id, link_states)`` and return an equal :class:`~router_core.pathcomp.Routes`, raising the
same ``TypeError``/``ValueError`` for bad costs. Must not import zmq, proton, sockets or logging
handlers.
"""
from __future__ import annotations

from typing import Callable, Mapping

from common.builds import choose
from router_core.pathcomp import Routes

__all__ = ["get_path_computer", "Routes", "PathComputer"]

PathComputer = Callable[[str, Mapping[str, Mapping[str, int]]], Routes]


def get_path_computer() -> PathComputer:
    """Return the compiled ``compute_routes`` unless disabled or not built, else the reference."""
    return choose("router_core._pathcomp", "router_core.pathcomp").compute_routes
