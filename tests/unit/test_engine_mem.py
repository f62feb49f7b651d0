"""The worker's proton engine and the core together, with bytes pumped in memory (no sockets)."""
from __future__ import annotations

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Delivery

import memrouter
from router_io import engine as engine_py

pytestmark = pytest.mark.usefixtures("engine_build")


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


def _producer_consumer(address: str, credit: int) -> tuple:
    """A router with a producer and a consumer connection, a sender and a receiver attached."""
    r = MemRouter()
    producer = r.client("p")
    consumer = r.client("c")
    rcv = consumer.receiver(address, credit=credit)
    snd = producer.sender(address)
    r.run()
    return r, producer, consumer, rcv, snd


def test_client_disconnect_releases_and_modifies():
    r, producer, consumer, rcv, snd = _producer_consumer("w", 1)
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
    in2.local.annotations = {proton.symbol("x-opt-why"): "retry later", proton.symbol("n"): 3}
    in2.update(Delivery.MODIFIED)
    in2.settle()
    r.run()
    assert d1.remote_state == Delivery.REJECTED
    assert d1.remote.condition.name == "app:bad-order"
    assert d1.remote.condition.description == "order 17 is malformed"
    assert d2.remote_state == Delivery.MODIFIED
    assert d2.remote.failed and d2.remote.undeliverable
    assert {str(k): v for k, v in d2.remote.annotations.items()} == {"x-opt-why": "retry later",
                                                                     "n": 3}


def _assert_no_bookkeeping_left(r):
    e = r.engine
    assert not e.in_dlvs and not e.in_ids and not e.out_dlvs


def test_unsettled_exchange_leaves_no_delivery_bookkeeping():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("q", credit=50)
    snd = c.sender("q")
    r.run()
    sent = [c.send(snd, f"m{i}") for i in range(20)]
    r.run()
    got = c.receive_all(rcv)
    assert [m.body for _, m in got] == [f"m{i}" for i in range(20)]
    for d, _ in got:
        d.update(Delivery.ACCEPTED)
        d.settle()
    r.run()
    assert all(d.remote_state == Delivery.ACCEPTED and d.settled for d in sent)
    for d in sent:
        d.settle()
    r.run()
    _assert_no_bookkeeping_left(r)


def test_drain_with_nothing_to_send_consumes_the_credit_then_flow_resumes():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("dq", credit=0)
    snd = c.sender("dq")
    r.run()
    rcv.drain(5)
    r.run()
    assert rcv.credit == 0
    assert not rcv.draining()
    c.send(snd, "after-drain")
    r.run()
    assert c.receive_all(rcv) == []  # no credit: the core holds it
    rcv.flow(1)
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["after-drain"]


def test_sender_settles_first_and_the_outbound_copy_is_settled():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("sf", credit=5)
    snd = c.sender("sf")
    r.run()
    dlv = c.send(snd, "x")
    r.run()
    (got, msg), = c.receive_all(rcv)
    assert msg.body == "x" and not got.settled
    dlv.settle()
    r.run()
    assert got.settled  # remotely settled by the router
    got.settle()
    r.run()
    _assert_no_bookkeeping_left(r)


def test_large_multi_frame_message_arrives_whole():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("big", credit=2)
    snd = c.sender("big")
    r.run()
    body = "".join(chr(65 + i % 26) for i in range(200_000))  # > 12 frames of 16 KiB
    dlv = c.send(snd, body)
    r.run(rounds=500)
    got = c.receive_all(rcv)
    assert len(got) == 1 and got[0][1].body == body
    got[0][0].update(Delivery.ACCEPTED)
    got[0][0].settle()
    r.run()
    assert dlv.remote_state == Delivery.ACCEPTED and dlv.settled


def test_aborted_transfer_is_dropped_and_the_link_goes_on():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("ab", credit=5)
    snd = c.sender("ab")
    r.run()
    part = proton.Message(body="y" * 50_000).encode()
    dlv = snd.delivery(b"aborted")
    snd.send(part[:20_000])
    r.run()
    dlv.abort()
    r.run()
    assert c.receive_all(rcv) == []
    assert snd.credit == 250
    c.send(snd, "next")
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["next"]


