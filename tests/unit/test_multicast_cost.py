"""The multicast lead over 1.19 (docs/scaling.md: less CPU per delivery with thousands of
receivers) rests on what one multicast message costs the core, counted here, not timed:

* one Deliver per receiver and nothing else per copy, each carrying the very payload object
  that came in (no copy, no decode, no re-encode of the body);
* the frames to the workers: the payload once per copy plus a small bounded header per copy;
* one outcome back to the sender once every copy is settled (not one per copy), and nothing
  left behind in the core's tables.
"""
from __future__ import annotations

from common import ipc
from common.ipc import STATE_ACCEPTED, Deliver, Disposition, LinkCredit, SettleOut, UpdateIn

from test_core import Harness, core_cls  # noqa: F401 - the fixture over both builds

RECEIVERS = 5000
HEADER_BYTES_PER_COPY = 24  # msgpack of (code, dlv id, link id, settled, payload length)


def test_one_multicast_message_costs_one_deliver_per_receiver_and_one_outcome(core_cls):  # noqa: F811
    h = Harness(core_cls, default_distribution="multicast")
    h.do(ipc.PeerHello(1, "worker", 2), peer=1)
    h.conn(1, peer=0).sender(10, 1, "fan", peer=0)
    h.conn(2, peer=1)
    for i in range(RECEIVERS):  # half on each worker
        peer = i % 2
        h.receiver(100 + i, 1 if peer == 0 else 2, "fan", credit=1, peer=peer)
    h.effects()
    payload = b"x" * 200
    dlv = h.send(10, payload=payload)
    effects = h.effects()
    delivers = {peer: [e for e in fx if isinstance(e, Deliver)] for peer, fx in effects.items()}
    assert sum(len(d) for d in delivers.values()) == RECEIVERS
    assert len(delivers[0]) == len(delivers[1]) == RECEIVERS // 2
    others = [e for fx in effects.values() for e in fx if not isinstance(e, Deliver)]
    assert len(others) <= 1, others[:5]  # at most the sender's credit back
    assert all(d.payload is payload for ds in delivers.values() for d in ds)
    for peer, fx in effects.items():
        frame = ipc.encode_frame(-1, fx)
        copies = len(delivers[peer])
        assert len(frame) <= copies * (len(payload) + HEADER_BYTES_PER_COPY) + 64, peer

    # every copy accepted and settled: one outcome for the sender, none per copy
    for peer, ds in delivers.items():
        h.do(*[Disposition(d.dlv_id, STATE_ACCEPTED, True, None) for d in ds], peer=peer)
    back = h.effects()
    to_sender = back.get(0, [])
    assert [e for e in to_sender if isinstance(e, UpdateIn)] == [
        UpdateIn(dlv, STATE_ACCEPTED, True, None)]
    assert all(isinstance(e, (UpdateIn, LinkCredit, SettleOut)) for fx in back.values()
               for e in fx)
    assert len(h.core.out_unsettled) == 0 and len(h.core.in_unsettled) == 0
