"""The worker's proton engine and the core together, with bytes pumped in memory (no sockets)."""
from __future__ import annotations

import functools

import proton
import pytest
from proton import Delivery

import memrouter
from router_io import engine as engine_py


def _compiled_engine():
    try:
        from router_io import _engine
    except ImportError:
        return None
    return _engine.WorkerEngine


@pytest.fixture(params=["python", "cython"], autouse=True)
def engine_build(request, monkeypatch):
    """Every test here runs against the pure-Python engine and the Cython-compiled one."""
    cls = engine_py.WorkerEngine if request.param == "python" else _compiled_engine()
    if cls is None:
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    monkeypatch.setattr(memrouter, "MemRouter", functools.partial(memrouter.MemRouter,
                                                                  engine_cls=cls))
    return cls


def MemRouter(*args, **kwargs):  # noqa: N802 - resolved at call time so the fixture applies
    return memrouter.MemRouter(*args, **kwargs)


def test_attach_gets_answered_and_capabilities_offered(engine_build):
    r = MemRouter()
    assert type(r.engine) is engine_build
    c = r.client("c1")
    assert c.connection.remote_container == "Router.Mem"
    assert proton.symbol("ANONYMOUS-RELAY") in (c.connection.remote_offered_capabilities or [])
    props = c.connection.remote_properties
    assert props[proton.symbol("product")] == "qpid-dispatch-router"
    assert isinstance(props[proton.symbol("qd.conn-id")], int)
    rcv = c.receiver("q1")
    r.run()
    assert rcv.state & proton.Endpoint.REMOTE_ACTIVE
    assert rcv.remote_source.address == "q1"


def test_unsettled_message_and_accept_travel_end_to_end():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("q1", credit=5)
    snd = c.sender("q1")
    r.run()
    assert snd.credit == 250
    dlv = c.send(snd, "hello")
    r.run()
    got = c.receive_all(rcv)
    assert [m.body for _, m in got] == ["hello"]
    got[0][0].update(Delivery.ACCEPTED)
    got[0][0].settle()
    r.run()
    assert dlv.remote_state == Delivery.ACCEPTED
    assert dlv.settled


def test_sender_has_no_credit_until_a_consumer_attaches():
    r = MemRouter()
    c = r.client("c1")
    snd = c.sender("later")
    r.run()
    assert snd.credit == 0
    c.receiver("later")
    r.run()
    assert snd.credit == 250


def test_presettled_forwarded_presettled():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("t", credit=10)
    snd = c.sender("t", settled=True)
    r.run()
    for i in range(3):
        c.send(snd, f"m{i}")
    r.run()
    got = c.receive_all(rcv)
    assert [m.body for _, m in got] == ["m0", "m1", "m2"]
    assert all(d.settled for d, _ in got)  # remotely settled: it came presettled


def test_dynamic_source_gets_a_topo_address_that_routes_back():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver(None, dynamic=True)
    r.run()
    addr = rcv.remote_source.address
    assert addr.startswith("amqp:/_topo/0/Router.Mem/temp.")
    snd = c.sender(None)  # anonymous
    r.run()
    c.send(snd, "reply", to=addr)
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["reply"]


def test_client_disconnect_releases_and_modifies():
    r = MemRouter()
    producer = r.client("p")
    consumer = r.client("c")
    rcv = consumer.receiver("w", credit=1)
    snd = producer.sender("w")
    r.run()
    d1 = producer.send(snd, "one")
    d2 = producer.send(snd, "two")
    r.run()
    assert [m.body for _, m in consumer.receive_all(rcv)] == ["one"]
    r.disconnect(consumer)
    r.run()
    assert d1.remote_state == Delivery.MODIFIED and d1.settled
    assert d2.remote_state == Delivery.RELEASED and d2.settled


def test_malformed_message_on_anonymous_link_is_rejected_and_router_goes_on():
    r = MemRouter()
    c = r.client("c1")
    snd = c.sender(None)
    r.run()
    bad = snd.delivery(b"bad")
    snd.send(b"\x00\x53\x73\xff\xff")  # properties descriptor then garbage
    snd.advance()
    r.run()
    assert bad.remote_state == Delivery.REJECTED
    assert bad.remote.condition.name == "amqp:decode-error"
    rcv = c.receiver("ok")
    r.run()
    c.send(snd, "fine", to="ok")
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["fine"]


def test_rejected_condition_and_modified_flags_reach_the_sender():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("q", credit=5)
    snd = c.sender("q")
    r.run()
    d1 = c.send(snd, "a")
    d2 = c.send(snd, "b")
    r.run()
    (in1, _), (in2, _) = c.receive_all(rcv)
    in1.local.condition = proton.Condition("app:bad-order", "order 17 is malformed")
    in1.update(Delivery.REJECTED)
    in1.settle()
    in2.local.failed = True
    in2.local.undeliverable = True
    in2.update(Delivery.MODIFIED)
    in2.settle()
    r.run()
    assert d1.remote_state == Delivery.REJECTED
    assert d1.remote.condition.name == "app:bad-order"
    assert d1.remote.condition.description == "order 17 is malformed"
    assert d2.remote_state == Delivery.MODIFIED
    assert d2.remote.failed and d2.remote.undeliverable