def test_abort_of_a_streamed_copy_gives_its_unsent_bytes_back_to_the_budget():
    """A streamed copy aborted while proton still holds bytes of it that were never written to
    the receiver's socket: proton drops them, and so must the connection's byte budget, or a
    later message waits forever for room those bytes will never free (seen as a receiver that
    got a few bytes of the next message and then nothing)."""
    r, sender_client, receiver_client, rcv, snd = _producer_consumer("big", 5)
    r.stalled = receiver_client  # the router's bytes for the receiver stay inside proton
    dlv = snd.delivery(b"aborted")
    snd.send(proton.Message(body=b"x" * 2_000_000).encode()[:1_500_000])
    r.run(rounds=500)
    dlv.abort()
    r.run(rounds=500)
    r.stalled = None
    r.run(rounds=500)
    body = "z" * 700_000  # more than the whole budget (OUT_BUDGET): it needs every byte of it
    sender_client.send(snd, body)
    r.run(rounds=2000)
    if rcv.current is not None and rcv.current.aborted:  # the part proton had framed
        rcv.current.settle()
        r.run(rounds=500)
    assert [m.body for _, m in receiver_client.receive_all(rcv)] == [body]


def test_presettled_flood_through_a_small_receiver_window():
    """As 1.19: pre-settled deliveries give their sender its credit back as they are taken,
    waiting for the receiver's credit or not, so a sender faster than its receiver is not
    held back; what waits is bounded by the receiver link's capacity (linkCapacity, 250),
    beyond which waiting pre-settled deliveries are dropped and counted. Order is kept and
    every delivery is either received or counted as dropped."""
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("flood", credit=40)
    snd = c.sender("flood", settled=True)
    r.run()
    bodies = []
    for i in range(600):
        if snd.credit == 0:
            r.run()
            bodies += [m.body for _, m in c.receive_all(rcv)]
            rcv.flow(40 - rcv.credit)
            r.run()
        c.send(snd, i)
    for _ in range(40):
        r.run()
        bodies += [m.body for _, m in c.receive_all(rcv)]
        rcv.flow(40 - rcv.credit)
    dropped = r.core.snapshot()["router"]["droppedPresettledDeliveries"]
    assert bodies == sorted(bodies) and len(set(bodies)) == len(bodies)
    assert dropped > 0 and len(bodies) + dropped == 600
    _assert_no_bookkeeping_left(r)


def test_receiver_detach_with_unsettled_then_a_new_receiver_gets_traffic():
    r = MemRouter()
    c = r.client("c1")
    rcv = c.receiver("rd", credit=5)
    snd = c.sender("rd")
    r.run()
    d1 = c.send(snd, "one")
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["one"]
    rcv.close()
    r.run()
    assert d1.remote_state == Delivery.MODIFIED and d1.settled
    rcv2 = c.receiver("rd", credit=5)
    r.run()
    d2 = c.send(snd, "two")
    r.run()
    (got, msg), = c.receive_all(rcv2)
    assert msg.body == "two"
    got.update(Delivery.ACCEPTED)
    got.settle()
    r.run()
    assert d2.remote_state == Delivery.ACCEPTED and d2.settled


def test_reconnect_after_drop_routes_again():
    r = MemRouter()
    p = r.client("p")
    c = r.client("c")
    rcv = c.receiver("rc", credit=5)
    snd = p.sender("rc")
    r.run()
    p.send(snd, "a")
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["a"]
    r.disconnect(p)
    p2 = r.client("p2")
    snd2 = p2.sender("rc")
    r.run()
    p2.send(snd2, "b")
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["b"]


# --- both builds agree (convention 9): random settlement sequences ------------------------------
_OPS = ["send", "send_pre", "recv", "accept", "reject", "release", "modify", "settle_sender",
        "flow", "drain", "close_receiver"]


