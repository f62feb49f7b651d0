"""The AMQP side of an I/O worker: proton's engine driven through its raw C bindings.

Owns every proton object of one worker (transports, connections, sessions, links, deliveries)
and translates between proton events and the IPC messages of ``common.ipc``:

* proton events (a remote attach, a complete delivery, a disposition, a flow) become commands in
  ``self.outbox`` for the core; a complete delivery on an inter-router link (``Link.router``, set
  at attach) becomes a RouterTransfer carrying its router annotations, any other a Transfer;
* effects from the core (open this link, grant credit, send these bytes, settle that delivery)
  are applied to the engine with :meth:`WorkerEngine.apply`.

It owns no sockets: the worker loop feeds received bytes in with :meth:`Connection.push` and takes
bytes to write with :meth:`Connection.output`. That keeps this module testable by pumping bytes
between a proton client engine and this one in memory.

Hot path discipline: per-delivery work calls proton-C directly (no proton wrapper objects),
message bytes are read once and handed on untouched; only anonymous links pay for a scan of the
message's routing fields.

One source, two builds. This file is the pure-Python reference AND the source of the compiled
build ``router_io._engine``: setup.py hands Cython a copy of it next to ``cython/_engine.pxd``
(pure-Python mode, as for the router core). The .pxd makes ``WorkerEngine`` a final cdef class
whose per-message methods are cdef methods with C-typed locals, and declares the proton calls of
those paths (the ``_pn_*`` names below) as inline C functions calling proton-C through pointers
taken from cffi at import: proton is bundled inside the cffi module, there is nothing to link.
Only the block under ``if not cython.compiled`` differs between the builds: it binds the same
names to cffi for the pure build, and Cython drops it when compiling. Pointers on those paths
("hot pointers") are cffi pointers in the pure build and native addresses (ints) compiled:
:func:`_key` turns a cffi pointer from the rest of the code into one, :func:`_cdata` turns one
back. So: plain classes, ``cython`` imported unconditionally (a runtime dependency: its pure
module says ``compiled`` is False), no ``from __future__`` import; keep the .pxd in step.

Must not import zmq, sockets or selectors.

Why this module is over 500 lines: it is one compiled extension whose one class
(``WorkerEngine``) holds every per-delivery path; spreading it over modules would turn the calls
between those paths into Python calls across modules, or needs one extension per part with cdef
classes shared through .pxd files, which the core's measurements showed no gain for.
"""

import struct
import time
import traceback
import uuid
from collections import deque
from typing import Any, Callable, Optional

import cproton
import cython
import proton
from cproton_ffi import ffi, lib
from proton import symbol

from common import ipc
from common.ipc import (
    DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED, STREAM_WINDOW,
    Deliver, DeliverChunk, Disposition, Drained, LinkCredit, LinkFlow, RouterDeliver,
    RouterTransfer, SettleIn, SettleOut, StreamAck, StreamDeliver, StreamSent, StreamTransfer,
    Transfer, TransferChunk, UpdateIn)
from common.heap import HeapTrimmer
from router_io import amqpscan_select as scanner, frameguard, policy as vpolicy
from router_io.amqpscan import user_id as _message_user_id
from common import security

# the scanner's per-message calls as module globals: a compiled caller finds a global through
# a cached look-up, while ``scanner.scan`` asks the module for its attribute every time
_scan = scanner.scan
_has_annotations = scanner.has_annotations
_rewrite_annotations = scanner.rewrite_annotations

PRODUCT = "qpid-dispatch-router"
VERSION = "1.19.0"
ANONYMOUS_RELAY = symbol("ANONYMOUS-RELAY")
# 1.19's connection capability: extra inter-router links for messages still arriving
# (router_core/streamlinks.py); offered and desired on every connection, as 1.19 does
STREAMING_LINKS = symbol("qd.streaming-links")
INTER_ROUTER = "inter-router"
CAP_ROUTER = "qd.router"            # control links of an inter-router connection
CAP_ROUTER_DATA = "qd.router-data"  # data links of an inter-router connection
LINK_TYPES = {CAP_ROUTER: "router-control", CAP_ROUTER_DATA: "inter-router"}
PRIORITIES = 10


def _encoded_data(data: Any) -> bytes:
    """The AMQP encoding of a pn_data_t (b"" when it is empty), e.g. MODIFIED's
    message-annotations, carried opaquely through the core in a Disposition's ``info``."""
    if data == ffi.NULL:
        return b""
    lib.pn_data_rewind(data)
    size = lib.pn_data_encoded_size(data)
    if size <= 0:
        return b""
    buf = ffi.new("char[]", size)
    written = lib.pn_data_encode(data, buf, size)
    lib.pn_data_rewind(data)
    return bytes(ffi.buffer(buf, written)) if written > 0 else b""


def _put_condition(cond: Any, name: str, description: str) -> None:
    cproton.pn_condition_set_name(cond, name)
    if description:
        cproton.pn_condition_set_description(cond, description)


def _decode_data(data: Any, encoded: bytes) -> None:
    """Fill a pn_data_t from what :func:`_encoded_data` gave (bad bytes leave it empty)."""
    lib.pn_data_clear(data)
    if lib.pn_data_decode(data, encoded, len(encoded)) < 0:
        lib.pn_data_clear(data)

def _read_terminus(t_ptr: Any) -> Optional[dict]:
    """A proton terminus as an IPC terminus dict (ipc.TERMINUS_FIELDS); None when it is null
    (type unspecified). The address is peer-controlled text: bad UTF-8 raises ValueError."""
    kind = lib.pn_terminus_get_type(t_ptr)
    if kind == lib.PN_UNSPECIFIED:
        return None
    terminus = {"type": int(kind), "address": _utf8(lib.pn_terminus_get_address(t_ptr)),
            "dynamic": bool(lib.pn_terminus_is_dynamic(t_ptr)),
            "durable": int(lib.pn_terminus_get_durability(t_ptr)),
            "expiry": int(lib.pn_terminus_get_expiry_policy(t_ptr)),
            "timeout": int(lib.pn_terminus_get_timeout(t_ptr)),
            "distribution_mode": int(lib.pn_terminus_get_distribution_mode(t_ptr)),
            "capabilities": _encoded_data(lib.pn_terminus_capabilities(t_ptr)) or None,
            "properties": _encoded_data(lib.pn_terminus_properties(t_ptr)) or None,
            "filter": _encoded_data(lib.pn_terminus_filter(t_ptr)) or None,
            "outcomes": _encoded_data(lib.pn_terminus_outcomes(t_ptr)) or None}
    if terminus["dynamic"] and terminus["properties"]:
        dnp = _dnp_address(terminus["properties"])
        if dnp is not None:  # what 1.19 link-routes a dynamic terminus by
            terminus["dnp_address"] = dnp
    return terminus


DNP_ADDRESS = "x-opt-qd.address"


def _dnp_address(encoded: bytes) -> Optional[str]:
    """The ``x-opt-qd.address`` of dynamic-node-properties when it is the map's first key (as
    1.19 reads it), else None."""
    data = proton.Data()
    try:
        data.decode(encoded)
        data.rewind()
        if data.next() != proton.Data.MAP or not data.enter():
            return None
        if data.next() != proton.Data.SYMBOL or data.get_symbol() != DNP_ADDRESS:
            return None
        if data.next() != proton.Data.STRING:
            return None
        return data.get_string() or None
    except (proton.DataException, UnicodeDecodeError):
        return None


def _write_terminus(t_ptr: Any, terminus: Optional[dict]) -> None:
    """Set a local proton terminus from an IPC terminus dict (None: a null terminus)."""
    if terminus is None:
        lib.pn_terminus_set_type(t_ptr, lib.PN_UNSPECIFIED)
        return
    lib.pn_terminus_set_type(t_ptr, terminus.get("type") or lib.PN_UNSPECIFIED)
    address = terminus.get("address")
    lib.pn_terminus_set_address(t_ptr, ffi.NULL if address is None else address.encode())
    lib.pn_terminus_set_dynamic(t_ptr, bool(terminus.get("dynamic")))
    lib.pn_terminus_set_durability(t_ptr, terminus.get("durable") or 0)
    lib.pn_terminus_set_expiry_policy(t_ptr, terminus.get("expiry") or 0)
    lib.pn_terminus_set_timeout(t_ptr, terminus.get("timeout") or 0)
    lib.pn_terminus_set_distribution_mode(t_ptr, terminus.get("distribution_mode") or 0)
    for field, getter in (("capabilities", lib.pn_terminus_capabilities),
                          ("properties", lib.pn_terminus_properties),
                          ("filter", lib.pn_terminus_filter),
                          ("outcomes", lib.pn_terminus_outcomes)):
        _decode_data(getter(t_ptr), terminus.get(field) or b"")


def _settle_modes(l_ptr: Any) -> list:
    """The peer's [snd-settle-mode, rcv-settle-mode] of a link."""
    return [int(lib.pn_link_remote_snd_settle_mode(l_ptr)),
            int(lib.pn_link_remote_rcv_settle_mode(l_ptr))]


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


