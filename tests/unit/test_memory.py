"""Memory that comes back: per-connection state is dropped when a connection closes, what was
held for a receiver is released when it leaves, outbound bytes inside proton stay within the
connection's budget, and maxMessageSize is enforced (in memory: engine + core, both builds)."""
from __future__ import annotations

import gc
import weakref

import proton
import pytest
from proton import Message

from memrouter import MemRouter
from common import ipc
from router_io import engine as ref_engine

try:
    from router_io import _engine as native_engine
except ImportError:  # pure build only
    native_engine = None

ENGINES = [pytest.param(ref_engine.WorkerEngine, id="pure")]
if native_engine is not None:
    ENGINES.append(pytest.param(native_engine.WorkerEngine, id="compiled"))


class StallRouter(MemRouter):
    """A MemRouter where one client (``stalled``) never reads what the router writes to it."""


def engine_state(e) -> dict:
    return {name: len(getattr(e, name)) for name in (
        "conns", "conns_by_id", "links", "link_ptrs", "in_dlvs", "in_ids", "out_dlvs",
        "queued_out", "oversize", "dirty")}


def core_state(core) -> dict:
    return {"conns": len(core.conns), "links": len(core.links), "addrs": len(core.addrs),
            "in_unsettled": len(core.in_unsettled), "out_unsettled": len(core.out_unsettled)}


def send_all(r: MemRouter, client, snd, count: int, body: str) -> list:
    dlvs = []
    while len(dlvs) < count:
        before = len(dlvs)
        while snd.credit > 0 and len(dlvs) < count:
            dlvs.append(client.send(snd, body))
        r.run()
        if len(dlvs) == before:
            r.run()
            if snd.credit <= 0:
                break
    return dlvs


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_closed_connections_leave_no_state(engine_cls):
    r = MemRouter(engine_cls=engine_cls)
    fresh = core_state(r.core)  # what a router holds before any client: its own addresses
    clients = []
    for i in range(20):
        c = r.client(f"c{i}")
        rcv = c.receiver(f"addr{i % 3}", credit=5)
        snd = c.sender(f"addr{i % 3}")
        c.send(snd, "hello")
        clients.append((c, rcv, snd))
    r.run()
    assert engine_state(r.engine)["conns"] == 20
    refs = [weakref.ref(c.server) for c, _, _ in clients]
    gc.disable()  # what is freed must be freed by reference counting, not by a GC pass
    try:
        for c, _, _ in clients:
            r.disconnect(c)
        clients = c = None
        r.run()
        assert all(v == 0 for v in engine_state(r.engine).values()), engine_state(r.engine)
        assert core_state(r.core) == fresh
        assert [ref for ref in refs if ref() is not None] == []
    finally:
        gc.enable()


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_receiver_leaving_releases_what_was_held_for_it(engine_cls):
    r = StallRouter(engine_cls=engine_cls)
    rc = r.client("receiver")
    rc.receiver("q", credit=3000)
    r.run()
    r.stalled = rc
    sc = r.client("sender")
    snd = sc.sender("q")
    r.run()
    dlvs = send_all(r, sc, snd, 3000, "x" * 4000)
    conn = rc.server
    # beyond the byte budget the deliveries wait in the engine, one copy each, and the link
    # reports no more credit: the core holds the rest at the address; the sender stalls at
    # its link's capacity (linkCapacity: its unsettled deliveries), far from the receiver's 3000
    assert len(conn.out_queue) > 0
    assert len(r.engine.queued_out) == len(conn.out_queue)
    assert conn.out_room <= conn.out_budget
    held_in_core = len(dlvs) - len(r.engine.out_dlvs) - len(conn.out_queue)
    assert held_in_core > 0
    assert len(dlvs) == 250 and snd.credit <= 0
    r.disconnect(rc)
    r.run()
    assert len(conn.out_queue) == 0
    state = engine_state(r.engine)
    assert state["queued_out"] == 0 and state["out_dlvs"] == 0
    assert state["in_dlvs"] == 0  # every delivery went back to the sender
    assert core_state(r.core)["in_unsettled"] == 0 and core_state(r.core)["out_unsettled"] == 0
    # never lost silently: what the receiver's worker had comes back MODIFIED, what the core
    # still held RELEASED (no other consumer)
    outcomes = {d.remote_state for d in dlvs}
    assert outcomes == {proton.Delivery.MODIFIED, proton.Delivery.RELEASED}


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_queued_deliveries_flow_once_the_receiver_reads(engine_cls):
    r = StallRouter(engine_cls=engine_cls)
    rc = r.client("receiver")
    rcv = rc.receiver("q", credit=1200)
    r.run()
    r.stalled = rc
    sc = r.client("sender")
    snd = sc.sender("q")
    r.run()
    dlvs = send_all(r, sc, snd, 1200, "y" * 4000)
    assert len(rc.server.out_queue) > 0
    assert len(dlvs) < 1200  # backpressure: the sender stalled
    r.stalled = None
    got = []
    for _ in range(400):
        r.run()
        got += Client_receive(rcv)
        while snd.credit > 0 and len(dlvs) < 1200:  # the sender goes on as credit comes back
            dlvs.append(sc.send(snd, "y" * 4000))
        if len(got) == 1200:
            break
    assert len(got) == 1200
    assert [m.body for _, m in got[:2]] == ["y" * 4000] * 2
    assert len(rc.server.out_queue) == 0 and len(r.engine.queued_out) == 0


