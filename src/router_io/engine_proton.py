"""The worker engine's proton calls and constants: one binding for both builds.

Owns the names every other engine part uses to talk to proton: event and state numbers, the
per-message proton calls (``_pn_*``: cffi in the pure build under ``if not cython.compiled``,
inline C from cython/_engine.pxd compiled), hot pointers (``_key``/``_cdata``), the byte
budgets of a connection and of a streamed delivery, and proton's C strings as text.

Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py): plain functions,
``cython`` imported unconditionally, no ``from __future__`` import. Must not import zmq,
sockets or selectors, nor any other engine part.
"""

import struct
from typing import Any, Optional

import cython
from cproton_ffi import ffi, lib
from proton import symbol

from common.identity import PRODUCT, VERSION  # the open's product and version properties
from common import amqpscan_select as scanner


# the scanner's per-message calls as module globals: a compiled caller finds a global through
# a cached look-up, while ``scanner.scan`` asks the module for its attribute every time
_scan = scanner.scan
_has_annotations = scanner.has_annotations
_rewrite_annotations = scanner.rewrite_annotations

# ScanResult's fields by position (amqpscan_types.py): the per-message paths read a scan as a
# plain tuple through _fields (compiled: an item at a fixed offset, where ``scan.ma_to`` is a
# look-up of the NamedTuple's descriptor and a call of it, for each field on every message)
SCAN_TO, SCAN_PRIORITY, SCAN_MA_TO, SCAN_MA_PHASE, SCAN_MA_INGRESS, SCAN_MA_TRACE = range(6)

ANONYMOUS_RELAY = symbol("ANONYMOUS-RELAY")
# 1.19's connection capability: extra inter-router links for messages still arriving
# (router_core/streamlinks.py); offered and desired on every connection, as 1.19 does
STREAMING_LINKS = symbol("qd.streaming-links")
INTER_ROUTER = "inter-router"
EDGE = "edge"  # the role of an edge router's uplink and of an interior's edge listener
CAP_ROUTER = "qd.router"            # control links of an inter-router connection
CAP_ROUTER_DATA = "qd.router-data"  # data links of an inter-router connection
LINK_TYPES = {CAP_ROUTER: "router-control", CAP_ROUTER_DATA: "inter-router"}
PRIORITIES = 10


# proton event type numbers, looked up once
E_CONN_REMOTE_OPEN = lib.PN_CONNECTION_REMOTE_OPEN
E_CONN_REMOTE_CLOSE = lib.PN_CONNECTION_REMOTE_CLOSE
E_SESSION_REMOTE_OPEN = lib.PN_SESSION_REMOTE_OPEN
E_SESSION_REMOTE_CLOSE = lib.PN_SESSION_REMOTE_CLOSE
E_LINK_REMOTE_OPEN = lib.PN_LINK_REMOTE_OPEN
E_LINK_REMOTE_CLOSE = lib.PN_LINK_REMOTE_CLOSE
E_LINK_REMOTE_DETACH = lib.PN_LINK_REMOTE_DETACH
E_LINK_FLOW = lib.PN_LINK_FLOW
E_DELIVERY = lib.PN_DELIVERY
E_TRANSPORT_CLOSED = lib.PN_TRANSPORT_CLOSED
RARE_EVENTS = frozenset((E_CONN_REMOTE_OPEN, E_CONN_REMOTE_CLOSE, E_SESSION_REMOTE_OPEN,
                         E_SESSION_REMOTE_CLOSE, E_LINK_REMOTE_OPEN, E_LINK_REMOTE_CLOSE,
                         E_LINK_REMOTE_DETACH))
LOCAL_UNINIT = lib.PN_LOCAL_UNINIT
LOCAL_CLOSED = lib.PN_LOCAL_CLOSED
PN_NULL = ffi.NULL

_tag = struct.Struct(">Q").pack
_tuple_new = tuple.__new__