class _RecordingRouter(memrouter.MemRouter):
    """The harness loop, recording every command batch the engine hands to the core."""

    def __init__(self, engine_cls) -> None:
        super().__init__(engine_cls=engine_cls)
        self.log_ = []

    def on_commands(self, commands: list) -> None:
        self.log_.append([(type(c).__name__,) + tuple(c) for c in commands])


def _play(engine_cls, ops):
    r = _RecordingRouter(engine_cls)
    c = r.client("c")
    c.receiver_ = c.receiver("h", credit=3)
    snd = c.sender("h")
    pre = c.sender("h", settled=True)
    r.run()
    sent, received, seen = [], [], []
    for op, n in ops:
        rcv = c.receiver_
        if op == "send":
            sent.append(c.send(snd, f"u{len(sent)}"))
        elif op == "send_pre":
            c.send(pre, f"p{n}")
        elif op == "recv":
            got = c.receive_all(rcv)
            received += [d for d, _ in got]
            seen += [m.body for _, m in got]
        elif op in ("accept", "reject", "release", "modify") and received:
            d = received.pop(0)
            if op == "modify":
                d.local.failed = bool(n & 1)
                d.local.undeliverable = bool(n & 2)
            elif op == "reject":
                d.local.condition = proton.Condition("app:no", f"reason {n}")
            d.update({"accept": Delivery.ACCEPTED, "reject": Delivery.REJECTED,
                      "release": Delivery.RELEASED, "modify": Delivery.MODIFIED}[op])
            d.settle()
        elif op == "settle_sender" and sent:
            sent.pop(0).settle()
        elif op == "flow":
            rcv.flow(n + 1)
        elif op == "drain":
            rcv.drain(n)
        elif op == "close_receiver":
            rcv.close()
            received.clear()
            r.run()
            c.receiver_ = c.receiver("h", credit=n + 1)
        r.run()
    outcome = [(d.remote_state, d.settled) for d in sent]
    return r.log_, outcome, seen


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(_OPS), st.integers(0, 3)), max_size=30))
def test_compiled_and_pure_builds_agree_on_random_sequences(engine_build, ops):
    if engine_build is engine_py.WorkerEngine:
        return  # compared once, from the compiled build's run
    assert _play(engine_build, ops) == _play(engine_py.WorkerEngine, ops)


# --- inter-router connections (connector side) -------------------------------------------------
def _terminus_caps(terminus):
    data = terminus.capabilities
    data.rewind()
    caps = []
    while data.next():
        obj = data.get_object()
        caps.extend(str(e) for e in obj.elements) if isinstance(obj, proton.Array) \
            else caps.append(str(obj))
    return caps


def _inter_router_peer(r, cost=1, remote_cost=None):
    """An inter-router connection made by the router's connector to a bare proton peer standing
    in for the listening router; returns (server side Connection, peer connection, pump)."""
    settings = dict(memrouter.LISTENER, name="ir-connector", role="inter-router", cost=cost)
    out = r.engine.new_connection(settings, "mem:peer", "out")
    transport = proton.Transport(proton.Transport.SERVER)
    transport.sasl().allowed_mechs("ANONYMOUS")
    pc = proton.Connection()
    pc.container = "Router.Peer"
    if remote_cost is not None:
        pc.properties = {proton.symbol("qd.inter-router-cost"): remote_cost}
    collector = proton.Collector()
    pc.collect(collector)
    transport.bind(pc)

    def pump(rounds=50):
        for _ in range(rounds):
            moved = False
            n = out.pending()
            if n > 0:
                buf = bytearray(n)
                n = out.output(buf)
                out.consumed(n)
                transport.push(bytes(buf[:n]))
                moved = True
            size = min(transport.pending(), out.capacity())
            if size > 0:
                data = transport.peek(size)
                transport.pop(len(data))
                out.push(data, len(data))
                moved = True
            if not r.exchange() and not moved:
                return

    pump()
    pc.open()
    pump()
    return out, pc, collector, pump