def Client_receive(rcv) -> list:
    from memrouter import Client
    out = Client.receive_all(rcv)
    for dlv, _ in out:
        dlv.update(proton.Delivery.ACCEPTED)
        dlv.settle()
    return out


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_big_message_goes_to_proton_in_slices(engine_cls):
    r = StallRouter(engine_cls=engine_cls)
    rc = r.client("receiver")
    rcv = rc.receiver("big", credit=1)
    r.run()
    sc = r.client("sender")
    snd = sc.sender("big")
    r.run()
    body = b"z" * (3 * ref_engine.OUT_BUDGET)
    dlv = snd.delivery(b"1")
    snd.send(Message(body=body).encode())
    snd.advance()
    for _ in range(400):
        r.run()
        if rcv.current is not None and not rcv.current.partial:
            break
    assert rcv.current is not None and not rcv.current.partial
    msg = Message()
    msg.decode(rcv.recv(rcv.current.pending))
    assert msg.body == body
    assert dlv is not None


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_max_message_size_rejects_closes_link_and_connection(engine_cls):
    r = MemRouter(engine_cls=engine_cls)
    r.engine.set_policy({"maxMessageSize": 1000})
    rc = r.client("receiver")
    rc.receiver("q", credit=10)
    sc = r.client("sender")
    snd = sc.sender("q")
    r.run()
    assert snd.remote_max_message_size == 1000
    small = sc.send(snd, "s" * 100)
    r.run()
    big = sc.send(snd, "b" * 5000)
    r.run()
    assert small.remote_state == proton.Delivery.ACCEPTED or small.remote_state == 0
    assert big.remote_state == proton.Delivery.REJECTED and big.settled
    assert big.remote.condition.name == ref_engine.MESSAGE_SIZE_EXCEEDED
    assert snd.state & proton.Endpoint.REMOTE_CLOSED
    assert sc.connection.state & proton.Endpoint.REMOTE_CLOSED
    assert sc.connection.remote_condition.name == "amqp:connection:forced"
    assert sc.connection.remote_condition.description == ref_engine.OVERSIZE_DESCRIPTION
    assert r.engine.oversize == {}


def test_max_message_size_resolution():
    e = ref_engine.WorkerEngine("R", 0, 1)
    conn = e.new_connection({"name": "l", "saslMechanisms": "ANONYMOUS",
                             "idleTimeoutSeconds": 0}, "h:1", "in")
    assert e.max_message_size(conn, "u", "") == 0
    e.set_policy({"maxMessageSize": 500})
    assert e.max_message_size(conn, "u", "") == 500
    conn.settings["maxMessageSize"] = 300  # the listener's replaces the policy's
    assert e.max_message_size(conn, "u", "") == 300
    e.set_policy({"maxMessageSize": 500, "enableVhostPolicy": True, "defaultVhost": "$default"},
                 [{"hostname": "$default", "maxMessageSize": 700,
                   "groups": {"small": {"users": "alice, bob", "maxMessageSize": 50},
                              "$default": {}}},
                  {"hostname": "big.example", "maxMessageSize": 9000}])
    assert e.max_message_size(conn, "carol", "") == 700
    assert e.max_message_size(conn, "bob", "") == 50
    assert e.max_message_size(conn, "bob", "big.example") == 9000
    out = e.new_connection({"name": "c", "role": "inter-router"}, "h:2", "out")
    assert e.max_message_size(out, "u", "") == 0
    assert ipc.DIR_IN is not None