if not cython.compiled:
    # The proton calls of the per-message paths, pure build: cffi. Compiled, cython/_engine.pxd
    # declares every one of these names as an inline C function (same arguments, same result)
    # and Cython never sees this block. Pointers are "hot pointers" (see the module doc).
    _pn_collector_peek = lib.pn_collector_peek
    _pn_collector_pop = lib.pn_collector_pop
    _pn_event_type = lib.pn_event_type
    _pn_event_delivery = lib.pn_event_delivery
    _pn_event_link = lib.pn_event_link
    _pn_delivery_link = lib.pn_delivery_link
    _pn_delivery_partial = lib.pn_delivery_partial
    _pn_delivery_aborted = lib.pn_delivery_aborted
    _pn_delivery_settled = lib.pn_delivery_settled
    _pn_delivery_pending = lib.pn_delivery_pending
    _pn_delivery_settle = lib.pn_delivery_settle
    _pn_delivery_update = lib.pn_delivery_update
    _pn_delivery_remote_state = lib.pn_delivery_remote_state
    _pn_link_advance = lib.pn_link_advance
    _pn_link_get_drain = lib.pn_link_get_drain
    _pn_link_credit = lib.pn_link_credit
    _pn_link_drained = lib.pn_link_drained
    _pn_link_flow = lib.pn_link_flow
    _pn_transport_pending = lib.pn_transport_pending
    _pn_transport_capacity = lib.pn_transport_capacity
    _pn_transport_pop = lib.pn_transport_pop
    _pn_transport_closed = lib.pn_transport_closed

    _pn_link_current = lib.pn_link_current

    def _pn_delivery_tag_id(d_ptr: Any) -> Optional[int]:
        """The core's id a delivery of ours was tagged with (None: not an 8-byte tag)."""
        tag = lib.pn_delivery_tag(d_ptr)
        if tag.size != 8:
            return None
        return int.from_bytes(ffi.buffer(tag.start, 8), "big")

    def _pn_delivery_tagged(l_ptr: Any, dlv_id: int) -> Any:
        """pn_delivery() tagged with the core's id (8 bytes, big-endian)."""
        return lib.pn_delivery(l_ptr, (8, ffi.from_buffer(_tag(dlv_id))))

    def _pn_link_recv_message(l_ptr: Any, size: int) -> bytearray:
        """The ``size`` bytes of the link's current delivery, as a new bytearray."""
        payload = bytearray(size)
        if size:
            lib.pn_link_recv(l_ptr, ffi.from_buffer(payload), size)
        return payload

    def _pn_link_send_all(l_ptr: Any, payload: Any) -> None:
        """pn_link_send() of the whole buffer (bytes, bytearray or memoryview)."""
        lib.pn_link_send(l_ptr, ffi.from_buffer(payload), len(payload))

    def _pn_transport_push_from(t_ptr: Any, data: Any, size: int) -> None:
        """pn_transport_push() of the first ``size`` bytes of a buffer."""
        buf = ffi.from_buffer(data)
        if size < 0 or size > len(buf):
            raise ValueError(f"push of {size} bytes from a buffer of {len(buf)}")
        lib.pn_transport_push(t_ptr, buf, size)

    def _pn_transport_peek_into(t_ptr: Any, buf: Any, size: int) -> None:
        """pn_transport_peek() of ``size`` pending bytes into a writable buffer."""
        lib.pn_transport_peek(t_ptr, ffi.from_buffer(buf), size)

    def _key(ptr: Any) -> Any:
        """A cffi pointer as a hot pointer (a hot map key): the pointer itself here."""
        return ptr

    def _cdata(ctype: str, ptr: Any) -> Any:
        """A hot pointer as a cffi pointer of ``ctype``, for the cffi-based paths."""
        return ptr

    def _fields(cmd: Any) -> tuple:
        """An IPC NamedTuple's fields, to unpack (compiled: unpacked as a plain tuple)."""
        return cmd

    def _command(cls: type, fields: tuple) -> Any:
        """``cls(*fields)`` for an IPC NamedTuple, without its Python-level ``__new__``."""
        return _tuple_new(cls, fields)
