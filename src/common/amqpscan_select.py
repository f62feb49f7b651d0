"""Forwarding-path message scanner: the one import point (selector) for both builds.

Exports the compiled ``common._amqpscan`` unless ``ROUTER_NO_EXTENSIONS=1`` is set or it is not
built, else the pure-Python reference ``common.amqpscan``. ``IMPLEMENTATION`` says which
("cython" or "python"). Both raise the same :class:`MessageFormatError` and return the same
:class:`ScanResult` type (from ``amqpscan_types``).

Callers import from here only. Must not import proton, zmq or any process package (common.builds
only).
"""
from __future__ import annotations

from common.builds import choose
from common.amqpscan_types import KEEP, ROUTER_KEY_PREFIX, MessageFormatError, ScanResult

__all__ = ["scan", "has_annotations", "rewrite_annotations", "subject", "ScanResult", "KEEP",
           "MessageFormatError", "ROUTER_KEY_PREFIX", "IMPLEMENTATION"]

_impl = choose("common._amqpscan", "common.amqpscan")
scan = _impl.scan
has_annotations = _impl.has_annotations
rewrite_annotations = _impl.rewrite_annotations
subject = _impl.subject
IMPLEMENTATION: str = "cython" if _impl.__name__.endswith("._amqpscan") else "python"