def _plain_properties(value: Any, depth: int = 0) -> Any:
    """Connection open properties as msgpack-able plain values: str keys, builtin numbers,
    strings, bytes, lists and maps (proton's described or exotic types as their text)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, dict):
        if depth > 8:
            return str(value)
        return {str(k): _plain_properties(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_properties(v, depth + 1) for v in value] if depth <= 8 else str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes):
        return bytes(value)
    return str(value)


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


class Link:
    """Worker-side state of one link."""

    __slots__ = ("link_id", "ptr", "key", "conn", "direction", "anonymous", "sent", "flow",
                 "open", "local", "link_type", "router", "queued", "drain_after", "max_size",
                 "check", "capped", "awaiting", "draining", "routed", "settle_for_receiver",
                 "stream", "out_stream", "waiting")

    def __init__(self, link_id: int, ptr: Any, conn: "Connection", direction: int,
                 anonymous: bool) -> None:
        self.link_id = link_id
        self.ptr = ptr          # the proton link (cffi), for the cffi-based paths
        self.key = _key(ptr)    # the same as a hot pointer (the per-message paths, link_ptrs)
        self.conn = conn
        self.direction = direction
        self.anonymous = anonymous
        self.sent = 0            # outbound: deliveries given to proton + credit drained
        self.queued = 0          # outbound: deliveries waiting in the connection's out_queue
        self.drain_after = False  # outbound: a Drained waits for the queued ones to go first
        # outbound: the credit reported to the core stops at what is queued (see enqueue)
        self.capped = False
        self.max_size = 0        # inbound: maxMessageSize in octets (0: no limit)
        # inbound: each message needs a policy check (user-id proxy, anonymous targets) or a
        # tenant prefix on its 'to' (multiTenant): one attribute test per delivery otherwise
        self.check = False
        self.flow = (-1, False)  # outbound: last (limit, drain) reported to the core
        self.open = False
        self.local = False       # created by this router (inter-router links), not attached to
        self.awaiting = False    # created for the core's AttachOut, the peer's attach not yet in
        self.draining = False    # inbound: the core asked the sender to drain (LinkDrain)
        self.routed = False      # a client's link-routed link (LinkOpen with the far end's
        # termini): its senders' delivery states go to the core (SenderState)
        self.link_type = "endpoint"
        # an inter-router link (control or data) on an inter-router connection: its deliveries
        # go to the core as RouterTransfer (set once at attach; the per-delivery check)
        self.router = False
        # outbound: the receiver attached with snd-settle-mode settled: every delivery goes
        # pre-settled, an unsettled one settled by the router on its behalf as ACCEPTED (1.19)
        self.settle_for_receiver = False
        # inbound: a large partial delivery may be streamed (not on control links, nor where
        # each message is checked whole by policy: set at attach)
        self.stream = False
        # outbound: the streaming delivery being sent (an OutStream; one at a time per link)
        # and what waits behind it ((dlv_id, settled, payload) or an OutStream)
        self.out_stream = None
        self.waiting: deque = deque()


class InStream:
    """An inbound delivery being streamed: bytes read from proton go to the core as chunks."""

    __slots__ = ("dlv_id", "link", "d", "d_key", "started", "head", "unacked", "total",
                 "settled", "settle", "blocked", "discard")

    def __init__(self, link: Link, d: Any, d_key: Any) -> None:
        self.dlv_id = None
        self.link = link
        self.d = d               # the proton delivery (cffi)
        self.d_key = d_key       # the same as a hot pointer (in_streams, in_ids)
        self.started = False     # the core has its StreamTransfer
        self.head = bytearray()  # before the start: the bytes so far (routing fields pending)
        self.unacked = 0         # bytes handed to the core it has not acknowledged (Q2)
        self.total = 0           # bytes read (maxMessageSize)
        self.settled = False     # pre-settled by the sender
        self.settle = False      # the core settled it: settled locally once complete
        self.blocked = False     # counted in its connection's q2 (not read)
        self.discard = None      # (state, condition, description): read and drop, then that


class OutStream:
    """An outbound delivery whose message is still arriving: its parts go to proton in order."""

    __slots__ = ("dlv_id", "link", "settled", "d", "parts", "started", "settle", "state")

    def __init__(self, dlv_id: Any, link: Link, settled: bool) -> None:
        self.dlv_id = dlv_id
        self.link = link
        self.settled = settled
        self.d = None            # the proton delivery (cffi), once its first bytes went
        self.parts: deque = deque()  # (bytes, ack, kind) before it may start on its link
        self.started = False
        self.settle = False      # settled by the sender or receiver meanwhile: settle at the end
        self.state = 0


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _capabilities(terminus: Any) -> set:
    """The capability symbols of a terminus (one symbol or an array of them), as text."""
    data = terminus.capabilities
    caps: set = set()
    if data is None:
        return caps
    data.rewind()
    while data.next():
        try:
            obj = data.get_object()
        except Exception:  # noqa: BLE001 - an odd capability never blocks an attach
            continue
        if isinstance(obj, proton.Array):
            caps.update(str(e) for e in obj.elements)
        elif isinstance(obj, (list, tuple)):
            caps.update(str(e) for e in obj)
        elif obj is not None:
            caps.add(str(obj))
    return caps


class Connection:
    """One AMQP connection: a proton transport and connection bound together, server side."""

    def __init__(self, engine: "WorkerEngine", conn_id: int, settings: dict, host: str,
                 direction: str) -> None:
        self.engine = engine
        self.conn_id = conn_id
        self.settings = settings
        self.host = host
        self.direction = direction
        self.role = settings.get("role", "normal")
        self.link_capacity = int(settings.get("linkCapacity") or 250)
        self.cost = max(1, int(settings.get("cost") or 1))  # inter-router: negotiated at open
        strip = str(settings.get("stripAnnotations") or "both")
        # Router annotations (x-opt-qd.*) from/to this connection: stripped on the way in
        # (ignored, removed) and/or on the way out; "no" adds ingress and trace on egress.
        # Inter-router and edge connections never strip: the annotations are what routers
        # route by (1.19 ignores stripAnnotations on both).
        router_conn = self.role == INTER_ROUTER or self.role == "edge"
        self.strip_in = not router_conn and strip in ("in", "both")
        self.strip_out = not router_conn and strip in ("out", "both")
        self.transport = proton.Transport(proton.Transport.SERVER if direction == "in"
                                          else proton.Transport.CLIENT)
        self.transport.max_frame_size = int(settings.get("maxFrameSize") or 16384)
        idle = int(settings.get("idleTimeoutSeconds", 16) or 0)
        if idle:
            self.transport.idle_timeout = float(idle)
        # TLS (proton's SSL layer) first, then SASL (Cyrus), as Qpid Dispatch 1.19 sets them up
        self.ssl: Optional[proton.SSL] = None
        self.ssl_profile: Optional[dict] = None  # the sslProfile's attributes (uidFormat...)
        ssl_error = ""
        try:
            engine.setup_ssl(self, settings, direction)
        except Exception as exc:  # noqa: BLE001 - this connection is refused, nothing else
            ssl_error = f"TLS set-up failed: {exc}"
        self.sasl = self.transport.sasl()
        mechs = settings.get("saslMechanisms")
        if direction == "in":
            sasl_dir, sasl_name = engine.sasl_config
            if sasl_dir:
                self.sasl.config_path(str(sasl_dir))
            self.sasl.config_name(str(sasl_name or "qdrouterd"))
            # authenticatePeer: Cyrus offers no ANONYMOUS then, unless saslMechanisms lists it
            # (anonymous access asked for explicitly, as 1.19 lets it in); requireSsl implies
            # requireEncryption
            self.transport.require_auth(bool(settings.get("authenticatePeer")) and "ANONYMOUS"
                                        not in security.mechanisms(mechs))
            self.transport.require_encryption(bool(settings.get("requireEncryption")
                                                   or settings.get("requireSsl")))
        if mechs:
            self.sasl.allowed_mechs(str(mechs))
        self.sasl.allow_insecure_mechs = True  # 1.19 allows PLAIN without TLS (hard-wired)
        self.connection = proton.Connection()
        if direction == "out":  # before bind: proton's SASL client reads them from there
            if settings.get("saslUsername"):
                self.connection.user = str(settings["saslUsername"])
            if settings.get("saslPassword"):
                try:  # env:, file:, pass: or the text (checked when configured)
                    self.connection.password = security.resolve_password(
                        settings["saslPassword"], allow_literal=False)
                except ValueError as exc:
                    engine.log("error", f"[C{conn_id}] saslPassword of connector "
                                        f"{settings.get('name')}: {exc}")
        self.connection.collect(engine.collector)
        self.transport.bind(self.connection)
        if engine.frame_trace is not None:  # PROTOCOL trace: from the first (SASL) frame on
            self.trace_frames(engine.frame_trace)
        self.t_ptr = self.transport._impl
        self.t_key = _key(self.t_ptr)  # the transport as a hot pointer (the byte I/O below)
        self.c_ptr = self.connection._impl
        self.links: dict = {}  # link ptr -> Link
        self.reported_open = False
        self.closed = False
        # outbound byte budget (see OUT_BUDGET): bytes proton may still take before deliveries
        # wait in out_queue as [link, dlv_id, settled, payload, offset, d_ptr, state]
        self.out_budget = OUT_BUDGET
        self.out_room = OUT_BUDGET
        self.out_queue: deque = deque()
        # Q2: streaming deliveries of this connection past their window; while > 0 its socket
        # is not read (the worker watches engine.q2_changed)
        self.q2 = 0
        # maxMessageSize of this connection (policy, listener, vhost), set when it opens
        self.max_message_size = 0
        # vhost policy (router_io/policy.py): the user group's settings when the connection is
        # policed, its vhost, user and remote address; multiTenant: the address space prefix
        self.policy: Optional[vpolicy.GroupSettings] = None
        self.policy_vhost = ""
        # the open's hostname, which 1.19's Begin/Attach/message policy lines call the vhost
        self.policy_hostname = ""
        self.policy_user = ""
        self.policy_rhost = ""
        self.n_sessions = 0
        self.tenant = ""
        self.forced_trace: Optional[Callable[[int, str], None]] = None  # enableProtocolTrace
        self.failed = False  # closed by this router after an internal error (logged once)
        self.router_session = None  # the session of the links the core attaches (AttachOut)
        # An accepted connection's bytes pass the SASL guard until the client's SASL exchange
        # is over (frameguard.py: proton crashes on some sequences); then push is the class's
        # own again and established connections pay nothing.
        self.guard: Optional[frameguard.SaslGuard] = None
        if direction == "in":
            self.guard = frameguard.SaslGuard()
            self.push = self._guarded_push
        if ssl_error:
            self.refuse(INTERNAL_ERROR, ssl_error)

    def trace_frames(self, trace: Optional[Callable[[int, str], None]]) -> None:
        """PROTOCOL trace: proton's text of every frame (``0 -> @attach(18) [...]``) goes to
        ``trace(conn_id, text)``, as 1.19's transport tracer; None turns it off."""
        if trace is None:
            self.transport.trace(proton.Transport.TRACE_OFF)
            return
        conn_id = self.conn_id
        self.transport.trace(proton.Transport.TRACE_FRM)
        self.transport.tracer = lambda transport, text: trace(conn_id, text)

    # --- bytes in and out (the worker loop calls these) ---------------------------------------
    def capacity(self) -> int:
        return _pn_transport_capacity(self.t_key)

    def push(self, data: bytes | bytearray | memoryview, size: int) -> None:
        if size:
            _pn_transport_push_from(self.t_key, data, size)

    def _guarded_push(self, data: bytes | bytearray | memoryview, size: int) -> None:
        guard = self.guard
        if not size or guard is None:
            return
        try:
            checked = guard.feed(memoryview(data)[:size])
        except frameguard.FrameError as exc:
            self.guard = None  # nothing more from this client reaches proton
            self.refuse(exc.condition, exc.description)
            return
        if guard.done:
            self.guard = None
            del self.push  # the class's push from now on
        push = type(self).push
        sasl = lib.pn_sasl(self.t_ptr) if guard.frames else PN_NULL
        for unit in frameguard.units(checked):  # one header or frame at a time (see units())
            pos, end = 0, len(unit)
            while pos < end:
                cap = self.capacity()
                if cap <= 0:
                    return
                n = min(cap, end - pos)
                push(self, unit[pos:pos + n], n)
                pos += n
            if sasl != PN_NULL and lib.pn_sasl_outcome(sasl) > PN_SASL_OK:
                # authentication failed: proton answers with its outcome and closes; anything
                # more the client sent must never reach it (proton 0.40 crashes on some)
                self.guard = None
                self.push = self._ignore_push
                lib.pn_transport_pending(self.t_ptr)  # encodes the sasl-outcome first
                lib.pn_transport_close_tail(self.t_ptr)
                return

    def _ignore_push(self, data: bytes | bytearray | memoryview, size: int) -> None:
        """Input after a failed SASL exchange: dropped (the transport is closing)."""

    def refuse(self, condition: str, description: str) -> None:
        """Close the transport at once (no AMQP close possible or wanted) with a condition."""
        self.engine.log("warning", f"[C{self.conn_id}] closing connection from {self.host}: "
                                   f"{condition}: {description}")
        cond = lib.pn_transport_condition(self.t_ptr)
        if not lib.pn_condition_is_set(cond):
            cproton.pn_condition_set_name(cond, condition)
            cproton.pn_condition_set_description(cond, description)
        lib.pn_transport_close_tail(self.t_ptr)
        lib.pn_transport_close_head(self.t_ptr)
        self.engine.dirty.add(self)

    def close_input(self) -> None:
        lib.pn_transport_close_tail(self.t_ptr)

    def close_output(self) -> None:
        lib.pn_transport_close_head(self.t_ptr)

    def pending(self) -> int:
        return _pn_transport_pending(self.t_key)

    def output(self, buf: bytearray) -> int:
        """Copy up to len(buf) pending output bytes into ``buf``; return how many (or -1 at EOS)."""
        n = _pn_transport_pending(self.t_key)
        if n <= 0:
            return n
        n = min(n, len(buf))
        _pn_transport_peek_into(self.t_key, buf, n)
        return n

    def consumed(self, n: int) -> None:
        _pn_transport_pop(self.t_key, n)
        room = self.out_room + n
        self.out_room = room if room < self.out_budget else self.out_budget
        if self.out_queue and room * 2 >= self.out_budget:
            self.engine.refill(self)

    def tick(self, now_ms: int) -> int:
        """Drive idle-timeout heartbeats; return the next deadline in ms (0 = none)."""
        return lib.pn_transport_tick(self.t_ptr, now_ms)

    def is_closed(self) -> bool:
        return bool(_pn_transport_closed(self.t_key))

    def error_text(self) -> str:
        # raw: proton's descriptions can quote peer bytes (e.g. an unknown SASL mechanism)
        return _condition_text(lib.pn_transport_condition(self.t_ptr))


