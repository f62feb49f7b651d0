"""Choose the compiled or the pure-Python build of the worker's engine adapter.

The compiled module ``router_io._engine`` (``cython/_engine.pyx``) includes ``router_io/engine.py``
verbatim for the rare paths and replaces ``WorkerEngine`` (and ``Connection``'s byte I/O) with a
cdef class that calls proton-C natively on the per-message paths, same public API.
``ROUTER_NO_EXTENSIONS=1`` forces the reference.
"""
from router_core.builds import choose


def get_engine_class() -> type:
    return choose("router_io._engine", "router_io.engine").WorkerEngine