def test_inter_router_connector_opens_control_and_data_links():
    r = MemRouter(mode="interior")
    out, pc, collector, pump = _inter_router_peer(r, cost=3, remote_cost=5)
    props = pc.remote_properties
    assert props[proton.symbol("qd.annotations-version")] == 1
    assert props[proton.symbol("qd.inter-router-cost")] == 3
    assert pc.remote_container == "Router.Mem"
    # the peer sees 22 links, in creation order: 2 control, then in/out per priority 0..9
    links = []
    while collector.peek() is not None:
        ev = collector.peek()
        if ev.type == proton.Event.LINK_REMOTE_OPEN:
            links.append(ev.link)
        collector.pop()
    assert len(links) == 22
    assert len({lk.session for lk in links}) == 1
    for lk in links:
        assert lk.name.startswith("qdlink.")
        assert lk.remote_source.address is None and lk.remote_target.address is None
    control, data = links[:2], links[2:]
    assert sorted(lk.is_sender for lk in control) == [False, True]
    for lk in control:
        assert _terminus_caps(lk.remote_source) == ["qd.router"]
        assert _terminus_caps(lk.remote_target) == ["qd.router"]
    for k in range(10):
        pair = data[2 * k:2 * k + 2]
        # the router's incoming link is the peer's sender, its outgoing one the peer's receiver
        assert [lk.is_sender for lk in pair] == [True, False]
        for lk in pair:
            assert _terminus_caps(lk.remote_source) == ["qd.router-data"]
            assert _terminus_caps(lk.remote_target) == ["qd.router-data"]
    # the core knows all 22, classified, with priorities by attach order; cost negotiated
    snap = r.core.snapshot()
    [conn] = snap["connections"]
    assert conn["role"] == "inter-router" and conn["dir"] == "out" and conn["cost"] == 5
    views = snap["links"]
    assert [v["linkType"] for v in views] == ["router-control"] * 2 + ["inter-router"] * 20
    assert [v["priority"] for v in views[2:] if v["linkDir"] == "in"] == list(range(10))
    assert [v["priority"] for v in views[2:] if v["linkDir"] == "out"] == list(range(10))
    # the peer accepting the links: the router's receivers grant their capacity as credit
    for lk in links:
        lk.source.copy(lk.remote_source)
        lk.target.copy(lk.remote_target)
        lk.open()
    pump()
    assert all(lk.credit == 250 for lk in links if lk.is_sender)
    assert all(lk.state & proton.Endpoint.LOCAL_ACTIVE for lk in links)


def test_inter_router_cost_not_sent_when_one():
    r = MemRouter(mode="interior")
    out, pc, collector, pump = _inter_router_peer(r, cost=1)
    props = pc.remote_properties
    assert props[proton.symbol("qd.annotations-version")] == 1
    assert proton.symbol("qd.inter-router-cost") not in props
    assert r.core.snapshot()["connections"][0]["cost"] == 1


def test_normal_connection_open_has_no_inter_router_properties():
    r = MemRouter()
    c = r.client("c1")
    props = c.connection.remote_properties
    assert proton.symbol("qd.annotations-version") not in props
    assert proton.symbol("qd.inter-router-cost") not in props


def test_router_capability_refused_on_a_normal_connection():
    r = MemRouter(mode="interior")
    c = r.client("c1")
    snd = c.session.sender("sneaky")
    snd.target.capabilities.put_symbol(proton.symbol("qd.router"))
    snd.source.capabilities.put_symbol(proton.symbol("qd.router"))
    snd.open()
    r.run()
    assert snd.state & proton.Endpoint.REMOTE_CLOSED
    assert snd.remote_condition.name == "amqp:not-allowed"
    assert r.core.snapshot()["links"] == []


# ---- streamed deliveries: bytes that are no AMQP sections; windows held per delivery -----------

RAW = bytes(range(256)) * 1024  # 256 KB that are no AMQP section (past the streaming threshold)


def _raw_receiver_got(rcv: proton.Receiver) -> list:
    """(bytes, aborted) of every delivery that ended on ``rcv``, read raw (no decoding)."""
    out = []
    while rcv.current is not None and (rcv.current.aborted or not rcv.current.partial):
        dlv = rcv.current
        data = b"" if dlv.aborted else rcv.recv(dlv.pending)
        out.append((data, dlv.aborted))
        dlv.settle()
        rcv.advance()
    return out