else:
    _pn_bind(ffi, lib)  # noqa: F821 - compiled: the table of proton-C pointers (the .pxd)
PN_SASL_OK = 0  # pn_sasl_outcome(): NONE -1, OK 0, AUTH 1, SYS 2, PERM 3, TEMP 4

# Outgoing bytes a connection may have inside proton (handed to pn_link_send, not yet written to
# its socket). Deliveries beyond it wait in the connection's ``out_queue`` as one copy of their
# bytes and go to proton as the socket drains; a message larger than the budget goes in slices.
# Without it a receiver that grants much credit and stops reading makes proton hold every
# message (its delivery buffers and encoded frames grow by doubling: ~6x the bytes). While a
# connection has deliveries waiting, each of its links that queued one reports no more credit to
# the core ("capped"): the core keeps further deliveries at the address (they hold their senders'
# credit, so senders stall) instead of the worker holding as many as the receiver granted.
OUT_BUDGET = 512 * 1024
# Streaming (cut-through) deliveries: an inbound delivery still partial once this many bytes of
# it wait in proton is routed on its first bytes (its routing fields must be there: the sections
# before the body) and its body follows in chunks of at least STREAM_CHUNK bytes (the last may be
# shorter). Smaller messages go whole, as one Transfer. Per streaming delivery at most
# ipc.STREAM_WINDOW bytes are unacknowledged by the core; beyond it the sender's connection is not
# read (Q2) until the copies' workers have handed them to proton.
STREAM_START = 128 * 1024
STREAM_CHUNK = 64 * 1024
# out_queue entry kinds: a whole delivery; a part of a streaming one (no advance); its last part
KIND_WHOLE, KIND_PART, KIND_LAST = 0, 1, 2
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
OVERSIZE_DESCRIPTION = "Message size exceeded"
INVALID_FIELD = "amqp:invalid-field"
INTERNAL_ERROR = "amqp:internal-error"
NOT_ALLOWED = "amqp:not-allowed"  # the peer's frames in an order AMQP does not allow


def _text(cstr: Any) -> str:
    """A C string from proton (peer-controlled bytes) as text; never raises."""
    if cstr == PN_NULL:
        return ""
    return ffi.string(cstr).decode("utf-8", "replace")


def _utf8(cstr: Any) -> Optional[str]:
    """A C string from proton as text, None for NULL; ValueError if it is not UTF-8.

    proton's Python binding decodes strictly and raises UnicodeDecodeError; values a peer sends
    are read here instead, so a bad one is answered with amqp:invalid-field."""
    if cstr == PN_NULL:
        return None
    raw = ffi.string(cstr)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"not valid UTF-8: {raw[:64]!r}") from None


_pn_ssl_get_ssf = None


def _ssl_ssf(ssl: Any) -> int:
    """pn_ssl_get_ssf() (the cipher's strength in bits), which proton's Python binding lacks:
    called through ctypes on the same library (once per TLS connection, at its open)."""
    global _pn_ssl_get_ssf
    if _pn_ssl_get_ssf is None:
        import ctypes
        import cproton_ffi
        fn = ctypes.CDLL(cproton_ffi.__file__).pn_ssl_get_ssf
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p]
        _pn_ssl_get_ssf = fn
    return int(_pn_ssl_get_ssf(int(ffi.cast("uintptr_t", ssl._ssl))))


def _condition_text(cond: Any) -> str:
    """"name: description" of a proton condition (peer-controlled), "" if unset."""
    if cond == PN_NULL or not lib.pn_condition_is_set(cond):
        return ""
    name = _text(lib.pn_condition_get_name(cond))
    description = _text(lib.pn_condition_get_description(cond))
    return f"{name}: {description}" if description else name


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0
