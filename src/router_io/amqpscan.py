"""Forwarding-path message scanner: the one import point (selector) for both builds.

Exports the compiled ``router_io._amqpscan`` unless ``ROUTER_NO_EXTENSIONS=1`` is set or it is not
built, else the pure-Python reference ``router_io.amqpscan_py``. ``IMPLEMENTATION`` says which
("cython" or "python"). Both raise the same :class:`MessageFormatError` and return the same
:class:`ScanResult` type (from ``amqpscan_types``).

Callers import from here only. This module must not import proton, zmq or router_core/agent.
"""
from __future__ import annotations

import os

from router_io.amqpscan_types import KEEP, ROUTER_KEY_PREFIX, MessageFormatError, ScanResult

__all__ = ["scan", "rewrite_annotations", "ScanResult", "KEEP", "MessageFormatError",
           "ROUTER_KEY_PREFIX", "IMPLEMENTATION"]

IMPLEMENTATION: str
if os.environ.get("ROUTER_NO_EXTENSIONS") == "1":
    from router_io.amqpscan_py import rewrite_annotations, scan
    IMPLEMENTATION = "python"
else:
    try:
        from router_io._amqpscan import rewrite_annotations, scan
        IMPLEMENTATION = "cython"
    except ImportError:
        from router_io.amqpscan_py import rewrite_annotations, scan
        IMPLEMENTATION = "python"