@pytest.mark.parametrize("size", [3, len(RAW), 3 * len(RAW)])
def test_bytes_that_are_no_message_are_forwarded_as_they_are(size):
    """1.19 takes sections that do not match their descriptors for absent ones and forwards
    such bytes untouched (what it checks before routing is optional); so do we, whole or
    streamed."""
    r, sender_client, receiver_client, rcv, snd = _producer_consumer("raw", 5)
    payload = (b"xyz" + RAW * 3)[:size]
    dlv = snd.delivery(b"raw")
    snd.send(payload)
    snd.advance()
    r.run(rounds=2000)
    assert _raw_receiver_got(rcv) == [(payload, False)]
    assert dlv.remote_state == 0 and not dlv.settled  # waiting for the receiver's outcome


def test_a_streamed_delivery_of_raw_bytes_aborted_reaches_the_receiver_aborted():
    """Bytes that are no AMQP sections, past the streaming threshold, then aborted: the
    receiver gets the delivery started and then aborted (1.19), not nothing; the link goes on."""
    r, sender_client, receiver_client, rcv, snd = _producer_consumer("raw", 5)
    dlv = snd.delivery(b"raw")
    snd.send(RAW)
    r.run(rounds=500)
    assert rcv.current is not None and rcv.current.pending > 0  # on its way before the end
    dlv.abort()
    r.run(rounds=500)
    assert _raw_receiver_got(rcv) == [(b"", True)]
    sender_client.send(snd, "next")
    r.run()
    assert [m.body for _, m in receiver_client.receive_all(rcv)] == ["next"]


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("settled", [False, True])
def test_large_deliveries_to_one_receiver_from_senders_on_one_connection(count, settled):
    """Several large deliveries from senders on one connection to one receiver: the ones
    behind the first fill their windows while it streams, and the connection is still read
    (1.19's Q2 holds a delivery, not its connection), so every one arrives; with the socket
    held by any full window the first never completed."""
    r = MemRouter()
    r.honour_q2 = True
    receiver_client = r.client("consumer")
    rcv = receiver_client.receiver("big", credit=10)
    sender_client = r.client("producer")
    senders = [sender_client.sender("big", settled=settled) for _ in range(count)]
    r.run()
    size = 3_000_000
    bodies = [bytes([65 + i]) * size for i in range(count)]
    payloads = [proton.Message(body=b).encode() for b in bodies]
    deliveries = [s.delivery(str(i).encode()) for i, s in enumerate(senders)]
    step = 500_000
    for offset in range(0, len(payloads[0]), step):  # interleaved, as several senders send
        for s, p in zip(senders, payloads):
            s.send(p[offset:offset + step])
            r.run(rounds=200)
    for s, d in zip(senders, deliveries):
        s.advance()
        if settled:
            d.settle()
    got = []
    for _ in range(50):
        r.run(rounds=500)
        got += receiver_client.receive_all(rcv)
        if len(got) == count:
            break
    assert sorted(bytes(m.body) for _, m in got) == bodies
    for dlv, _ in got:
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()
    r.run()
    if not settled:
        assert [d.remote_state for d in deliveries] == [Delivery.ACCEPTED] * count


def test_the_next_delivery_on_a_link_is_read_when_a_held_one_ends():
    """A streamed delivery past its window whose sender has sent it all, and the next
    delivery of the same link after it, both inside proton while the receiver does not read
    (the connection still read: an inter-router one is never held): once the receiver reads,
    the first ends on the core's acknowledgement, outside proton's events, and the second,
    whose events came while the first was current, is read then too."""
    r, sender_client, receiver_client, rcv, snd = _producer_consumer("seq", 5)
    r.stalled = receiver_client
    first, second = "a" * 3_000_000, "b" * 300_000
    sender_client.send(snd, first)
    sender_client.send(snd, second)
    r.run(rounds=2000)
    r.stalled = None
    got = []
    for _ in range(50):
        r.run(rounds=500)
        got += receiver_client.receive_all(rcv)
        if len(got) == 2:
            break
    assert [m.body for _, m in got] == [first, second]
