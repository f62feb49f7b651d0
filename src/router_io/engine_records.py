"""The worker engine's per-link and per-stream records (plain slotted classes).

``Link`` is the worker's state of one proton link; ``InStream``/``OutStream`` a delivery being
streamed in or out. cython/_engine.pxd makes ``Link`` a final cdef class with exactly these
slots. No behaviour here: the engine parts own what happens to them.

Part of the compiled engine (setup.py ENGINE_PARTS). Imports only engine_proton and
engine_lifecycle of the parts.
"""

from collections import deque
from typing import Any
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_lifecycle import S_HEAD, S_WAITING
from router_io.engine_proton import _key
# --- end engine parts ---


class Link:
    """Worker-side state of one link."""

    __slots__ = ("link_id", "ptr", "key", "conn", "direction", "anonymous", "sent", "flow",
                 "open", "local", "link_type", "router", "queued", "drain_after", "max_size",
                 "check", "capped", "awaiting", "draining", "routed", "settle_for_receiver",
                 "stream", "out_stream", "waiting", "half")

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
        # a routed link detached by one end only (HALF_*, engine_links.py): the other end's
        # answer is the partner's, as 1.19 relays it
        self.half = 0
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
                 "settled", "settle", "blocked", "discard", "stage")

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
        self.stage = S_HEAD      # its lifecycle (engine_lifecycle.py STREAM_TRANSITIONS)


class OutStream:
    """An outbound delivery whose message is still arriving: its parts go to proton in order."""

    __slots__ = ("dlv_id", "link", "settled", "d", "parts", "started", "settle", "state",
                 "stage", "logged")

    def __init__(self, dlv_id: Any, link: Link, settled: bool) -> None:
        self.dlv_id = dlv_id
        self.link = link
        self.settled = settled
        self.d = None            # the proton delivery (cffi), once its first bytes went
        self.parts: deque = deque()  # (bytes, ack, kind) before it may start on its link
        self.started = False
        self.settle = False      # settled by the sender or receiver meanwhile: settle at the end
        self.state = 0           # the delivery state to settle it with (SettleOut)
        self.stage = S_WAITING   # its lifecycle (engine_lifecycle.py STREAM_TRANSITIONS)
        self.logged = None       # MESSAGE trace: its Message{...} text, logged once it is sent
