"""The IPC schema: every message type round-trips, payloads stay byte-identical, bad input fails."""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, strategies as st

from common import ipc

SAMPLES = {
    ipc.PeerHello: (0, "worker", 123),
    ipc.ConnOpened: (1, "normal", "in", "127.0.0.1:5", "c", "l", "u", "ANONYMOUS", False, 250,
                     3),
    ipc.ConnClosed: (1, ""),
    ipc.LinkAttach: (3, 1, ipc.DIR_IN, "name", None, False, True, 250, "inter-router",
                     ipc.terminus(ipc.TERMINUS_SOURCE, None),
                     ipc.terminus(ipc.TERMINUS_COORDINATOR, None), [1, 0]),
    ipc.LinkDetach: (3, True, "amqp:x: y"),
    ipc.LinkLost: (3,),
    ipc.LinkFlow: (3, 10, False),
    ipc.Transfer: (5, 3, "addr", False, 4, b"\x00Sw\xa1\x02hi"),
    ipc.Disposition: (7, ipc.STATE_REJECTED, True, {"condition": "c", "description": "d"}),
    ipc.SettleIn: (5, 0),
    ipc.LinkOpen: (3, "amqp:/_topo/0/R/temp.x"),
    ipc.LinkRefuse: (3, "amqp:not-allowed", "no"),
    ipc.LinkCredit: (3, 250),
    ipc.Deliver: (7, 4, True, b"payload"),
    ipc.UpdateIn: (5, ipc.STATE_MODIFIED, True, {"failed": True, "undeliverable": False}),
    ipc.SettleOut: (7, ipc.STATE_ACCEPTED),
    ipc.Drained: (4,),
    ipc.CloseConnection: (1, "amqp:connection:forced", "bye"),
    ipc.DetachLink: (3, "amqp:resource-deleted", "gone"),
    ipc.ChildStatus: ("worker", 0, 12, "ready", ""),
    ipc.CoreQuery: (1, "snapshot"),
    ipc.CoreState: (1, {"router": {"addrCount": 1}, "links": [{"identity": "3"}]}),
    ipc.ConfigChange: (2, "create", "listener", {"host": "127.0.0.1", "port": "5673"}),
    ipc.ConfigResult: (2, 0, False, "Address already in use"),
    ipc.ReloadRequest: (3, [{"op": "create", "type": "listener", "name": "l2",
                             "attributes": {"host": "127.0.0.1", "port": "5674"}}]),
    ipc.ReloadResult: (3, False, [0, 2], "create listener l2: Address already in use"),
    ipc.RouterTransfer: (5, 6, "amqp:/_topo/0/all/qdrouter", True, 9, 0, "0/R2", ["0/R2"],
                         b"raw"),
    ipc.RouterDeliver: (7, 8, False, "orders", 1, b"\x00Sp"),
    ipc.ControlIn: (3, b"hello"),
    ipc.ControlSend: (-1, "amqp:/_topo/0/R2/qdrouter", b"lsr"),
    ipc.RouterLinkUp: (3, 5, "Router.B"),
    ipc.RouterLinkDown: (3,),
    ipc.RouteUpdate: ({"R2": "R2", "R3": "R2"}, {"R2": 1, "R3": 2}, {"R2": [], "R3": ["R4"]},
                      {"R2": 3}),
    ipc.RemoteAddress: ("M0orders", "R2", True, 3),
    ipc.LocalAddress: ("M0orders", False, 2),
    ipc.PeerLost: (1, 4242),
    ipc.PolicyEvent: ("vhost.example", "sender", 1),
    ipc.PolicyClose: (7, "vhost.example", "127.0.0.1:45678", 1, 2, 0, 3),
    ipc.LinkState: ("R2", 1700000000, 1, 2, 7, {"R1": 1, "R3": 5}, {}),
    ipc.RouterGone: ("R2",),
    ipc.TopologyReset: (),
    ipc.Reachable: (["R2", "R3"],),
    ipc.AttachOut: (ipc.CORE_ID_BASE, 3, ipc.DIR_OUT, "auto.1", None,
                    dict(ipc.terminus(ipc.TERMINUS_TARGET, "queue.a"), capabilities=b"\xa3\x05queue"),
                    [0, 0], 250),
    ipc.LinkAttached: (ipc.CORE_ID_BASE, None, ipc.terminus(ipc.TERMINUS_TARGET, "queue.a"),
                       [0, 0]),
    ipc.LinkDrain: (ipc.CORE_ID_BASE + 1,),
    ipc.InDrained: (ipc.CORE_ID_BASE + 1,),
    ipc.SenderState: (7, 0x34, {"data": b"\xc0\x06\x01\xa0\x03tx1"}),
    ipc.DeliverState: (8, 0x34, None),
    ipc.DeliveryTag: (9, 3, b"client-tag"),
    ipc.DeliverTag: (10, b"\x00" * 32),
    ipc.DeliverOrigin: (9, 41),
    ipc.StreamTransfer: (5, 6, "q", False, 4, True, 1, "0/A", ["0/A"], b"head"),
    ipc.TransferChunk: (5, False, False, b"body"),
    ipc.StreamDeliver: (9, 3, False, None, -1, b"head"),
    ipc.DeliverChunk: (9, True, True, b""),
    ipc.StreamSent: (9, 65536),
    ipc.StreamAck: (5, 65536),
    ipc.LogQuery: (4,),
    ipc.LogReport: (4, -1, {"counts": {"SERVER": [0, 0, 2, 1, 0, 0, 0]},
                            "entries": [["SERVER", "info", "[C1] x", "/w.py", 9, 1.5]]}),
    ipc.LinkStall: (12, True),
    ipc.LinkUnstalled: (12, 248),
    ipc.ConnectorStatus: ("broker", "CONNECTING", "[C3] Connection to h:5672 failed: proton:io "
                                                  "Connection refused - disconnected h:5672"),
}