class WorkerEngine:
    """All proton state of one worker, turning events into commands and effects into actions."""

    def __init__(self, router_id: str, peer_index: int, peer_count: int,
                 log: Callable[[str, str], None] | None = None, generation: int = 0) -> None:
        self.router_id = router_id
        self.node_tag = f"0/{router_id}"  # how this router names itself in ingress/trace
        self.peer_index = peer_index
        self.collector = proton.Collector()
        self._coll = self.collector._impl
        self._coll_key = _key(self._coll)
        # a restarted worker (generation > 0) mints ids the core has never seen
        self.new_id = ipc.id_allocator(peer_index, peer_count, generation)
        self.outbox: list = []
        self.log = log or (lambda level, text: None)
        self.conns: dict = {}       # conn ptr -> Connection
        self.conns_by_id: dict = {}
        self.links: dict = {}       # link id -> Link
        # the hot maps: their pointers are hot pointers (_key)
        self.link_ptrs: dict = {}   # link ptr -> Link
        self.in_dlvs: dict = {}     # inbound delivery id -> (dlv ptr, Link)
        self.in_ids: dict = {}      # dlv ptr -> inbound delivery id
        # core delivery id -> (dlv ptr, Link); a delivery's id is its tag (_pn_delivery_tagged)
        self.out_dlvs: dict = {}
        self.queued_out: dict = {}  # core delivery id -> its out_queue entry (unsettled only)
        # DeliverState for a delivery not handed to proton yet (out_queue, or behind a stream
        # on its link): core delivery id -> (state, info), set when its proton delivery is made
        self.pending_states: dict = {}
        self.oversize: dict = {}    # inbound dlv address -> True: over maxMessageSize, discarded
        # streaming deliveries: inbound by proton delivery (hot pointer) and by id, outbound by
        # the core's id; connections whose Q2 state changed (the worker re-arms their polling)
        self.in_streams: dict = {}
        self.in_stream_ids: dict = {}
        self.out_streams: dict = {}
        self.q2_changed: set = set()
        self.policy: dict = {}      # the policy entity (maxMessageSize, enableVhostPolicy...)
        self.vhosts: list = []      # vhost entities
        self.policy_db = vpolicy.PolicyDb()  # compiled policy + vhosts (router_io/policy.py)
        # the POLICY log module's lines (the worker binds it; 1.19's wording)
        self.policy_log: Callable[[str, str], None] = lambda level, text: None
        # PROTOCOL trace on: called with (conn id, proton's text of a frame); None: off, and
        # proton formats nothing (set_frame_trace)
        self.frame_trace: Optional[Callable[[int, str], None]] = None
        self.ssl_profiles: dict = {}  # sslProfile name -> attributes (config file, management)
        self.sasl_config: tuple = (None, "qdrouterd")  # router saslConfigDir, saslConfigName
        self._ssl_domains: dict = {}  # (profile, role, verify...) -> (SSLDomain, name map)
        self.dirty: set = set()     # connections that may have output to write
        self.heap = HeapTrimmer()   # freed heap memory goes back to the OS (release_memory)
        self._trim_check = 0.0
        self._trim_countdown = 0    # process_events calls until the next look at the clock
        self._recv_buf = bytearray(65536)
        self._handlers = {
            ipc.LinkOpen: self._fx_link_open, ipc.LinkRefuse: self._fx_link_refuse,
            ipc.LinkCredit: self._fx_credit, ipc.Deliver: self._fx_deliver,
            ipc.RouterDeliver: self._fx_router_deliver,
            ipc.UpdateIn: self._fx_update_in, ipc.SettleOut: self._fx_settle_out,
            ipc.Drained: self._fx_drained, ipc.CloseConnection: self._fx_close_connection,
            ipc.DetachLink: self._fx_detach_link, ipc.AttachOut: self._attach_out,
            ipc.LinkDrain: self._fx_link_drain, ipc.DeliverState: self._fx_deliver_state,
            ipc.LinkStall: self._fx_link_stall,
            StreamDeliver: self._fx_stream_deliver, DeliverChunk: self._fx_deliver_chunk,
            StreamAck: self._fx_stream_ack,
        }

    # --- connections --------------------------------------------------------------------------
    def new_connection(self, settings: dict, host: str, direction: str = "in") -> Connection:
        """A connection accepted on a listener ("in") or made by a connector ("out").

        The connecting side speaks first: an outgoing connection is opened at once, with the
        SASL credentials of its connector.
        """
        conn = Connection(self, self.new_id(), settings, host, direction)
        self.conns[conn.c_ptr] = conn
        self.conns_by_id[conn.conn_id] = conn
        if direction == "out":
            pc = conn.connection
            pc.hostname = str(settings.get("host") or host.rsplit(":", 1)[0])
            self._open_local(conn)
            self.dirty.add(conn)
        return conn

    def _open_local(self, conn: Connection) -> None:
        pc = conn.connection
        pc.container = self.router_id
        pc.offered_capabilities = [ANONYMOUS_RELAY, STREAMING_LINKS]
        pc.desired_capabilities = [ANONYMOUS_RELAY, STREAMING_LINKS]
        props = {symbol("product"): PRODUCT, symbol("version"): VERSION,
                 symbol("qd.conn-id"): conn.conn_id}
        if conn.role == INTER_ROUTER:
            props[symbol("qd.annotations-version")] = 1
            local_cost = max(1, int(conn.settings.get("cost") or 1))
            if local_cost > 1:
                props[symbol("qd.inter-router-cost")] = local_cost
        pc.properties = props
        pc.open()

    def drop_connection(self, conn: Connection) -> None:
        """The socket is gone: forget the connection and tell the core (once)."""
        if conn.closed:
            return
        conn.closed = True
        self.conns.pop(conn.c_ptr, None)
        self.conns_by_id.pop(conn.conn_id, None)
        self.dirty.discard(conn)
        if conn.reported_open:  # first: the core must hear of it whatever happens below
            self.outbox.append(ipc.ConnClosed(conn.conn_id, f"{INTERNAL_ERROR}: {conn.failed}"
                                              if conn.failed else conn.error_text()))
        for link in list(conn.links.values()):
            self._forget_link(link)
        lib.pn_connection_collect(conn.c_ptr, PN_NULL)
        conn.transport.unbind()
        conn.out_queue = deque()
        # Let proton free the connection now (its sessions, links and pool of delivery objects,
        # which proton keeps at their peak count for reuse), even while something still holds
        # this Connection; the transport stays (the worker may still ask for error_text()).
        conn.connection = None
        # Break the Connection <-> Link cycle: without it every closed connection (its proton
        # transport, buffers and all) waits for a full GC pass, which in a busy worker comes
        # rarely, so RSS grows with connection churn.
        conn.links = {}

    def release_memory(self, now: float) -> None:
        """Once a second: give the heap memory freed by closed connections, released
        messages... back to the OS (common.heap). Called by process_events."""
        self._trim_check = now + self.heap.interval
        self.heap.maybe_trim(now)

    # --- TLS and SASL set-up (once per connection; see common/security.py for the rules) -------
    def set_security(self, router: Optional[dict], ssl_profiles: Optional[list]) -> None:
        """The router's saslConfigDir/saslConfigName and the configured sslProfiles."""
        router = router or {}
        self.sasl_config = (router.get("saslConfigDir"),
                            router.get("saslConfigName") or "qdrouterd")
        self.ssl_profiles = {str(p.get("name")): dict(p) for p in ssl_profiles or []}
        self._ssl_domains = {}

    def set_ssl_profile(self, name: str, attributes: Optional[dict]) -> None:
        """An sslProfile created (attributes) or deleted (None) by management."""
        if attributes is None:
            self.ssl_profiles.pop(name, None)
        else:
            self.ssl_profiles[name] = dict(attributes)
        self._ssl_domains = {k: v for k, v in self._ssl_domains.items() if k[0] != name}

    def setup_ssl(self, conn: Connection, settings: dict, direction: str) -> None:
        """Put proton's SSL layer on ``conn``'s transport when its listener/connector names an
        sslProfile. Listeners accept TLS and plaintext alike unless requireSsl (1.19);
        client certificates are demanded when saslMechanisms lists EXTERNAL."""
        name = settings.get("sslProfile")
        if not name:
            return
        profile = settings.get("sslProfileAttributes") or self.ssl_profiles.get(str(name))
        if profile is None:
            raise RuntimeError(f"sslProfile '{name}' is not configured")
        external = "EXTERNAL" in security.mechanisms(settings.get("saslMechanisms"))
        verify_name = direction == "out" and settings.get("verifyHostname", True) is not False
        key = (str(name), direction, external, verify_name, id(profile))
        entry = self._ssl_domains.get(key)
        if entry is None:
            entry = self._ssl_domain(profile, direction, external, verify_name)
            self._ssl_domains[key] = entry
        domain, names = entry
        conn.ssl_profile = {**profile, "_names": names}
        conn.ssl = proton.SSL(conn.transport, domain)
        if direction == "out":
            conn.ssl.peer_hostname = str(settings.get("host") or "localhost")

    @staticmethod
    def _ssl_domain(profile: dict, direction: str, external: bool, verify_name: bool) -> tuple:
        mode = proton.SSLDomain.MODE_SERVER if direction == "in" else proton.SSLDomain.MODE_CLIENT
        domain = proton.SSLDomain(mode)
        where = f"sslProfile '{profile.get('name')}'"
        ca = profile.get("caCertFile")
        try:
            if ca:
                domain.set_trusted_ca_db(str(ca))
            if profile.get("certFile"):
                domain.set_credentials(str(profile["certFile"]),
                                       str(profile.get("privateKeyFile") or ""),
                                       security.profile_password(profile))
            if direction == "in":
                if external:  # client certificates verified against caCertFile
                    domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER, str(ca))
            else:  # a connector always verifies the server; its name too unless told not to
                domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER_NAME if verify_name
                                               else proton.SSLDomain.VERIFY_PEER,
                                               str(ca) if ca else None)
        except (proton.SSLException, ValueError) as exc:
            raise RuntimeError(f"{where}: {exc}") from None
        if profile.get("ciphers") and cproton.pn_ssl_domain_set_ciphers(
                domain._domain, str(profile["ciphers"])):
            raise RuntimeError(f"{where}: cannot set ciphers '{profile['ciphers']}'")
        if profile.get("protocols") and cproton.pn_ssl_domain_set_protocols(
                domain._domain, str(profile["protocols"])):
            raise RuntimeError(f"{where}: cannot set protocols '{profile['protocols']}'")
        names = None
        if profile.get("uidNameMappingFile"):
            try:
                names = security.load_name_mapping(str(profile["uidNameMappingFile"]))
            except ValueError as exc:
                raise RuntimeError(f"{where}: {exc}") from None
        return domain, names

    def _security_info(self, conn: Connection) -> list:
        t_ptr = conn.t_ptr
        info = [conn.ssl is not None, bool(lib.pn_transport_is_encrypted(t_ptr)), None, None, 0,
                bool(lib.pn_transport_is_authenticated(t_ptr))]
        ssl = conn.ssl
        if ssl is not None:
            try:
                info[2] = ssl.protocol_name() or None
                info[3] = ssl.cipher_name() or None
                info[4] = _ssl_ssf(ssl) if info[2] else 0
            except Exception:  # noqa: BLE001 - a plaintext client on a TLS listener
                pass
        return info

    def _cert_user(self, conn: Connection) -> str:
        """The user of an EXTERNAL connection: uidFormat over the client certificate (then
        uidNameMappingFile), else proton's (the certificate subject)."""
        profile = conn.ssl_profile or {}
        fmt = profile.get("uidFormat")
        if not fmt:
            return ""
        ssl = conn.ssl
        fields = {"c": proton.SSL.CERT_COUNTRY_NAME, "s": proton.SSL.CERT_STATE_OR_PROVINCE,
                  "l": proton.SSL.CERT_CITY_OR_LOCALITY,
                  "o": proton.SSL.CERT_ORGANIZATION_NAME,
                  "u": proton.SSL.CERT_ORGANIZATION_UNIT, "n": proton.SSL.CERT_COMMON_NAME}
        hashes = {"1": proton.SSL.SHA1, "2": proton.SSL.SHA256, "5": proton.SSL.SHA512}
        uid = security.cert_uid(str(fmt),
                                lambda f: ssl.get_cert_subject_subfield(fields[f]),
                                lambda f: ssl.get_cert_fingerprint(129, hashes[f]))
        names = profile.get("_names")
        if uid and names:
            uid = names.get(uid, uid)
        return uid or ""

    def set_frame_trace(self, trace: Optional[Callable[[int, str], None]]) -> None:
        """PROTOCOL trace on (``trace(conn_id, text)`` per frame) or off, for the connections
        open now and those made later (one that management traces stays traced)."""
        self.frame_trace = trace
        for conn in list(self.conns.values()):
            conn.trace_frames(trace or conn.forced_trace)

    def trace_connection(self, conn_id: int, on: bool,
                         trace: Callable[[int, str], None]) -> None:
        """Management's enableProtocolTrace of one connection: on, its frames go to ``trace``
        whatever PROTOCOL's level; off, none (as 1.19 turns the transport's trace off)."""
        conn = self.conns_by_id.get(conn_id)
        if conn is None:
            return
        conn.forced_trace = trace if on else None
        conn.trace_frames(conn.forced_trace)

    def set_policy(self, policy: Optional[dict], vhosts: Optional[list] = None) -> None:
        """The ``policy`` and ``vhost`` entities of the configuration (for maxMessageSize)."""
        self.policy = dict(policy or {})
        self.vhosts = list(vhosts or [])
        self.policy_db = vpolicy.PolicyDb(self.policy, self.vhosts)

    def set_vhost(self, op: str, attrs: dict) -> None:
        """A vhost created, updated or deleted by management (PolicyError if refused).
        Connections already open keep the settings they opened with, as in 1.19."""
        name = str(attrs.get("hostname") or attrs.get("name") or "")
        if op == "delete":
            self.policy_db.remove(name)
            self.vhosts = [v for v in self.vhosts if str(v.get("hostname")) != name]
            return
        self.policy_db.add(vpolicy.Vhost(attrs))
        self.vhosts = [v for v in self.vhosts if str(v.get("hostname")) != name] + [dict(attrs)]

    def max_message_size(self, conn: Connection, user: str, hostname: str) -> int:
        """maxMessageSize for an accepted connection, as Qpid Dispatch 1.19 resolves it: the
        policy's router-wide value (0: no limit), replaced by the listener's if it sets one;
        with ``enableVhostPolicy``, by the vhost's (the open's hostname, else the default
        vhost) and then by the user group's (the group listing the user, else ``$default``)."""
        if conn.direction != "in" or conn.role not in ("normal", "route-container"):
            return 0
        size = _int(self.policy.get("maxMessageSize"))
        size = _int(conn.settings.get("maxMessageSize")) or size
        if conn.policy is not None:  # 1.19: the group's, else the vhost's, else the policy's
            vhost = self.policy_db.vhosts.get(conn.policy_vhost)
            if vhost is not None:
                if conn.policy.max_message_size is not None:
                    return conn.policy.max_message_size
                if vhost.max_message_size is not None:
                    return vhost.max_message_size
            return size
        if not self.policy.get("enableVhostPolicy") or not self.vhosts:
            return size
        by_name = {str(v.get("hostname") or v.get("name") or ""): v for v in self.vhosts}
        vhost = by_name.get(hostname or "")
        if vhost is None:
            vhost = by_name.get(str(self.policy.get("defaultVhost", "$default") or ""))
        if vhost is None:
            return size
        size = _int(vhost.get("maxMessageSize")) or size
        groups = vhost.get("groups") or {}
        chosen = None
        for settings in groups.values():
            users = settings.get("users") if isinstance(settings, dict) else None
            names = users.split(",") if isinstance(users, str) else list(users or [])
            if user in [str(n).strip() for n in names]:
                chosen = settings
                break
        if chosen is None:
            chosen = groups.get("$default")
        if isinstance(chosen, dict):
            size = _int(chosen.get("maxMessageSize")) or size
        return size

    # --- events -> commands -------------------------------------------------------------------
    def process_events(self) -> None:
        """Drain the collector, turning every event into commands / local actions.

        Connections are marked dirty where their state can change (input read, effects
        applied, timers), not per event: that keeps the per-event cost to a few C calls.
        """
        self._trim_countdown -= 1
        if self._trim_countdown <= 0:  # a clock read every 256 calls, not every call
            self._trim_countdown = 256
            now = time.monotonic()
            if now >= self._trim_check:
                self.release_memory(now)
        coll = self._coll_key
        while True:
            ev = _pn_collector_peek(coll)
            if not ev:
                return
            etype = _pn_event_type(ev)
            try:  # one connection's failure never escapes (zero cost unless raised)
                if etype == E_DELIVERY:
                    self._on_delivery(_pn_event_delivery(ev))
                elif etype == E_LINK_FLOW:
                    self._on_flow(_pn_event_link(ev))
                elif etype in RARE_EVENTS:
                    self._rare_event(etype, _cdata("pn_event_t *", ev))
            except Exception as exc:  # noqa: BLE001 - isolate the connection, keep the worker
                self.event_failed(_cdata("pn_event_t *", ev), exc)
            _pn_collector_pop(coll)

    def _rare_event(self, etype: int, ev: Any) -> None:
        """Lifecycle events (open/close of connections, sessions, links), through cffi."""
        if etype == E_LINK_REMOTE_OPEN:
            self._on_link_open(lib.pn_event_link(ev))
        elif etype == E_LINK_REMOTE_CLOSE or etype == E_LINK_REMOTE_DETACH:
            self._on_link_close(lib.pn_event_link(ev), etype == E_LINK_REMOTE_CLOSE)
        elif etype == E_SESSION_REMOTE_OPEN:
            self._on_session_open(lib.pn_event_session(ev))
        elif etype == E_SESSION_REMOTE_CLOSE:
            self._on_session_close(lib.pn_event_session(ev))
        elif etype == E_CONN_REMOTE_OPEN:
            self._on_conn_open(lib.pn_event_connection(ev))
        elif etype == E_CONN_REMOTE_CLOSE:
            c = lib.pn_event_connection(ev)
            if not lib.pn_connection_state(c) & LOCAL_CLOSED:
                lib.pn_connection_close(c)

    def _on_session_open(self, ssn: Any) -> None:
        if not lib.pn_session_state(ssn) & LOCAL_UNINIT:
            return
        conn = self.conns.get(lib.pn_session_connection(ssn))
        settings = conn.policy if conn is not None else None
        if settings is not None:
            if settings.max_sessions and conn.n_sessions >= settings.max_sessions:
                self.policy_log("info", f"[C{conn.conn_id}] DENY AMQP Begin Session due to session "
                                        f"limit. user: {conn.policy_user}, rhost: "
                                        f"{conn.policy_rhost}, vhost: {conn.policy_hostname}")
                self.outbox.append(ipc.PolicyEvent(conn.policy_vhost, "session", 1))
                self._set_condition(lib.pn_session_condition(ssn),
                                    vpolicy.RESOURCE_LIMIT_EXCEEDED, vpolicy.SESSION_DISALLOWED)
                lib.pn_session_open(ssn)
                lib.pn_session_close(ssn)
                self.dirty.add(conn)
                return
            conn.n_sessions += 1
            if settings.max_session_window:
                lib.pn_session_set_incoming_capacity(ssn, settings.max_session_window)
        lib.pn_session_open(ssn)

    def _on_session_close(self, ssn: Any) -> None:
        if lib.pn_session_state(ssn) & LOCAL_CLOSED:
            return  # refused by policy (or closed by us): not counted
        conn = self.conns.get(lib.pn_session_connection(ssn))
        if conn is not None and conn.policy is not None and conn.n_sessions > 0:
            conn.n_sessions -= 1
        lib.pn_session_close(ssn)

    def _peer_user(self, conn: Connection) -> tuple:
        """(SASL mechanism or "", user) of an opened connection, as 1.19 names the user:
        the transport's user (the SASL user; "anonymous" for a peer that did no SASL at all),
        or the certificate's for EXTERNAL."""
        mech = _text(lib.pn_sasl_get_mech(lib.pn_sasl(conn.t_ptr)))
        user = _text(lib.pn_transport_get_user(conn.t_ptr)) or ("anonymous" if mech == "ANONYMOUS"
                                                               else "")
        if mech == "EXTERNAL" and getattr(conn, "ssl", None) is not None:
            user = self._cert_user(conn) or user
        return mech, user

    def _policy_open(self, conn: Connection, c_ptr: Any, user: str) -> bool:
        """Vhost policy at an accepted connection's open (before this router's open goes out,
        so max-frame-size and channel-max follow the user group) for its ``user``
        (_peer_user). False: refused here (amqp:resource-limit-exceeded, as 1.19). The
        connection counts are the core's."""
        db = self.policy_db
        hostname = _text(lib.pn_connection_remote_hostname(c_ptr))
        rhost = vpolicy.remote_ip(conn.host)
        conn.policy_user, conn.policy_rhost = user, rhost
        conn.policy_hostname = hostname or "(null)"  # 1.19 prints a missing one as C does
        wanted = str(conn.settings.get("policyVhost") or "") or hostname
        vhost, group, settings, logs = db.lookup_user(user, rhost, wanted)
        for level, text in logs:
            self.policy_log(level, text)
        if settings is None:
            self.outbox.append(ipc.PolicyEvent(vhost.name if vhost is not None else "",
                                               "connection", 1))
            self._refuse_connection(conn, vpolicy.RESOURCE_LIMIT_EXCEEDED,
                                    vpolicy.CONNECTION_DISALLOWED)
            return False
        conn.policy = settings
        conn.policy_vhost = vhost.name
        if settings.max_frame:
            lib.pn_transport_set_max_frame(conn.t_ptr, settings.max_frame)
        if settings.max_sessions:
            lib.pn_transport_set_channel_max(conn.t_ptr, settings.max_sessions - 1)
        if conn.settings.get("multiTenant"):  # as 1.19: the open's hostname when that is the
            # vhost found, else the vhost's name (an alias, policyVhost, the default vhost)
            conn.tenant = hostname if vhost.name == hostname and hostname else vhost.name
        return True

    def _policy_info(self, conn: Connection) -> Optional[list]:
        """ConnOpened.policy: what the core counts this connection against (None: nothing)."""
        if conn.direction != "in":
            return None
        db = self.policy_db
        settings = conn.policy
        if settings is None:
            return [db.max_connections, None, conn.policy_user, vpolicy.remote_ip(conn.host),
                    0, 0, 0]
        vhost = db.vhosts.get(conn.policy_vhost)
        vmax, umax, hmax = ((vhost.max_connections, vhost.max_per_user, vhost.max_per_host)
                            if vhost is not None else (65535, 65535, 65535))
        if settings.max_conn_user is not None:
            umax = settings.max_conn_user
        if settings.max_conn_host is not None:
            hmax = settings.max_conn_host
        return [db.max_connections, conn.policy_vhost, conn.policy_user, conn.policy_rhost,
                vmax, umax, hmax]

    def event_failed(self, ev: Any, exc: BaseException) -> None:
        """Handling one proton event raised: close its connection (amqp:internal-error)."""
        conn = self.conns.get(lib.pn_event_connection(ev)) if ev else None
        if conn is None:
            self.log("error", "internal error handling an event of no known connection: "
                              + "".join(traceback.format_exception(exc)).rstrip())
            return
        self.fail_connection(conn, exc)

    def effect_failed(self, effect: tuple, exc: BaseException) -> None:
        """Applying one effect from the core raised: close the connection it was for."""
        conn = None
        link = self.links.get(getattr(effect, "link_id", None))
        if link is not None:
            conn = link.conn
        elif hasattr(effect, "conn_id"):
            conn = self.conns_by_id.get(effect.conn_id)
        elif hasattr(effect, "dlv_id"):
            entry = (self.in_dlvs if type(effect) is ipc.UpdateIn else self.out_dlvs).get(
                effect.dlv_id)
            conn = entry[1].conn if entry is not None else None
        if conn is None:
            self.log("error", f"internal error applying {type(effect).__name__} of no known "
                     "connection: " + "".join(traceback.format_exception(exc)).rstrip())
            return
        self.fail_connection(conn, exc)

    def fail_connection(self, conn: Connection, exc: BaseException) -> None:
        """Close ``conn`` with amqp:internal-error after ``exc``; the traceback is logged once.

        Its remaining input is ignored; its socket closes once the close frame is written, and
        drop_connection then tells the core (ConnClosed), which settles what it held."""
        if conn.failed or conn.closed:
            return
        conn.failed = f"{type(exc).__name__}: {exc}"[:200]
        self.log("error", f"[C{conn.conn_id}] internal error, closing the connection: "
                 + "".join(traceback.format_exception(exc)).rstrip())
        try:
            c_ptr = conn.c_ptr
            if lib.pn_connection_state(c_ptr) & LOCAL_UNINIT:
                lib.pn_connection_open(c_ptr)
            self._set_condition(lib.pn_connection_condition(c_ptr), INTERNAL_ERROR,
                                "internal error in the router")
            lib.pn_connection_close(c_ptr)
            lib.pn_transport_pending(conn.t_ptr)  # encodes the close frame now
        finally:  # ignore the rest of its input: the transport ends once its output is out
            lib.pn_transport_close_tail(conn.t_ptr)
            self.dirty.add(conn)

    def _on_conn_open(self, c_ptr: Any) -> None:
        conn = self.conns.get(c_ptr)
        if conn is None or conn.reported_open:
            return
        pc = conn.connection
        try:
            container = _utf8(lib.pn_connection_remote_container(c_ptr)) or ""
        except ValueError as exc:
            self._refuse_connection(conn, INVALID_FIELD, f"container-id {exc}")
            return
        mech, user = self._peer_user(conn)  # SASL (or TLS) is done before the peer's open
        if (self.policy_db.enabled and conn.direction == "in"
                and conn.role in ("normal", "route-container")):
            if not self._policy_open(conn, c_ptr, user):
                return
        elif conn.settings.get("multiTenant") and conn.direction == "in":
            conn.tenant = _text(lib.pn_connection_remote_hostname(c_ptr))
        if lib.pn_connection_state(c_ptr) & LOCAL_UNINIT:
            self._open_local(conn)
        conn.reported_open = True
        # what management shows (isEncrypted, sslProto, sslCipher, sslSsf, ssl,
        # isAuthenticated): [has TLS, encrypted, protocol, cipher, ssf, authenticated]
        security_info = self._security_info(conn)
        # the peer's open properties ride along (7th item) for management's connection
        # 'properties', as plain values with string keys (1.19 shows symbol keys as strings)
        try:
            security_info.append(_plain_properties(pc.remote_properties))
        except Exception:  # noqa: BLE001 - properties proton cannot decode: show none
            security_info.append({})
        # (8th item) whether management requests from this connection may change a
        # connection's adminStatus (its policy group's allowAdminStatusUpdate, as 1.19)
        security_info.append(conn.policy.allowAdminStatusUpdate if conn.policy is not None
                             else True)
        # 9th: may this connection create connection-scoped link routes (vhost policy's
        # allowDynamicLinkRoutes; management reads it, 403 when not, as 1.19)
        security_info.append(True if conn.policy is None
                             else bool(getattr(conn.policy, "allowDynamicLinkRoutes", True)))
        # 10th: the vhost of a multiTenant listener's connection (its address space: the
        # matched vhost's name, or the open's hostname), shown in 1.19's Connection Opened
        security_info.append(conn.tenant)
        conn.max_message_size = self.max_message_size(
            conn, user, _text(lib.pn_connection_remote_hostname(c_ptr)))
        inter_router = conn.role == INTER_ROUTER
        streaming_links = False
        if inter_router:  # the connection's cost: max(mine, the peer's)
            try:
                offered = pc.remote_offered_capabilities or ()
                if isinstance(offered, proton.Array):
                    offered = offered.elements
                elif not isinstance(offered, (list, tuple)):
                    offered = (offered,)  # one symbol
                streaming_links = any(str(cap) == STREAMING_LINKS for cap in offered)
            except Exception:  # noqa: BLE001 - undecodable capabilities: none then
                pass
            try:
                remote = pc.remote_properties or {}
            except Exception:  # noqa: BLE001 - undecodable properties: none then
                remote = {}
            for key, value in remote.items():
                if str(key) == "qd.inter-router-cost":
                    try:
                        conn.cost = max(conn.cost, min(int(value), 2 ** 31 - 1))
                    except (TypeError, ValueError):
                        pass
        self.outbox.append(ipc.ConnOpened(
            conn.conn_id, conn.role, conn.direction, conn.host, container,
            conn.settings.get("name", ""), user, mech,
            security_info, conn.link_capacity, conn.cost, self._policy_info(conn),
            streaming_links))
        if inter_router and conn.direction == "out":
            self._open_router_links(conn)

    def _refuse_connection(self, conn: Connection, condition: str, description: str) -> None:
        """Answer a peer's open with open + close(condition); the core never hears of it."""
        self.log("warning", f"[C{conn.conn_id}] refusing connection from {conn.host}: "
                            f"{condition}: {description}")
        c_ptr = conn.c_ptr
        if lib.pn_connection_state(c_ptr) & LOCAL_UNINIT:
            lib.pn_connection_open(c_ptr)
        self._set_condition(lib.pn_connection_condition(c_ptr), condition, description)
        lib.pn_connection_close(c_ptr)
        lib.pn_transport_pending(conn.t_ptr)  # encodes the open and close frames now
        lib.pn_transport_close_tail(conn.t_ptr)
        self.dirty.add(conn)

    def _open_router_links(self, conn: Connection) -> None:
        """The connecting side of an inter-router connection creates every link on it, on one
        session: the two control links (capability qd.router, no addresses), then an incoming
        and an outgoing data link (qd.router-data) per priority 0..9, in ascending priority.
        Each is registered like an attached link: the core learns it from a LinkAttach and its
        LinkOpen answer is a no-op here (the link is already open locally)."""
        ssn = conn.connection.session()
        ssn.open()
        plan = [(ipc.DIR_IN, CAP_ROUTER), (ipc.DIR_OUT, CAP_ROUTER)]
        for _priority in range(PRIORITIES):
            plan.append((ipc.DIR_IN, CAP_ROUTER_DATA))
            plan.append((ipc.DIR_OUT, CAP_ROUTER_DATA))
        for direction, cap in plan:
            name = "qdlink." + uuid.uuid4().hex[:16]
            plink = ssn.sender(name) if direction == ipc.DIR_OUT else ssn.receiver(name)
            for terminus in (plink.source, plink.target):
                terminus.capabilities.put_symbol(symbol(cap))
            plink.open()
            l_ptr = plink._impl
            link = Link(self.new_id(), l_ptr, conn, direction,
                        anonymous=direction == ipc.DIR_IN)
            link.local = True
            link.open = True
            link.link_type = LINK_TYPES[cap]
            link.router = True
            link.stream = direction == ipc.DIR_IN and cap == CAP_ROUTER_DATA
            conn.links[l_ptr] = link
            self.links[link.link_id] = link
            self.link_ptrs[link.key] = link
            self.outbox.append(ipc.LinkAttach(link.link_id, conn.conn_id, direction, name, None,
                                              False, False, conn.link_capacity, link.link_type))
        self.dirty.add(conn)

    def _on_link_open(self, l_ptr: Any) -> None:
        if not lib.pn_link_state(l_ptr) & LOCAL_UNINIT:
            link = self.link_ptrs.get(_key(l_ptr))
            if link is not None and link.awaiting:
                self._on_attach_answer(link)
            return
        conn = self.conns.get(lib.pn_session_connection(lib.pn_link_session(l_ptr)))
        if conn is None:
            return
        if conn.failed:
            return
        plink = proton.Link.wrap(l_ptr)
        if plink.is_receiver:  # the client sends to us
            direction, terminus = ipc.DIR_IN, plink.remote_target
        else:
            direction, terminus = ipc.DIR_OUT, plink.remote_source
        what = "link name"
        try:  # peer-controlled text: not UTF-8 -> the attach is refused
            name = _utf8(lib.pn_link_name(l_ptr)) or ""
            what = "address"
            address = _utf8(lib.pn_terminus_get_address(terminus._impl))
            source = _read_terminus(lib.pn_link_remote_source(l_ptr))
            target = _read_terminus(lib.pn_link_remote_target(l_ptr))
        except ValueError as exc:
            self._refuse_link(l_ptr, conn, INVALID_FIELD, f"{what} {exc}")
            return
        if conn.policy is not None and not self._policy_link(l_ptr, conn, plink, direction,
                                                             address):
            return
        if conn.tenant and address and not terminus.dynamic:
            address = f"{conn.tenant}/{address}"  # multiTenant: the vhost's address space
        link = Link(self.new_id(), l_ptr, conn, direction,
                    anonymous=(direction == ipc.DIR_IN and address is None and not terminus.dynamic))
        if direction == ipc.DIR_IN and (conn.tenant and link.anonymous or conn.policy is not None
                                        and (link.anonymous
                                             or not conn.policy.allowUserIdProxy)):
            link.check = True
        if direction == ipc.DIR_IN and conn.max_message_size:
            link.max_size = conn.max_message_size
            lib.pn_link_set_max_message_size(l_ptr, conn.max_message_size)
        caps = _capabilities(plink.remote_source) | _capabilities(plink.remote_target)
        if caps:  # qd.router -> router-control, qd.router-data -> inter-router
            for cap, link_type in LINK_TYPES.items():
                if cap in caps:
                    link.link_type = link_type
                    break
            # elsewhere the core refuses router links: they never carry deliveries
            link.router = link.link_type != "endpoint" and conn.role == INTER_ROUTER
        link.stream = (direction == ipc.DIR_IN and not link.check
                       and link.link_type != "router-control")
        conn.links[l_ptr] = link
        self.links[link.link_id] = link
        self.link_ptrs[link.key] = link
        presettled = plink.remote_snd_settle_mode == proton.Link.SND_SETTLED
        link.settle_for_receiver = presettled and direction == DIR_OUT
        self.outbox.append(ipc.LinkAttach(link.link_id, conn.conn_id, direction, name,
                                          address, bool(terminus.dynamic), presettled,
                                          conn.link_capacity, link.link_type, source, target,
                                          _settle_modes(l_ptr)))

    def _attach_out(self, fx: ipc.AttachOut) -> None:
        """The core attaches a link on one of our connections (an auto-link, the far side of a
        link route): create it on the connection's router session, open it, and tell the core
        the peer's answer when its attach arrives (LinkAttached)."""
        conn = self.conns_by_id.get(fx.conn_id)
        if conn is None or conn.failed or conn.closed:
            # gone before the effect arrived: the core hears of the connection's close
            return
        ssn = conn.router_session
        if ssn is None:
            ssn = conn.router_session = conn.connection.session()
            ssn.open()
        plink = ssn.sender(fx.name) if fx.direction == DIR_OUT else ssn.receiver(fx.name)
        l_ptr = plink._impl
        _write_terminus(lib.pn_link_source(l_ptr), fx.source)
        _write_terminus(lib.pn_link_target(l_ptr), fx.target)
        lib.pn_link_set_snd_settle_mode(l_ptr, fx.settle[0])
        lib.pn_link_set_rcv_settle_mode(l_ptr, fx.settle[1])
        target = fx.target or {}
        link = Link(fx.link_id, l_ptr, conn, fx.direction,
                    anonymous=fx.direction != DIR_OUT and target.get("address") is None
                    and not target.get("dynamic"))
        link.local = True
        link.awaiting = True
        if conn.role == INTER_ROUTER and CAP_ROUTER_DATA in _capabilities(plink.target):
            link.link_type = LINK_TYPES[CAP_ROUTER_DATA]  # a streaming link (streamlinks.py)
            link.router = True
        # what a broker sends on an auto-link or on a link route's far side is streamed as
        # what a client sends (no policy checks whole messages on links the router attached)
        link.stream = fx.direction != DIR_OUT
        if fx.direction != DIR_OUT and conn.max_message_size:
            link.max_size = conn.max_message_size
            lib.pn_link_set_max_message_size(l_ptr, conn.max_message_size)
        conn.links[l_ptr] = link
        self.links[link.link_id] = link
        self.link_ptrs[link.key] = link
        lib.pn_link_open(l_ptr)
        self.dirty.add(conn)

    def _on_attach_answer(self, link: Link) -> None:
        """The peer's attach for a link the core asked for (AttachOut)."""
        link.awaiting = False
        link.open = True
        l_ptr = link.ptr
        try:
            source = _read_terminus(lib.pn_link_remote_source(l_ptr))
            target = _read_terminus(lib.pn_link_remote_target(l_ptr))
        except ValueError as exc:  # a bad address in the answer: detach, the core hears it
            self._set_condition(lib.pn_link_condition(l_ptr), INVALID_FIELD, f"address {exc}")
            self._on_link_close(l_ptr, True)
            return
        self.outbox.append(ipc.LinkAttached(link.link_id, source, target, _settle_modes(l_ptr)))
        if link.direction == DIR_OUT:
            self._on_flow(link.key)  # credit may have come with the attach

    def _policy_link(self, l_ptr: Any, conn: Connection, plink: Any, direction: int,
                     address: Optional[str]) -> bool:
        """Vhost policy at a link attach (1.19's checks and log lines); False: detached here
        with amqp:unauthorized-access (or resource-limit-exceeded for a count)."""
        settings = conn.policy
        who = (f"for user '{conn.policy_user}', rhost '{conn.policy_rhost}', vhost "
               f"'{conn.policy_hostname}'")
        sender = direction == ipc.DIR_IN  # the client sends
        kind = "sender" if sender else "receiver"
        count = sum(1 for lk in conn.links.values() if lk.direction == direction)
        limit = settings.max_senders if sender else settings.max_receivers
        condition, text = vpolicy.UNAUTHORIZED_ACCESS, None
        if count >= limit:
            condition = vpolicy.RESOURCE_LIMIT_EXCEEDED
            text = f"DENY AMQP Attach {kind} {who} based on max{kind.title()}s limit"
        elif not sender and plink.remote_source.dynamic:
            if not settings.allowDynamicSource:
                text = f"DENY AMQP Attach receiver dynamic source {who},"
        elif address:
            terminus = plink.remote_target if sender else plink.remote_source
            bad_cap = settings.check_capabilities(_capabilities(terminus))
            if bad_cap:
                text = (f"DENY AMQP Attach {kind} link '{address}' {who}.  {bad_cap} capability "
                        "not permitted")
            elif not settings.approve_address(conn.policy_user, address, source=not sender):
                text = (f"DENY AMQP Attach {kind} link '{address}' {who} based on link "
                        f"{'target' if sender else 'source'} name")
        elif sender:
            if not settings.allowAnonymousSender:
                text = f"DENY AMQP Attach anonymous sender {who}"
        else:
            text = f"DENY AMQP Attach receiver link '' {who}"
        if text is None:
            return True
        self.policy_log("info", f"[C{conn.conn_id}] {text}")
        self.outbox.append(ipc.PolicyEvent(conn.policy_vhost, kind, 1))
        self._set_condition(lib.pn_link_condition(l_ptr), condition, vpolicy.LINK_DISALLOWED)
        lib.pn_link_open(l_ptr)
        lib.pn_link_close(l_ptr)
        self.dirty.add(conn)
        return False

    def _police_transfer(self, link: Link, d_ptr: Any, scan: Any, payload: Any,
                         to: Optional[str]) -> Any:
        """A message on a link with ``check`` set: the user-id must be the connection's user
        unless allowUserIdProxy; an anonymous sender's 'to' must be an allowed target; a
        multiTenant connection's 'to' goes into its vhost's address space. Returns the 'to' to
        route by, or False when the delivery was rejected (amqp:unauthorized-access)."""
        conn = link.conn
        settings = conn.policy
        if settings is not None:
            description = None
            if not settings.allowUserIdProxy:
                uid = _message_user_id(payload, scan.ma_end)
                if uid is not None and uid != conn.policy_user.encode():
                    description = "user_id proxy violation"
            if description is None and link.anonymous and to is not None:
                ok = settings.approve_address(conn.policy_user, to, source=False)
                self.policy_log("trace" if ok else "info",
                                f"[C{conn.conn_id}] {'ALLOW' if ok else 'DENY'} AMQP message to "
                                f"'{to}' for user '{conn.policy_user}', rhost "
                                f"'{conn.policy_rhost}', vhost '{conn.policy_hostname}' based on "
                                "target address")
                if not ok:
                    description = "policy violation on target"
            if description is not None:
                self._reject_local(d_ptr, vpolicy.UNAUTHORIZED_ACCESS, description)
                lib.pn_link_flow(link.ptr, 1)  # the core never saw it: its credit comes back
                self.dirty.add(conn)
                return False
        if conn.tenant and link.anonymous and to is not None:
            to = f"{conn.tenant}/{to}"
        return to

    def _on_link_close(self, l_ptr: Any, closed: bool) -> None:
        link = self.link_ptrs.get(_key(l_ptr))
        if link is None:
            return
        conn = link.conn
        error = _condition_text(lib.pn_link_remote_condition(l_ptr))
        self._forget_link(link)
        del conn.links[l_ptr]
        self.outbox.append(ipc.LinkDetach(link.link_id, closed, error))
        if closed:
            lib.pn_link_close(l_ptr)
        else:
            lib.pn_link_detach(l_ptr)

    def _refuse_link(self, l_ptr: Any, conn: Connection, condition: str,
                     description: str) -> None:
        """Answer an attach with attach + detach(condition); the core never hears of the link."""
        self.log("warning", f"[C{conn.conn_id}] refusing link: {condition}: {description}")
        self._set_condition(lib.pn_link_condition(l_ptr), condition, description)
        lib.pn_link_open(l_ptr)
        lib.pn_link_close(l_ptr)
        self.dirty.add(conn)

    def _forget_link(self, link: Link) -> None:
        self.links.pop(link.link_id, None)
        self.link_ptrs.pop(link.key, None)
        if self.in_streams or self.out_streams:
            self._forget_streams(link)
        for dlv_id in [i for i, (_, lk) in self.in_dlvs.items() if lk is link]:
            ptr, _ = self.in_dlvs.pop(dlv_id)
            self.in_ids.pop(ptr, None)
        for dlv_id in [i for i, (_, lk) in self.out_dlvs.items() if lk is link]:
            del self.out_dlvs[dlv_id]
        if link.queued:  # what waited for the socket: the core fails it (MODIFIED / dropped)
            queue = link.conn.out_queue
            for entry in queue:
                if entry[0] is link:
                    self.queued_out.pop(entry[1], None)
                    if self.pending_states:
                        self.pending_states.pop(entry[1], None)
            link.conn.out_queue = deque(e for e in queue if e[0] is not link)
            link.queued = 0
        link.open = False

    def _forget_streams(self, link: Link) -> None:
        """A link goes: its streamed deliveries with it (the core aborts or fails them)."""
        for rec in [r for r in self.in_streams.values() if r.link is link]:
            self._stream_end(rec, False)
        for rec in [r for r in self.out_streams.values() if r.link is link]:
            self.out_streams.pop(rec.dlv_id, None)
        if link.waiting:
            link.queued -= len(link.waiting)
            if self.pending_states:
                for w in link.waiting:
                    self.pending_states.pop(w[0] if type(w) is tuple else w.dlv_id, None)
            link.waiting.clear()
        if link.out_stream is not None:
            link.out_stream = None
            link.queued -= 1

    def _on_flow(self, l_ptr: Any) -> None:
        link = self.link_ptrs.get(l_ptr)
        if link is None or link.awaiting:
            return
        if link.direction != DIR_OUT:
            # an inbound link the core asked to drain (LinkDrain, link routes): once the
            # sender has used up its credit the drain is over
            if link.draining and _pn_link_credit(l_ptr) <= 0:
                link.draining = False
                lib.pn_link_set_drain(link.ptr, False)
                self.outbox.append(ipc.InDrained(link.link_id))
            return
        self._report_flow(link)

    def _report_flow(self, link: Link) -> None:
        """LinkFlow(limit, drain) to the core: limit = deliveries sent + the receiver's credit,
        or, while the link is capped, only what the core already gave us (sent + queued)."""
        l_ptr = link.key
        limit = link.sent + _pn_link_credit(l_ptr)
        if link.capped or link.out_stream is not None:
            limit = min(limit, link.sent + link.queued)
        flow = (limit, bool(_pn_link_get_drain(l_ptr)))
        if flow != link.flow:
            link.flow = flow
            self.outbox.append(_command(LinkFlow, (link.link_id, flow[0], flow[1])))

    def _on_delivery(self, d_ptr: Any) -> None:
        l_ptr = _pn_delivery_link(d_ptr)
        link = self.link_ptrs.get(l_ptr)
        if link is None:  # a link we refused or forgot; proton still reports on it
            return
        if link.direction == DIR_OUT:
            self._on_outbound_update(d_ptr)
            return
        d_key = d_ptr  # compiled: the address as a Python int once, for the three maps below
        if self.in_streams:
            rec = self.in_streams.get(d_key)
            if rec is not None:  # a delivery being streamed: more bytes (or its end)
                self._stream_in(rec)
                return
        if d_ptr != _pn_link_current(l_ptr):
            # advanced past: a delivery we forwarded (the sender settled it, or gave a state)
            # or one settled here; the link's current one is new (or still arriving)
            dlv_id = self.in_ids.get(d_key)
            if dlv_id is None:
                return
            if _pn_delivery_settled(d_ptr):
                self._drop_in(dlv_id)
                self.outbox.append(_command(SettleIn,
                                            (dlv_id, _pn_delivery_remote_state(d_ptr))))
                _pn_delivery_settle(d_ptr)
            elif link.routed:  # a link route passes the sender's state on (transactions)
                self._sender_state(d_ptr, dlv_id)
            return
        if _pn_delivery_aborted(d_ptr):
            self._drop_aborted(d_ptr, l_ptr)
            return
        max_size = link.max_size  # maxMessageSize: one comparison per transfer frame
        if max_size and (self.oversize or _pn_delivery_pending(d_ptr) > max_size):
            if self._oversize(_cdata("pn_delivery_t *", d_ptr), link):
                return
        if _pn_delivery_partial(d_ptr):
            if link.stream and _pn_delivery_pending(d_ptr) >= STREAM_START:
                self._stream_begin(_cdata("pn_delivery_t *", d_ptr), d_key, link)
            return  # wait for the rest of the message
        payload = _pn_link_recv_message(l_ptr, _pn_delivery_pending(d_ptr))
        _pn_link_advance(l_ptr)
        if not link.open:
            _pn_delivery_update(d_ptr, STATE_RELEASED)
            _pn_delivery_settle(d_ptr)
            return
        settled = bool(_pn_delivery_settled(d_ptr))
        try:  # the routing fields only (~0.2 us compiled); the body is never decoded
            scan = _scan(payload)
        except scanner.MessageFormatError as exc:
            self.log("warning", f"[C{link.conn.conn_id}] rejecting malformed message: {exc}")
            self._reject_local(_cdata("pn_delivery_t *", d_ptr), "amqp:decode-error", str(exc))
            return
        if link.router:  # inter-router link: annotations kept and handed over for routing
            to = scan.ma_to
            trace = scan.ma_trace
            phase = scan.ma_phase
            dlv_id = self.new_id()
            cmd = _command(RouterTransfer, (
                dlv_id, link.link_id, scan.to if to is None else to, settled, scan.priority,
                phase if phase else 0, scan.ma_ingress, [] if trace is None else trace, payload))
        else:
            has_router_annotations = (scan.ma_to is not None or scan.ma_trace is not None
                                      or scan.ma_ingress is not None or scan.ma_phase is not None)
            if has_router_annotations and link.conn.strip_in:
                payload = _rewrite_annotations(payload, scan, strip=True)
                to = scan.to if link.anonymous else None
            elif link.anonymous:
                to = scan.ma_to if scan.ma_to is not None else scan.to
            else:
                to = None
            if link.check:  # vhost policy / multiTenant (set at attach; see _police_transfer)
                to = self._police_transfer(link, _cdata("pn_delivery_t *", d_ptr), scan,
                                           payload, to)
                if to is False:
                    return
            dlv_id = self.new_id()
            cmd = _command(Transfer, (dlv_id, link.link_id, to, settled, scan.priority, payload))
        if settled:
            _pn_delivery_settle(d_ptr)
        else:
            self.in_dlvs[dlv_id] = (d_key, link)
            self.in_ids[d_key] = dlv_id
        self.outbox.append(cmd)
        if link.routed and not settled:  # link routes only: a state on the transfer
            self._sender_state(d_ptr, dlv_id)

    def _sender_state(self, d_ptr: Any, dlv_id: Any) -> None:
        """SenderState for an unsettled delivery of a link-routed sender that has a state."""
        state = _pn_delivery_remote_state(d_ptr)
        if state:
            data = _encoded_data(lib.pn_disposition_data(
                lib.pn_delivery_remote(_cdata("pn_delivery_t *", d_ptr))))
            self.outbox.append(ipc.SenderState(dlv_id, state, {"data": data} if data else None))

    def _oversize(self, d_ptr: Any, link: Link) -> bool:
        """maxMessageSize: False if the delivery is within the limit. Otherwise its bytes are
        discarded as they come; once it is complete it is settled REJECTED
        (amqp:link:message-size-exceeded), its link closed and the connection closed
        (amqp:connection:forced), as Qpid Dispatch 1.19 does."""
        key = int(ffi.cast("uintptr_t", d_ptr))
        l_ptr = link.ptr
        if key not in self.oversize:
            if lib.pn_delivery_pending(d_ptr) <= link.max_size:
                return False
            self.oversize[key] = True
        buf = self._recv_buf
        while lib.pn_delivery_pending(d_ptr) > 0:
            if lib.pn_link_recv(l_ptr, ffi.from_buffer(buf), len(buf)) <= 0:
                break
        if lib.pn_delivery_partial(d_ptr) and not lib.pn_delivery_aborted(d_ptr):
            return True  # the rest is discarded as it arrives
        del self.oversize[key]
        lib.pn_link_advance(l_ptr)
        conn = link.conn
        self.log("info", f"[C{conn.conn_id}] DENY AMQP Transfer maxMessageSize exceeded "
                         f"({link.max_size} octets): link {link.link_id} and connection closed")
        self.outbox.append(ipc.PolicyEvent(conn.policy_vhost, "maxMessageSize", 1))
        self._reject_local(d_ptr, MESSAGE_SIZE_EXCEEDED, OVERSIZE_DESCRIPTION)
        self._forget_link(link)
        conn.links.pop(link.ptr, None)
        self.outbox.append(ipc.LinkDetach(link.link_id, True,
                                          f"{MESSAGE_SIZE_EXCEEDED}: {OVERSIZE_DESCRIPTION}"))
        lib.pn_link_close(l_ptr)
        self._set_condition(lib.pn_connection_condition(conn.c_ptr), "amqp:connection:forced",
                            OVERSIZE_DESCRIPTION)
        lib.pn_connection_close(conn.c_ptr)
        self.dirty.add(conn)
        return True

    # --- streaming inbound deliveries (cut-through; DESIGN.md "How a delivery travels") --------
    def _stream_begin(self, d: Any, d_key: Any, link: Link) -> None:
        """A partial delivery past STREAM_START bytes: from now on read as it arrives."""
        rec = InStream(link, d, d_key)
        self.in_streams[d_key] = rec
        self._stream_in(rec)

    def _stream_in(self, rec: InStream) -> None:
        """New bytes (or the end, or an abort) of a streamed inbound delivery."""
        d = rec.d
        link = rec.link
        l_ptr = link.ptr
        if lib.pn_delivery_aborted(d):
            self._stream_end(rec, False)
            if rec.started:
                self.outbox.append(TransferChunk(rec.dlv_id, True, True, b""))
            else:
                lib.pn_link_flow(l_ptr, 1)  # the core never saw it: its credit comes back
            lib.pn_delivery_settle(d)
            self.dirty.add(link.conn)
            return
        if rec.started and rec.unacked >= STREAM_WINDOW:
            return  # Q2: the rest waits in proton (and the socket is not read)
        pending = lib.pn_delivery_pending(d)
        partial = bool(lib.pn_delivery_partial(d))
        if partial and pending < (STREAM_CHUNK if rec.started else 1):
            return
        if link.max_size and rec.total + pending > link.max_size and rec.discard is None:
            # maxMessageSize while streaming: the copies are aborted, the rest is discarded,
            # then the delivery rejected and link and connection closed (as a whole one)
            self._stream_end(rec, False)
            if rec.started:
                self.outbox.append(TransferChunk(rec.dlv_id, True, True, b""))
            self.oversize[int(ffi.cast("uintptr_t", d))] = True
            self._oversize(d, link)
            return
        data = bytearray(pending)
        if pending:
            lib.pn_link_recv(l_ptr, ffi.from_buffer(data), pending)
        rec.total += pending
        if rec.discard is not None:
            if not partial:
                lib.pn_link_advance(l_ptr)
                self._stream_end(rec, False)
                state, condition, description = rec.discard
                if state == STATE_REJECTED:
                    self._reject_local(d, condition, description)
                else:
                    lib.pn_delivery_update(d, state)
                    lib.pn_delivery_settle(d)
                self.dirty.add(link.conn)
            return
        if not rec.started:
            rec.head += data
            self._stream_start(rec, partial)
            return
        if not partial:
            lib.pn_link_advance(l_ptr)
        self.outbox.append(TransferChunk(rec.dlv_id, not partial, False, data))
        if partial:
            rec.unacked += pending
            if rec.unacked >= STREAM_WINDOW:
                self._q2_block(rec)
        else:
            self._stream_end(rec, True)

    def _stream_start(self, rec: InStream, partial: bool) -> None:
        """Route the delivery once its routing fields (every section before the body) are
        here: StreamTransfer with the bytes so far; a complete one ends at once."""
        link = rec.link
        d = rec.d
        payload = rec.head
        try:  # the routing fields only; the body is never decoded
            scan = _scan(payload)
        except scanner.MessageFormatError as exc:
            if partial:
                return  # truncated so far: the sections before the body are not all here
            lib.pn_link_advance(link.ptr)
            self._stream_end(rec, False)
            self.log("warning", f"[C{link.conn.conn_id}] rejecting malformed message: {exc}")
            self._reject_local(d, "amqp:decode-error", str(exc))
            self.dirty.add(link.conn)
            return
        if partial and scan.body_start >= len(payload):
            return  # a section before the body may still come
        if not link.open:
            rec.discard = (STATE_RELEASED, "", "")
            if not partial:
                self._stream_in(rec)
            return
        settled = bool(lib.pn_delivery_settled(d))
        router = link.router
        if router:
            to = scan.ma_to
            trace = scan.ma_trace
            phase = scan.ma_phase
            to = scan.to if to is None else to
            phase = phase if phase else 0
            ingress = scan.ma_ingress
            trace = [] if trace is None else trace
        else:
            has_router_annotations = (scan.ma_to is not None or scan.ma_trace is not None
                                      or scan.ma_ingress is not None or scan.ma_phase is not None)
            if has_router_annotations and link.conn.strip_in:
                payload = _rewrite_annotations(payload, scan, strip=True)
                to = scan.to if link.anonymous else None
            elif link.anonymous:
                to = scan.ma_to if scan.ma_to is not None else scan.to
            else:
                to = None
            phase, ingress, trace = 0, None, []
        dlv_id = rec.dlv_id = self.new_id()
        rec.started = True
        rec.head = None
        rec.settled = settled
        self.in_stream_ids[dlv_id] = rec
        if not settled:
            self.in_dlvs[dlv_id] = (rec.d_key, link)
            self.in_ids[rec.d_key] = dlv_id
        self.outbox.append(StreamTransfer(dlv_id, link.link_id, to, settled, scan.priority,
                                          router, phase, ingress, trace, bytes(payload)))
        rec.unacked = len(payload)
        if not partial:
            lib.pn_link_advance(link.ptr)
            self.outbox.append(TransferChunk(dlv_id, True, False, b""))
            self._stream_end(rec, True)
        elif rec.unacked >= STREAM_WINDOW:
            self._q2_block(rec)

    def _stream_end(self, rec: InStream, complete: bool) -> None:
        """A streamed inbound delivery is complete (``complete``) or ends otherwise (aborted,
        discarded): forget it as a stream; a complete one settles as a whole one would."""
        self.in_streams.pop(rec.d_key, None)
        if rec.dlv_id is not None:
            self.in_stream_ids.pop(rec.dlv_id, None)
        if rec.blocked:
            self._q2_unblock(rec)
        d = rec.d
        if not complete:
            if rec.dlv_id is not None and rec.dlv_id in self.in_dlvs:
                self._drop_in(rec.dlv_id)
            return
        if rec.settled:
            lib.pn_delivery_settle(d)
        elif rec.settle:  # the core settled it while it arrived
            if rec.dlv_id in self.in_dlvs:
                self._drop_in(rec.dlv_id)
            lib.pn_delivery_settle(d)
        elif lib.pn_delivery_settled(d):  # the sender settled it with its last frame
            self._drop_in(rec.dlv_id)
            self.outbox.append(SettleIn(rec.dlv_id, lib.pn_delivery_remote_state(d)))
            lib.pn_delivery_settle(d)
        self.dirty.add(rec.link.conn)

    def _q2_block(self, rec: InStream) -> None:
        rec.blocked = True
        conn = rec.link.conn
        conn.q2 += 1
        if conn.q2 == 1:
            self.q2_changed.add(conn)

    def _q2_unblock(self, rec: InStream) -> None:
        rec.blocked = False
        conn = rec.link.conn
        conn.q2 -= 1
        if conn.q2 == 0:
            self.q2_changed.add(conn)

    def _fx_stream_ack(self, fx: StreamAck) -> None:
        """The core took ``nbytes`` more of a streamed delivery: read on (Q2 released)."""
        rec = self.in_stream_ids.get(fx[0])
        if rec is None:
            return
        rec.unacked -= fx[1]
        if rec.unacked < STREAM_WINDOW:
            if rec.blocked:
                self._q2_unblock(rec)
            self._stream_in(rec)  # what proton already holds (no new event announces it)

    def _drop_aborted(self, d_ptr: Any, l_ptr: Any) -> None:
        # An aborted transfer is discarded; the sender's credit comes back with the next flow.
        _pn_delivery_settle(d_ptr)
        _pn_link_flow(l_ptr, 1)

    def _reject_local(self, d_ptr: Any, condition: str, description: str) -> None:
        self._set_condition(lib.pn_disposition_condition(lib.pn_delivery_local(d_ptr)),
                            condition, description)
        lib.pn_delivery_update(d_ptr, ipc.STATE_REJECTED)
        lib.pn_delivery_settle(d_ptr)

    def _drop_in(self, dlv_id: int) -> None:
        ptr, _ = self.in_dlvs.pop(dlv_id)
        self.in_ids.pop(ptr, None)

    def _on_outbound_update(self, d_ptr: Any) -> None:
        dlv_id = _pn_delivery_tag_id(d_ptr)  # the core's id: every delivery we send is tagged so
        entry = self.out_dlvs.get(dlv_id)
        if entry is None:
            return
        d_key = d_ptr  # compiled: the address as a Python int
        if entry[0] != d_key:  # (never: ids are unique router-wide; a check, not a lookup)
            return
        state = _pn_delivery_remote_state(d_ptr)
        settled = bool(_pn_delivery_settled(d_ptr))
        info = None
        if state and state != STATE_ACCEPTED and state != STATE_RELEASED:
            # rejected, modified, received or an extension state: what it carries (rare)
            # (declared, transactional-state and extension states: their fields,
            # AMQP-encoded, for the core to pass on unread; a link route needs them all)
            info = self._remote_info(_cdata("pn_delivery_t *", d_ptr), state)
        if settled:
            del self.out_dlvs[dlv_id]
            if self.out_streams and dlv_id in self.out_streams:  # still being sent
                self._stream_settled(dlv_id, 0)  # settled once complete
            else:
                _pn_delivery_settle(d_ptr)
        self.outbox.append(_command(Disposition, (dlv_id, state, settled, info)))

    @staticmethod
    def _remote_info(d_ptr: Any, state: int) -> dict:
        """What a remote delivery state carries, for a Disposition's ``info``: rejected's
        condition, modified's flags and annotations, received's section, an extension state's
        value (AMQP-encoded, opaque to the core)."""
        disp = lib.pn_delivery_remote(d_ptr)
        if state == ipc.STATE_MODIFIED:
            info = {"failed": bool(lib.pn_disposition_is_failed(disp)),
                    "undeliverable": bool(lib.pn_disposition_is_undeliverable(disp))}
            annotations = _encoded_data(lib.pn_disposition_annotations(disp))
            if annotations:
                info["annotations"] = annotations
            return info
        if state == ipc.STATE_RECEIVED:
            return {"section_number": lib.pn_disposition_get_section_number(disp),
                    "section_offset": lib.pn_disposition_get_section_offset(disp)}
        if state != ipc.STATE_REJECTED:
            value = _encoded_data(lib.pn_disposition_data(disp))
            return {"data": value} if value else {}
        c = lib.pn_disposition_condition(disp)
        if not lib.pn_condition_is_set(c):
            return {}
        return {"condition": _text(lib.pn_condition_get_name(c)),
                "description": _text(lib.pn_condition_get_description(c))}

    @staticmethod
    def _local_info(disp: Any, state: int, info: dict) -> None:
        """Give a local disposition what a Disposition's ``info`` carried (the other way)."""
        if state == ipc.STATE_MODIFIED:
            lib.pn_disposition_set_failed(disp, bool(info.get("failed")))
            lib.pn_disposition_set_undeliverable(disp, bool(info.get("undeliverable")))
            annotations = info.get("annotations")
            if annotations:
                _decode_data(lib.pn_disposition_annotations(disp), annotations)
        elif state == ipc.STATE_RECEIVED:
            lib.pn_disposition_set_section_number(disp, int(info.get("section_number") or 0))
            lib.pn_disposition_set_section_offset(disp, int(info.get("section_offset") or 0))
        elif info.get("data"):  # an extension state's value
            _decode_data(lib.pn_disposition_data(disp), info["data"])
        elif info.get("condition"):
            _put_condition(lib.pn_disposition_condition(disp), info["condition"],
                           info.get("description", ""))

    @staticmethod
    def _set_condition(cond: Any, name: str, description: str) -> None:
        _put_condition(cond, name, description)

    # --- effects -> engine --------------------------------------------------------------------
    def apply_all(self, effects: list) -> None:
        """Apply one batch of effects from the core, in order: one that raises closes the
        connection it was for (``effect_failed``) and the rest still apply. One call per batch
        (compiled: the loop and each ``apply`` are C calls)."""
        for effect in effects:
            try:  # zero cost unless raised
                self.apply(effect)
            except Exception as exc:  # noqa: BLE001 - close that connection, not the worker
                self.effect_failed(effect, exc)

    def apply(self, effect: tuple) -> None:
        t = type(effect)  # the per-message effects first, the rest through the table
        if t is Deliver:
            self._fx_deliver(effect)
        elif t is RouterDeliver:
            self._fx_router_deliver(effect)
        elif t is UpdateIn:
            self._fx_update_in(effect)
        elif t is LinkCredit:
            self._fx_credit(effect)
        elif t is SettleOut:
            self._fx_settle_out(effect)
        elif t is Drained:
            self._fx_drained(effect)
        elif t is DeliverChunk:
            self._fx_deliver_chunk(effect)
        else:
            self._handlers[t](effect)

    def _fx_link_open(self, fx: ipc.LinkOpen) -> None:
        link = self.links.get(fx.link_id)
        if link is None:
            return
        if link.local:  # created open by this router: nothing to answer
            if link.direction == ipc.DIR_OUT:
                self._on_flow(link.key)
            return
        if fx.settle is not None:  # a link route: the far end's answer, as it gave it
            link.routed = True
            _write_terminus(lib.pn_link_source(link.ptr), fx.source)
            _write_terminus(lib.pn_link_target(link.ptr), fx.target)
            lib.pn_link_set_snd_settle_mode(link.ptr, fx.settle[0])
            lib.pn_link_set_rcv_settle_mode(link.ptr, fx.settle[1])
            lib.pn_link_open(link.ptr)
            link.open = True
            self.dirty.add(link.conn)
            if link.direction == ipc.DIR_OUT:
                self._on_flow(link.key)
            return
        plink = proton.Link.wrap(link.ptr)
        plink.source.copy(plink.remote_source)
        plink.target.copy(plink.remote_target)
        if link.direction == ipc.DIR_OUT and plink.remote_source.dynamic:
            plink.source.address = fx.address
        elif link.direction == ipc.DIR_IN and plink.remote_target.dynamic:
            plink.target.address = fx.address
        lib.pn_link_set_snd_settle_mode(link.ptr, lib.pn_link_remote_snd_settle_mode(link.ptr))
        lib.pn_link_set_rcv_settle_mode(link.ptr, lib.pn_link_remote_rcv_settle_mode(link.ptr))
        lib.pn_link_open(link.ptr)
        link.open = True
        self.dirty.add(link.conn)
        if link.direction == ipc.DIR_OUT:
            self._on_flow(link.key)  # credit may have arrived with the attach

    def _fx_link_refuse(self, fx: ipc.LinkRefuse) -> None:
        link = self.links.get(fx.link_id)
        if link is None:
            return
        self._set_condition(lib.pn_link_condition(link.ptr), fx.condition, fx.description)
        if link.direction == ipc.DIR_IN:  # the answering attach has a null target, as 1.19's
            lib.pn_terminus_set_type(lib.pn_link_target(link.ptr), lib.PN_UNSPECIFIED)
        lib.pn_link_open(link.ptr)
        lib.pn_link_close(link.ptr)
        self._forget_link(link)
        link.conn.links.pop(link.ptr, None)
        self.dirty.add(link.conn)

    def _fx_deliver_state(self, fx: ipc.DeliverState) -> None:
        """The state a link-routed sender gave a delivery, set on the delivery sent for it; one
        still waiting here gets it when it is handed to proton."""
        entry = self.out_dlvs.get(fx.dlv_id)
        if entry is not None:
            d_ptr, link = entry
            self._set_sender_state(_cdata("pn_delivery_t *", d_ptr), fx.state, fx.info)
            self.dirty.add(link.conn)
            return
        queued = self.queued_out.get(fx.dlv_id)
        rec = self.out_streams.get(fx.dlv_id) if self.out_streams else None
        if queued is not None and queued[5] is not None:  # partly handed to proton already
            self._set_sender_state(queued[5], fx.state, fx.info)
            self.dirty.add(queued[0].conn)
        elif rec is not None and rec.d is not None:  # a streamed one, under way
            self._set_sender_state(rec.d, fx.state, fx.info)
            self.dirty.add(rec.link.conn)
        elif queued is not None or self._waits_on_a_link(fx.dlv_id):
            self.pending_states[fx.dlv_id] = (fx.state, fx.info)
        # else settled already: nothing to set

    def _waits_on_a_link(self, dlv_id: Any) -> bool:
        """Is ``dlv_id`` behind a streamed delivery on its link (Link.waiting)? (rare: only
        for a DeliverState that found no delivery)"""
        rec = self.out_streams.get(dlv_id)
        if rec is not None:
            return True
        return any(type(w) is tuple and w[0] == dlv_id
                   for link in self.links.values() if link.waiting for w in link.waiting)

    def _pending_state(self, dlv_id: Any, delivery: Any) -> None:
        pending = self.pending_states.pop(dlv_id, None)
        if pending is not None:
            self._set_sender_state(delivery, pending[0], pending[1])

    @staticmethod
    def _set_sender_state(delivery: Any, state: int, info: Optional[dict]) -> None:
        if info and info.get("data"):
            _decode_data(lib.pn_disposition_data(lib.pn_delivery_local(delivery)), info["data"])
        lib.pn_delivery_update(delivery, state)

    def _fx_link_drain(self, fx: ipc.LinkDrain) -> None:
        link = self.links.get(fx.link_id)
        if link is None or link.direction == DIR_OUT:
            return
        if lib.pn_link_credit(link.ptr) <= 0:  # nothing to drain: drained already
            self.outbox.append(ipc.InDrained(link.link_id))
            return
        link.draining = True
        lib.pn_link_drain(link.ptr, 0)  # drain flag on, no more credit: a flow frame goes out
        self.dirty.add(link.conn)

    def _fx_link_stall(self, fx: ipc.LinkStall) -> None:
        """The drain flag of an inbound link whose address has no destination (on), cleared
        when it has one again (off: answered with the sender's credit, LinkUnstalled)."""
        link = self.links.get(fx.link_id)
        if link is None or link.direction == DIR_OUT:
            return
        lib.pn_link_set_drain(link.ptr, bool(fx.on))
        if not fx.on:
            self.outbox.append(ipc.LinkUnstalled(
                link.link_id, lib.pn_link_credit(link.ptr) + lib.pn_link_queued(link.ptr)))
        self.dirty.add(link.conn)

    def _fx_credit(self, fx: ipc.LinkCredit) -> None:
        link_id, credit = _fields(fx)
        link = self.links.get(link_id)
        if link is not None:
            _pn_link_flow(link.key, credit)
            self.dirty.add(link.conn)

    def _fx_deliver(self, fx: ipc.Deliver) -> None:
        dlv_id, link_id, settled, payload = _fields(fx)
        link = self.links.get(link_id)
        if link is None:
            return  # the link went away; the core learns it from our LinkDetach
        self._send(link, dlv_id, settled, self._egress_annotations(link.conn, payload))

    def _fx_router_deliver(self, fx: ipc.RouterDeliver) -> None:
        dlv_id, link_id, settled, to_override, phase, payload = _fields(fx)
        link = self.links.get(link_id)
        if link is None:
            return  # the link went away; the core learns it from our LinkDetach
        self._send(link, dlv_id, settled, self._router_egress(payload, to_override, phase))

    def _send(self, link: Link, dlv_id: int, settled: bool, payload: Any) -> None:
        """One outbound delivery: tagged with the core's id, sent whole, settled or remembered.

        Beyond the connection's byte budget it waits in the connection's out_queue instead."""
        conn = link.conn
        if link.out_stream is not None:  # a streamed delivery in progress on this link
            link.waiting.append((dlv_id, settled, payload))
            link.queued += 1
            return
        if conn.out_queue or len(payload) > conn.out_room:
            self.enqueue(link, dlv_id, settled, payload)
            return
        conn.out_room -= len(payload)
        l_ptr = link.key
        d_ptr = _pn_delivery_tagged(l_ptr, dlv_id)
        if self.pending_states:  # (link routes: a sender's state given while it waited)
            self._pending_state(dlv_id, _cdata("pn_delivery_t *", d_ptr))
        _pn_link_send_all(l_ptr, payload)
        _pn_link_advance(l_ptr)
        link.sent += 1
        if settled:
            _pn_delivery_settle(d_ptr)
        elif link.settle_for_receiver:
            self._settle_for_receiver(dlv_id, d_ptr)
        else:
            self.out_dlvs[dlv_id] = (d_ptr, link)
        self.dirty.add(conn)

    def _settle_for_receiver(self, dlv_id: int, d_ptr: Any) -> None:
        """An unsettled delivery to a receiver that asked for pre-settled ones (snd-settle-mode
        settled): it leaves settled and the core hears ACCEPTED, settled, as the router
        settled it on the receiver's behalf (as 1.19 does)."""
        _pn_delivery_settle(d_ptr)
        self.outbox.append(_command(Disposition, (dlv_id, STATE_ACCEPTED, True, None)))

    def enqueue(self, link: Link, dlv_id: int, settled: bool, payload: Any) -> None:
        """Keep an outbound delivery until the connection's socket drains (see OUT_BUDGET): one
        copy of its bytes (a slice of an IPC batch frame is copied out, so the frame is not
        kept for it), sent by :meth:`refill`."""
        if type(payload) is memoryview and payload.nbytes * 2 < len(payload.obj):
            payload = bytes(payload)
        entry = [link, dlv_id, settled, payload, 0, None, 0, KIND_WHOLE, 0, None]
        link.conn.out_queue.append(entry)
        link.queued += 1
        if not settled:
            self.queued_out[dlv_id] = entry
        if not link.capped:
            # Backpressure: the socket does not drain, so the core should stop giving this link
            # deliveries (it holds them at the address, holding its senders' credit) instead of
            # the worker queueing as many as the receiver's credit allows (a receiver that
            # grants 100k and stops reading would make the router hold 100k messages).
            link.capped = True
            self._report_flow(link)
        if link.conn.out_room > 0:
            self.refill(link.conn)

    def refill(self, conn: Connection) -> None:
        """Hand queued deliveries to proton while the connection's byte budget allows; a
        delivery larger than what is left goes in slices (proton sees one partial delivery)."""
        queue = conn.out_queue
        while queue and conn.out_room > 0:
            entry = queue[0]
            link, dlv_id, settled, payload, offset, d_ptr, state, kind, _, rec = entry
            l_ptr = link.ptr
            if d_ptr is None:
                if rec is not None and rec.d is not None:  # a later part of a streamed one
                    d_ptr = entry[5] = rec.d
                else:
                    d_ptr = entry[5] = lib.pn_delivery(l_ptr, (8, ffi.from_buffer(_tag(dlv_id))))
                    if self.pending_states:
                        self._pending_state(dlv_id, d_ptr)
            n = min(len(payload) - offset, conn.out_room)
            if n:
                lib.pn_link_send(l_ptr, ffi.from_buffer(payload) + offset, n)
                conn.out_room -= n
                offset = entry[4] = offset + n
            if offset < len(payload):
                break  # the rest when the socket has taken more
            queue.popleft()
            if kind != KIND_WHOLE:
                self._stream_part_sent(entry, d_ptr)
                continue
            link.queued -= 1
            lib.pn_link_advance(l_ptr)
            link.sent += 1
            settled = entry[2]  # a SettleOut may have come while it waited
            if settled:
                self.queued_out.pop(dlv_id, None)
                if entry[6]:
                    lib.pn_delivery_update(d_ptr, entry[6])
                lib.pn_delivery_settle(d_ptr)
            elif link.settle_for_receiver:
                del self.queued_out[dlv_id]
                lib.pn_delivery_settle(d_ptr)
                self.outbox.append(Disposition(dlv_id, ipc.STATE_ACCEPTED, True, None))
            else:
                del self.queued_out[dlv_id]
                self._track_out(dlv_id, d_ptr, link)
            if not link.queued and link.drain_after:
                link.drain_after = False
                link.sent += lib.pn_link_drained(l_ptr)
        if not queue:  # drained: the core may send on every capped link again
            for link in list(conn.links.values()):
                if link.capped:
                    link.capped = False
                    self._report_flow(link)
        self.dirty.add(conn)

    # --- streaming outbound deliveries -------------------------------------------------------
    def _fx_stream_deliver(self, fx: StreamDeliver) -> None:
        """Start an outbound delivery whose message is still arriving: its first bytes now
        (annotations as for any delivery), the rest as DeliverChunks; one at a time per link."""
        dlv_id, link_id, settled, to_override, phase, payload = _fields(fx)
        link = self.links.get(link_id)
        if link is None:
            return
        if link.router:
            first = self._router_egress(payload, to_override, phase)
        else:
            first = self._egress_annotations(link.conn, payload)
        if first is payload:
            first = bytes(payload)
        rec = OutStream(dlv_id, link, settled)
        self.out_streams[dlv_id] = rec
        rec.parts.append((first, len(payload), KIND_PART))
        link.queued += 1
        if link.out_stream is None:
            self._stream_go(rec)
        else:
            link.waiting.append(rec)
            self._report_flow(link)

    def _stream_go(self, rec: OutStream) -> None:
        """``rec`` becomes its link's delivery in progress: its parts join the out_queue."""
        link = rec.link
        link.out_stream = rec
        rec.started = True
        self._report_flow(link)  # no more for this link until it ends
        parts = rec.parts
        rec.parts = deque()
        for payload, ack, kind in parts:
            self._stream_part(rec, payload, ack, kind)

    def _stream_part(self, rec: OutStream, payload: Any, ack: int, kind: int) -> None:
        conn = rec.link.conn
        conn.out_queue.append([rec.link, rec.dlv_id, rec.settled, payload, 0, None, 0, kind, ack,
                               rec])
        if conn.out_room > 0:
            self.refill(conn)

    def _fx_deliver_chunk(self, fx: DeliverChunk) -> None:
        dlv_id, last, aborted, payload = _fields(fx)
        rec = self.out_streams.get(dlv_id)
        if rec is None:
            return
        if aborted:
            self._stream_abort_out(rec)
            return
        payload = bytes(payload)  # a slice of the IPC batch frame: never keep the frame
        kind = KIND_LAST if last else KIND_PART
        ack = 0 if last else len(payload)
        if rec.started:
            self._stream_part(rec, payload, ack, kind)
        else:
            rec.parts.append((payload, ack, kind))

    def _stream_part_sent(self, entry: list, d_ptr: Any) -> None:
        """A part of a streamed delivery is inside proton (out_queue entry ``entry``)."""
        link, dlv_id, settled, _, _, _, _, kind, ack, rec = entry
        if rec.d is None:
            rec.d = d_ptr
            if not settled:  # dispositions from now on (the receiver may answer early)
                self._track_out(dlv_id, d_ptr, link)
        if kind == KIND_PART:
            if ack:
                self.outbox.append(StreamSent(dlv_id, ack))
            return
        lib.pn_link_advance(link.ptr)  # the last part: the delivery is complete
        link.sent += 1
        self._stream_out_end(rec)
        if rec.settled or rec.settle:
            if rec.state:
                lib.pn_delivery_update(d_ptr, rec.state)
            self._untrack_out(dlv_id)
            lib.pn_delivery_settle(d_ptr)

    def _stream_settled(self, dlv_id: Any, state: int) -> None:
        rec = self.out_streams[dlv_id]
        rec.settle = True
        if state:
            rec.state = state

    def _stream_in_settled(self, dlv_id: Any) -> None:
        self.in_stream_ids[dlv_id].settle = True

    def _untrack_out(self, dlv_id: Any) -> None:
        self.out_dlvs.pop(dlv_id, None)

    def _stream_out_end(self, rec: OutStream) -> None:
        """``rec`` no longer occupies its link: the next delivery waiting there goes."""
        link = rec.link
        self.out_streams.pop(rec.dlv_id, None)
        link.queued -= 1
        if link.out_stream is rec:
            link.out_stream = None
        elif rec in link.waiting:
            link.waiting.remove(rec)
        waiting = link.waiting
        while waiting and link.out_stream is None and link.open:
            item = waiting.popleft()
            if type(item) is OutStream:
                self._stream_go(item)
            else:
                link.queued -= 1
                self._send(link, item[0], item[1], item[2])
        self._report_flow(link)
        self.dirty.add(link.conn)

    def _stream_abort_out(self, rec: OutStream) -> None:
        """The message will not complete: what proton has of it is aborted (the receiver sees
        an aborted transfer), what waits is dropped."""
        link = rec.link
        conn = link.conn
        if any(e[9] is rec for e in conn.out_queue if len(e) > 9):
            conn.out_queue = deque(e for e in conn.out_queue if len(e) < 10 or e[9] is not rec)
        self._untrack_out(rec.dlv_id)
        if rec.d is not None:
            # proton drops the bytes of it not yet encoded into frames: they will never be
            # written to the socket, so they leave the connection's budget now (else the
            # budget shrinks by them for good, and a later delivery waits forever)
            dropped = lib.pn_delivery_pending(rec.d)
            lib.pn_delivery_abort(rec.d)
            room = conn.out_room + dropped
            conn.out_room = room if room < conn.out_budget else conn.out_budget
            link.sent += 1  # proton gives the credit back: counted as sent, the core's view
        elif rec.started:
            link.sent += 1  # nothing reached proton; the core counted it as delivered
        self._stream_out_end(rec)
        if conn.out_queue and conn.out_room > 0:
            self.refill(conn)

    def _track_out(self, dlv_id: int, d_ptr: Any, link: Link) -> None:
        """An unsettled delivery ``refill`` handed to proton (``d_ptr`` a cffi pointer)."""
        self.out_dlvs[dlv_id] = (_key(d_ptr), link)

    def _egress_annotations(self, conn: Connection, payload: Any) -> Any:
        """Strip router annotations for a stripping connection, else add ingress and trace.

        Only the message-annotations section is rewritten; the rest is copied unchanged.
        A message without router annotations going to a stripping connection is untouched
        (one without a message-annotations section is not even scanned).
        """
        if conn.strip_out and not _has_annotations(payload):
            return payload
        try:
            scan = _scan(payload)
        except scanner.MessageFormatError:
            return payload  # it was scanned on the way in; never block a delivery here
        if conn.strip_out:
            if (scan.ma_to is None and scan.ma_trace is None and scan.ma_ingress is None
                    and scan.ma_phase is None):
                return payload
            return _rewrite_annotations(payload, scan, strip=True)
        me = self.node_tag
        return _rewrite_annotations(
            payload, scan, ingress=me if scan.ma_ingress is None else None, trace_append=me)

    def _router_egress(self, payload: Any, to_override: Optional[str], phase: int) -> Any:
        """Egress annotations of a RouterDeliver (inter-router links never strip): ingress if
        absent, this router appended to the trace, ``x-opt-qd.to`` set unless ``to_override`` is
        None, ``x-opt-qd.phase`` set unless ``phase`` is -1. Only that section is rewritten."""
        try:
            scan = _scan(payload)
        except scanner.MessageFormatError:
            return payload  # it was scanned on the way in; never block a delivery here
        me = self.node_tag
        return _rewrite_annotations(
            payload, scan, ingress=me if scan.ma_ingress is None else None, trace_append=me,
            to_override=scanner.KEEP if to_override is None else to_override,
            phase=scanner.KEEP if phase == -1 else phase)

    def _fx_update_in(self, fx: ipc.UpdateIn) -> None:
        dlv_id, state, settled, info = _fields(fx)
        entry = self.in_dlvs.get(dlv_id)
        if entry is None:
            return
        d_ptr, link = entry
        if state:
            if info:  # conditions, modified flags and annotations: rare, through cffi
                self._local_info(lib.pn_delivery_local(_cdata("pn_delivery_t *", d_ptr)), state,
                                 info)
            _pn_delivery_update(d_ptr, state)
        if settled:
            if self.in_stream_ids and dlv_id in self.in_stream_ids:  # still arriving
                self._stream_in_settled(dlv_id)  # settled once complete
            else:
                self._drop_in(dlv_id)
                _pn_delivery_settle(d_ptr)
        self.dirty.add(link.conn)

    def _fx_settle_out(self, fx: ipc.SettleOut) -> None:
        dlv_id, state = _fields(fx)
        if self.out_streams and dlv_id in self.out_streams:  # still being sent: at its end
            self._stream_settled(dlv_id, state)
            return
        entry = self.out_dlvs.pop(dlv_id, None)
        if entry is None:
            if self.queued_out:
                self._settle_queued(dlv_id, state)
            return
        d_ptr, link = entry
        if state:
            _pn_delivery_update(d_ptr, state)
        _pn_delivery_settle(d_ptr)
        self.dirty.add(link.conn)

    def _settle_queued(self, dlv_id: int, state: int) -> None:
        """The sender settled a delivery that still waits in an out_queue: it goes settled."""
        entry = self.queued_out.pop(dlv_id, None)
        if entry is not None:
            entry[2] = True
            entry[6] = state

    def _fx_drained(self, fx: ipc.Drained) -> None:
        link = self.links.get(_fields(fx)[0])
        if link is not None:
            if link.queued:  # the credit left is for what still waits in the out_queue
                link.drain_after = True
                return
            link.sent += _pn_link_drained(link.key)
            self.dirty.add(link.conn)

    def _fx_close_connection(self, fx: ipc.CloseConnection) -> None:
        conn = self.conns_by_id.get(fx.conn_id)
        if conn is None:
            return
        self._set_condition(lib.pn_connection_condition(conn.c_ptr), fx.condition,
                            fx.description)
        lib.pn_connection_close(conn.c_ptr)
        self.dirty.add(conn)

    def _fx_detach_link(self, fx: ipc.DetachLink) -> None:
        link = self.links.get(fx.link_id)
        if link is None:
            return
        if fx.condition:  # none: an orderly detach (a link route passes one on)
            self._set_condition(lib.pn_link_condition(link.ptr), fx.condition, fx.description)
        lib.pn_link_close(link.ptr)
        self._forget_link(link)
        link.conn.links.pop(link.ptr, None)
        self.dirty.add(link.conn)

    def take_commands(self) -> list:
        out = self.outbox
        self.outbox = []
        return out

