"""The one IPC schema: every message that crosses a process boundary in the router.

The ONE schema (CONVENTIONS: one IPC schema module): this module is its entry, with the table
of every message type's code (MESSAGE_TYPES, the wire contract) and the batch encoding; the
types themselves are grouped by direction in common/ipc_base.py (version, states, ids),
ipc_peer.py (peer -> core), ipc_effects.py (core -> peer), ipc_control.py (supervisor and
management plumbing), ipc_interior.py (inter-router, routing protocol) and ipc_stream.py
(streaming), and every name of them is re-exported here: ``from common.ipc import X`` for all.

Processes (see DESIGN.md): the core owns routing and settlement; I/O workers own AMQP
connections; the agent (control plane) owns management and the routing protocol. Workers and the
agent are *peers* of the core and talk to it over one ZeroMQ DEALER/ROUTER pair each.

Wire format of one batch (ONE ZeroMQ frame; a ROUTER socket adds the peer's identity frame)::

    4 bytes   n, the length of the header (unsigned, little-endian)
    n bytes   msgpack([IPC_VERSION, peer_index, [[code, field, field, ...], ...]])
    the rest  (only if some message carries a payload) the payloads, back to back

A message type whose last field is ``payload`` carries the payload object in memory; on the wire
that field holds the payload's length, and the bytes follow the header in item order. One frame,
not a header frame and a payload frame: every frame of a multipart message costs pyzmq a send, a
receive and an RCVMORE check (about 3 µs a frame here), per batch and per hop. Message bytes
are never decoded or re-encoded: the core hands zero-copy slices of the received frame straight
to the outbound peer's batch.

Commands flow from peers to the core, effects from the core to peers. Both are NamedTuples: cheap
to build on the hot path, typed, immutable, and packed by msgpack as arrays.

Identifiers: connections, links and inbound deliveries are numbered by the peer that owns them
with :func:`id_allocator`, so they are unique router-wide without a round trip. Outbound deliveries
are numbered by the core.

This module must not import proton, zmq or anything from router_io/agent.
"""
from __future__ import annotations

from typing import Iterable

from common.builds import choose
# every message type and constant of the schema, re-exported: ``from common.ipc import X``
# works for each (the modules group them by direction; the codes are this module's table).
# A new message type goes into the module of its direction, here, and into MESSAGE_TYPES.
from common.ipc_base import (
    CORE_ID_BASE, DIR_IN, DIR_OUT, GENERATION_SPAN, IPC_VERSION, STATE_ACCEPTED, STATE_MODIFIED,
    STATE_NAMES, STATE_NONE, STATE_RECEIVED, STATE_REJECTED, STATE_RELEASED, TERMINAL_STATES,
    TERMINUS_COORDINATOR, TERMINUS_FIELDS, TERMINUS_SOURCE, TERMINUS_TARGET, id_allocator,
    IpcError, terminus)
from common.ipc_peer import (
    ConnClosed, ConnOpened, DeliveryTag, Disposition, InDrained, LinkAttach, LinkAttached,
    LinkDetach, LinkFlow, LinkLost, PeerHello, SenderState, SettleIn, Transfer)
from common.ipc_effects import (
    AttachOut, CloseConnection, Deliver, DeliverOrigin, DeliverState, DeliverTag, DetachLink,
    Drained, LinkCredit, LinkDrain, LinkOpen, LinkRefuse, LinkStall, LinkUnstalled, SettleOut,
    UpdateIn)
from common.ipc_control import (
    ENTITY_TYPE_PREFIX, NOT_SUPPORTED, SUPERVISOR_PEER, ChildStatus, ConfigChange, ConfigResult,
    ConnectorStatus, CoreQuery, CoreState, LogQuery, LogReport, PeerLost, ReloadRequest,
    ReloadResult, short_type)
from common.ipc_interior import (
    ControlIn, ControlSend, LinkState, LocalAddress, PolicyClose, PolicyEvent, Reachable,
    RemoteAddress,
    RouterDeliver, RouterGone, RouterLinkDown, RouterLinkUp, RouterTransfer, RouteUpdate,
    TopologyReset)
from common.ipc_stream import (
    STREAM_WINDOW, DeliverChunk, StreamAck, StreamDeliver, StreamSent, StreamTransfer,
    TransferChunk)


# One table of codes: the order is the wire contract, append only.
MESSAGE_TYPES: tuple = (
    PeerHello, ConnOpened, ConnClosed, LinkAttach, LinkDetach, LinkFlow, Transfer, Disposition,
    SettleIn, LinkOpen, LinkRefuse, LinkCredit, Deliver, UpdateIn, SettleOut, Drained,
    CloseConnection, DetachLink, ChildStatus, CoreQuery, CoreState, ConfigChange, ConfigResult,
    ReloadRequest, ReloadResult, RouterTransfer, RouterDeliver, ControlIn, ControlSend,
    RouterLinkUp, RouterLinkDown, RouteUpdate, RemoteAddress, LocalAddress, PeerLost,
    PolicyEvent, LinkState, RouterGone, TopologyReset, Reachable, AttachOut, LinkAttached,
    LinkDrain, InDrained, SenderState, DeliverState,
    StreamTransfer, TransferChunk, StreamDeliver, DeliverChunk, StreamSent, StreamAck,
    LogQuery, LogReport, DeliverOrigin, LinkStall, LinkUnstalled, ConnectorStatus,
    DeliveryTag, DeliverTag, LinkLost, PolicyClose,
)
CODE_OF = {cls: code for code, cls in enumerate(MESSAGE_TYPES, start=1)}
TYPE_OF = {code: cls for cls, code in CODE_OF.items()}
_HAS_PAYLOAD = frozenset(cls for cls in MESSAGE_TYPES if cls._fields[-1:] == ("payload",))
# code -> (class, number of fields, carries a payload): one lookup per decoded item
_DECODE = {code: (cls, len(cls._fields), cls in _HAS_PAYLOAD) for code, cls in TYPE_OF.items()}
# class -> (code, carries a payload): one lookup per encoded item
_ENCODE = {cls: (code, cls in _HAS_PAYLOAD) for cls, code in CODE_OF.items()}
# The codec (common/ipccodec.py, compiled: common._ipccodec), bound to this schema's tables.
_CODEC = choose("common._ipccodec", "common.ipccodec").Codec(IPC_VERSION, _ENCODE, _DECODE,
                                                             IpcError)
# encode_frame(peer, messages) -> bytes: the one frame of a batch, for the hot paths that send
# it alone; decode_frame(frame) -> (peer, [message, ...]), payloads as memoryview slices of it.
encode_frame = _CODEC.encode
decode_frame = _CODEC.decode


def encode_batch(peer: int, messages: Iterable[tuple]) -> list:
    """Return the frames of one batch: a list of ONE frame (length of the header, the msgpack
    header, then the payloads back to back), for ``send_multipart``; :func:`encode_frame` is the
    frame itself, for the hot paths that send it alone."""
    return [encode_frame(peer, messages)]


def decode_batch(frames: list) -> tuple:
    """Parse the frames of one batch (a list of one frame) into ``(peer, [message, ...])``; raise
    IpcError if malformed. Payloads come back as zero-copy memoryview slices of the frame."""
    if len(frames) != 1:
        raise IpcError(f"a batch is one frame, not {len(frames)}")
    return decode_frame(frames[0])