def test_every_type_has_a_sample():
    assert set(SAMPLES) == set(ipc.MESSAGE_TYPES)


@pytest.mark.parametrize("cls", ipc.MESSAGE_TYPES, ids=lambda c: c.__name__)
def test_round_trip(cls):
    msg = cls(*SAMPLES[cls])
    peer, out = ipc.decode_batch(ipc.encode_batch(3, [msg]))
    assert peer == 3
    assert len(out) == 1 and type(out[0]) is cls
    assert [bytes(v) if isinstance(v, memoryview) else v for v in out[0]] == list(msg)


payloads = st.binary(max_size=3000)


@given(st.lists(st.tuples(st.sampled_from(["t", "d", "c"]), payloads), max_size=40))
def test_batches_keep_order_and_payload_bytes(spec):
    msgs = []
    for i, (kind, data) in enumerate(spec):
        if kind == "t":
            msgs.append(ipc.Transfer(i, 1, None, bool(i % 2), i % 10, data))
        elif kind == "d":
            msgs.append(ipc.Deliver(i, 2, False, data))
        else:
            msgs.append(ipc.LinkCredit(i, len(data)))
    frames = ipc.encode_batch(0, msgs)
    assert len(frames) == 1  # one frame, whatever the batch size
    assert ipc.decode_frame(frames[0])[1] == ipc.decode_batch(frames)[1]
    _, out = ipc.decode_batch(frames)
    assert [type(m) for m in out] == [type(m) for m in msgs]
    for got, sent in zip(out, msgs):
        if type(sent) in (ipc.Transfer, ipc.Deliver):
            assert bytes(got.payload) == bytes(sent.payload)
            assert tuple(got[:-1]) == tuple(sent[:-1])
        else:
            assert got == sent


def test_forwarded_slices_reencode_unchanged():
    """The core re-batches received payload slices for another peer without touching them."""
    _, inbound = ipc.decode_batch(ipc.encode_batch(0, [
        ipc.Transfer(1, 1, None, False, 4, b"first"), ipc.Transfer(2, 1, None, False, 4, b"2nd")]))
    outbound = [ipc.Deliver(9, 5, False, inbound[1].payload),
                ipc.Deliver(10, 5, False, inbound[0].payload)]
    _, out = ipc.decode_batch(ipc.encode_batch(-1, outbound))
    assert [bytes(m.payload) for m in out] == [b"2nd", b"first"]


def _frame(header: list, payloads: bytes = b"") -> bytes:
    packed = msgpack.packb(header)
    return len(packed).to_bytes(4, "little") + packed + payloads


@pytest.mark.parametrize("frames", [
    [],
    [b""],
    [b"\x01\x00"],                                          # shorter than the header length
    [b"\xff\x00\x00\x00\x93"],                              # header length past the end
    [b"\x01\x00\x00\x00\xc1"],                              # not msgpack
    [_frame([99, 0, []])],                                    # another version
    [_frame([ipc.IPC_VERSION, 0, [[999, 1]]])],               # unknown code
    [_frame([ipc.IPC_VERSION, 0, [[ipc.CODE_OF[ipc.Deliver], 1, 2, False, 10]]], b"short")],
    [_frame([ipc.IPC_VERSION, 0, [[ipc.CODE_OF[ipc.Deliver], 1, 2, False, -3]]], b"abc")],
    [_frame([ipc.IPC_VERSION, 0, [[ipc.CODE_OF[ipc.LinkCredit], 1]]])],
    [_frame([ipc.IPC_VERSION, 0, []], b"extra")],             # bytes no item accounts for
    [_frame([ipc.IPC_VERSION, 0, []]), b""],                  # two frames
    [msgpack.packb([ipc.IPC_VERSION, 0, []])],                # the former two-frame header
])
def test_malformed_batches_raise_ipc_error(frames):
    with pytest.raises(ipc.IpcError):
        ipc.decode_batch(frames)


def test_id_allocator_partitions_ids():
    a, b = ipc.id_allocator(0, 2), ipc.id_allocator(1, 2)
    ids_a = {a() for _ in range(100)}
    ids_b = {b() for _ in range(100)}
    assert not ids_a & ids_b
    with pytest.raises(ValueError):
        ipc.id_allocator(2, 2)


def test_a_restarted_peer_never_mints_its_predecessors_ids():
    first, restarted = ipc.id_allocator(1, 3), ipc.id_allocator(1, 3, generation=1)
    old = {first() for _ in range(10000)}
    new = {restarted() for _ in range(10000)}
    others = {ipc.id_allocator(p, 3, g)() for p in (0, 2) for g in (0, 1)}
    assert not old & new and not (old | new) & others


def test_short_type_strips_the_management_prefix_only():
    from common.ipc import short_type
    assert short_type("org.apache.qpid.dispatch.listener") == "listener"
    assert short_type("org.apache.qpid.dispatch.router.config.address") == "router.config.address"
    assert short_type("listener") == "listener"
    assert short_type("x.org.apache.qpid.dispatch.listener") == "x.org.apache.qpid.dispatch.listener"
