"""Types shared by both builds of the forwarding-path message scanner.

Owns :class:`MessageFormatError`, :class:`ScanResult` and the :data:`KEEP` sentinel, so the
pure-Python reference (``amqpscan``) and the compiled module (``_amqpscan``) raise the same
exception class and return values that compare equal (they are the *same* classes).

This module must not import proton, zmq, the scanner builds themselves or any process
package: it is imported by the compiled module at load time.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional

__all__ = ["MessageFormatError", "ScanResult", "KEEP", "ROUTER_KEY_PREFIX"]

# Router-owned message-annotation keys all start with this (as AMQP symbols).
ROUTER_KEY_PREFIX = "x-opt-qd."


class MessageFormatError(ValueError):
    """Raw message bytes that are not a well-formed AMQP 1.0 message (truncated, bad
    constructor, sections out of order, wrong type where the spec fixes one, bad UTF-8).

    ``condition`` is the AMQP error condition a link should reject the delivery with.
    """

    condition = "amqp:decode-error"


class _Keep:
    """Type of :data:`KEEP`: "leave this router annotation as it is"."""

    _instance: Optional["_Keep"] = None

    def __new__(cls) -> "_Keep":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "KEEP"

    def __reduce__(self) -> str:
        return "KEEP"


KEEP = _Keep()


class ScanResult(NamedTuple):
    """What the forwarding path needs to know about one message, found without decoding it.

    Offsets are byte offsets into the scanned buffer.

    - ``to``: properties field 2 (``to``), or None.
    - ``priority``: header field 1, 4 when there is no header or the field is absent/null.
    - ``ma_to``, ``ma_phase``, ``ma_ingress``, ``ma_trace``: the values of ``x-opt-qd.to``,
      ``x-opt-qd.phase``, ``x-opt-qd.ingress`` and ``x-opt-qd.trace`` in the message-annotations
      section, or None when absent, null or of the wrong type (last occurrence wins).
    - ``ma_start``, ``ma_end``: the message-annotations section, descriptor included; when
      there is none both equal the offset where one belongs (after header and
      delivery-annotations, before anything else).
    - ``body_start``: offset of the first section that is neither header, delivery-annotations,
      message-annotations, properties nor application-properties (the body, or a footer when
      there is no body); ``len(buf)`` when there is no such section. Nothing from here on is
      validated.
    """

    to: Optional[str]
    priority: int
    ma_to: Optional[str]
    ma_phase: Optional[int]
    ma_ingress: Optional[str]
    ma_trace: Optional[List[str]]
    ma_start: int
    ma_end: int
    body_start: int
