"""Mobile-address sync (MAU/MAR) with a fake clock. No processes, no sockets.

    A ---- B       A announces its local addresses; B learns them.
"""
from __future__ import annotations

from agent.routing.effects import RemoteAddressAdded, RemoteAddressRemoved, Send
from agent.routing.messages import (ABSOLUTE, MAR, MAU, MAU_ALL_ADDRESS, decode)
from agent.routing.mobile import MobileSync


def only_send(effects):
    (send,) = [e for e in effects if isinstance(e, Send)]
    return send, decode(send.opcode, send.body)


def test_add_list_becomes_one_differential_mau_per_interval():
    a = MobileSync("A")
    assert a.tick(0.0) == ([], False)
    a.add_local("M0x", 2)
    a.add_local("M0y", 3)
    assert a.next_deadline() == 1.0
    assert a.tick(0.5) == ([], False)
    effects, advanced = a.tick(1.0)
    send, mau = only_send(effects)
    assert advanced and send.to == MAU_ALL_ADDRESS
    assert mau == MAU("A", 1, "0", 1, add=("M0x", "M0y"), delete=(), hints=(2, 3))
    assert a.tick(2.0) == ([], False)


def test_add_then_remove_within_an_interval_cancels():
    a = MobileSync("A")
    a.tick(0.0)
    a.add_local("M0x", 2)
    a.remove_local("M0x")
    assert a.tick(1.0) == ([], False)
    a.add_local("M0x", 2)
    a.tick(2.0)
    a.remove_local("M0x")
    a.add_local("M0x", 2)                         # delete then re-add: nothing to tell
    assert a.tick(3.0) == ([], False) and a.mobile_seq == 1


def test_differential_applied_only_in_sequence_else_one_mar():
    b = MobileSync("B")
    out = b.handle_mau(MAU("A", mobile_seq=1, add=("M0x",), hints=(2,)), 0.0)
    assert out == [RemoteAddressAdded("M0x", "A", 2)]
    gap = b.handle_mau(MAU("A", mobile_seq=3, add=("M0z",), hints=(2,)), 0.0)
    send, mar = only_send(gap)
    assert send.to == "amqp:/_topo/0/A/qdrouter.ma" and mar == MAR("B", 1, "0", have_seq=1)
    assert b.handle_mau(MAU("A", mobile_seq=4, add=("M0w",)), 0.0) == []        # one MAR only
    out = b.handle_mau(MAU("A", mobile_seq=4, kind=ABSOLUTE, exist=("M0z", "M0w"), hints=(1, 1)),
                       0.0)
    assert set(out) == {RemoteAddressRemoved("M0x", "A"), RemoteAddressAdded("M0z", "A", 1),
                        RemoteAddressAdded("M0w", "A", 1)}
    assert b.seq_of("A") == 4
    assert b.handle_mau(MAU("A", mobile_seq=5, add=(), delete=("M0z",)), 0.0) == [
        RemoteAddressRemoved("M0z", "A")]


def test_mar_below_my_seq_answered_with_absolute_mau_of_the_announced_set():
    a = MobileSync("A")
    a.tick(0.0)
    a.add_local("M0x", 2)
    a.tick(1.0)
    a.add_local("M0y", 3)                         # pending: not in the absolute MAU yet
    a.remove_local("M0x")                         # pending delete: still in it
    send, mau = only_send(a.handle_mar(MAR("B", have_seq=0)))
    assert send.to == "amqp:/_topo/0/B/qdrouter.ma"
    assert mau == MAU("A", 1, "0", 1, kind=ABSOLUTE, exist=("M0x",), hints=(2,))
    assert a.handle_mar(MAR("B", have_seq=1)) == []


def test_flush_router_removes_its_addresses():
    b = MobileSync("B")
    b.handle_mau(MAU("A", mobile_seq=1, add=("M0x", "M0y"), hints=(2, 2)), 0.0)
    assert set(b.flush_router("A")) == {RemoteAddressRemoved("M0x", "A"),
                                       RemoteAddressRemoved("M0y", "A")}
    assert b.seq_of("A") == 0 and b.remote_addresses() == {}
