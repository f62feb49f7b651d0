"""Choose the router core build: the compiled ``router_core._core`` or the pure-Python reference.

Through ``common.builds.choose`` (the one environment switch): ``ROUTER_NO_EXTENSIONS=1``
forces the pure build; a missing extension falls back to it. Must not import zmq, proton, sockets
or logging handlers.
"""
from common.builds import choose


def get_core_class() -> type:
    """Return ``router_core._core.RouterCore`` unless disabled or not built, else the reference."""
    return choose("router_core._core", "router_core.core").RouterCore
