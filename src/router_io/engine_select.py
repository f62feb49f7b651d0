"""Choose the compiled or the pure-Python build of the worker's engine adapter.

The compiled module ``router_io._engine`` is ``router_io/engine.py`` itself compiled in Cython's
pure-Python mode with ``cython/_engine.pxd`` (per-message paths in C, proton-C called natively),
same public API. ``ROUTER_NO_EXTENSIONS=1`` forces the reference.
"""
from common.builds import choose


def get_engine_class() -> type:
    return choose("router_io._engine", "router_io.engine").WorkerEngine
