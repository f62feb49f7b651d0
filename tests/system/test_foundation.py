"""System tests of the foundation: real proton clients against a launched ``qdrouterd``.

Covers: presettled and unsettled transfer, dispositions travelling back to the sender, a sender
stalled without consumers and resumed when one attaches, deliveries given back when a receiver
goes away, anycast round-robin between consumers, and unmodified example-style clients.
"""
from __future__ import annotations

import time

import pytest
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container
from proton.utils import BlockingConnection, SendException

TIMEOUT = 10


def pump_until(conns, condition, timeout=TIMEOUT):
    """Run several BlockingConnections' event loops until condition() holds (bounded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        for c in conns:
            c.container.timeout = 0.05
            c.container.process()


def test_proton_has_tls_and_sasl():
    import proton
    assert proton.SSL.present(), "python-qpid-proton was built without TLS (libssl-dev missing)"
    assert proton.SASL.extended(), "python-qpid-proton was built without Cyrus SASL"


def test_unsettled_send_receive_accepted(router):
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("orders", credit=10)
        snd = conn.create_sender("orders")
        # A sender only gets credit once the consumer is known; send() waits for settlement
        # and raises SendException unless the outcome is ACCEPTED.
        for i in range(20):
            holder = {}

            def accept_when_arrived():
                msg = rcv.receive(timeout=TIMEOUT)
                holder["body"] = msg.body
                rcv.accept()

            dlv = snd.link.send(Message(body=f"order-{i}"))
            accept_when_arrived()
            conn.wait(lambda: dlv.settled, timeout=TIMEOUT)
            assert dlv.remote_state == Delivery.ACCEPTED
            assert holder["body"] == f"order-{i}"
    finally:
        conn.close()


def test_presettled_send_receive(router):
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("telemetry", credit=100)
        snd = conn.create_sender("telemetry", options=AtMostOnce())
        conn.wait(lambda: snd.link.credit > 0, timeout=TIMEOUT)
        for i in range(50):
            snd.send(Message(body=i))
        got = [rcv.receive(timeout=TIMEOUT).body for _ in range(50)]
        assert got == list(range(50))
    finally:
        conn.close()


@pytest.mark.parametrize("outcome", ["reject", "release", "modify"])
def test_dispositions_travel_back_to_sender(router, outcome):
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("svc", credit=5)
        snd = conn.create_sender("svc")
        dlv = snd.link.send(Message(body="x"))
        rcv.receive(timeout=TIMEOUT)
        if outcome == "reject":
            rcv.reject()
        elif outcome == "release":
            rcv.release(delivered=False)
        else:
            rcv.release(delivered=True)  # MODIFIED
        conn.wait(lambda: dlv.settled, timeout=TIMEOUT)
        expected = {"reject": Delivery.REJECTED, "release": Delivery.RELEASED,
                    "modify": Delivery.MODIFIED}[outcome]
        assert dlv.remote_state == expected
    finally:
        conn.close()


def test_sender_stalls_without_consumer_and_resumes(router):
    sconn = BlockingConnection(router.url, timeout=TIMEOUT)
    rconn = None
    try:
        snd = sconn.create_sender("my-service")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:   # give the router every chance to (wrongly) grant
            sconn.container.process()
            assert snd.link.credit == 0
        rconn = BlockingConnection(router.url, timeout=TIMEOUT)
        rcv = rconn.create_receiver("my-service", credit=10)
        sconn.wait(lambda: snd.link.credit > 0, timeout=TIMEOUT)
        dlv = snd.link.send(Message(body="finally"))
        pump_until([sconn, rconn], lambda: rcv.fetcher.has_message)
        assert rcv.receive(timeout=TIMEOUT).body == "finally"
        rcv.accept()
        pump_until([sconn, rconn], lambda: dlv.settled)
        assert dlv.remote_state == Delivery.ACCEPTED
    finally:
        sconn.close()
        if rconn:
            rconn.close()


def test_receiver_loss_gives_deliveries_back(router):
    sconn = BlockingConnection(router.url, timeout=TIMEOUT)
    rconn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        rcv = rconn.create_receiver("work", credit=0)  # no prefetch: we grant credit by hand
        rcv.link.flow(1)
        snd = sconn.create_sender("work")
        sconn.wait(lambda: snd.link.credit > 0, timeout=TIMEOUT)
        first = snd.link.send(Message(body="in-flight"))
        second = snd.link.send(Message(body="queued"))
        # The first arrives at the receiver, which never settles it; with no more credit the
        # second stays in the router.
        pump_until([sconn, rconn], lambda: rcv.fetcher.has_message)
        assert rcv.fetcher.incoming[0][0].body == "in-flight"  # (message, delivery)
        rconn.close()
        sconn.wait(lambda: first.settled and second.settled, timeout=TIMEOUT)
        # The one the receiver held is in doubt; the one it never got was not delivered.
        assert first.remote_state == Delivery.MODIFIED
        assert first.remote.failed is True
        assert not first.remote.undeliverable
        assert second.remote_state == Delivery.RELEASED
    finally:
        sconn.close()


def test_anycast_round_robin_between_consumers(router):
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        receivers = [conn.create_receiver("rr", credit=100, name=f"rr-{i}") for i in range(3)]
        snd = conn.create_sender("rr")
        for i in range(30):
            snd.link.send(Message(body=i))
        counts = []
        for rcv in receivers:
            n = 0
            while True:
                try:
                    rcv.receive(timeout=1.0)
                except Exception:  # proton.utils raises Timeout when nothing more arrives
                    break
                rcv.accept()
                n += 1
            counts.append(n)
        assert sum(counts) == 30
        assert all(c > 0 for c in counts), counts
    finally:
        conn.close()


def test_send_to_unknown_address_from_anonymous_sender_is_released(router):
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        snd = conn.create_sender(None)
        with pytest.raises(SendException) as info:
            snd.send(Message(address="nobody-home", body="x"))
        assert info.value.state == Delivery.RELEASED
        rcv = conn.create_receiver("somebody-home", credit=1)
        dlv = snd.link.send(Message(address="somebody-home", body="y"))
        assert rcv.receive(timeout=TIMEOUT).body == "y"
        rcv.accept()
        conn.wait(lambda: dlv.settled, timeout=TIMEOUT)
        assert dlv.remote_state == Delivery.ACCEPTED
    finally:
        conn.close()


class _ExampleRecv(MessagingHandler):
    """Shaped like proton's examples/python/simple_recv.py."""

    def __init__(self, url: str, count: int) -> None:
        super().__init__()
        self.url, self.expected, self.received = url, count, []

    def on_start(self, event):
        event.container.create_receiver(self.url)

    def on_message(self, event):
        self.received.append(event.message.body)
        if len(self.received) == self.expected:
            event.receiver.close()
            event.connection.close()


class _ExampleSend(MessagingHandler):
    """Shaped like proton's examples/python/simple_send.py."""

    def __init__(self, url: str, count: int) -> None:
        super().__init__()
        self.url, self.total, self.sent, self.confirmed = url, count, 0, 0

    def on_start(self, event):
        event.container.create_sender(self.url)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < self.total:
            event.sender.send(Message(id=self.sent + 1, body={"sequence": self.sent + 1}))
            self.sent += 1

    def on_accepted(self, event):
        self.confirmed += 1
        if self.confirmed == self.total:
            event.connection.close()


def test_example_clients_exchange_messages(router):
    import threading
    recv = _ExampleRecv(f"{router.url}/examples", 100)
    rc = Container(recv)
    t = threading.Thread(target=rc.run, daemon=True)
    t.start()
    deadline = time.monotonic() + TIMEOUT
    send = _ExampleSend(f"{router.url}/examples", 100)
    sc = Container(send)
    st = threading.Thread(target=sc.run, daemon=True)
    time.sleep(0.3)
    st.start()
    st.join(max(0.1, deadline - time.monotonic()))
    t.join(max(0.1, deadline - time.monotonic()))
    if st.is_alive():
        sc.stop()
    if t.is_alive():
        rc.stop()
    assert send.confirmed == 100
    assert [b["sequence"] for b in recv.received] == list(range(1, 101))


def test_two_workers_share_connections_and_route_between_them(router_factory):
    """Every worker accepts (SO_REUSEPORT); deliveries cross from one worker to another."""
    import re
    r = router_factory(workers=2)
    conns = [BlockingConnection(r.url, timeout=TIMEOUT) for _ in range(16)]
    try:
        receivers = [c.create_receiver(f"pair-{i}", credit=10) for i, c in enumerate(conns[:8])]
        senders = [c.create_sender(f"pair-{i}") for i, c in enumerate(conns[8:])]
        deliveries = [s.link.send(Message(body=f"to-{i}")) for i, s in enumerate(senders)]
        for i, rcv in enumerate(receivers):
            pump_until(conns, lambda: rcv.fetcher.has_message)
            assert rcv.receive(timeout=TIMEOUT).body == f"to-{i}"
            rcv.accept()
        pump_until(conns, lambda: all(d.settled for d in deliveries))
        assert all(d.remote_state == Delivery.ACCEPTED for d in deliveries)
    finally:
        for c in conns:
            c.close()
    # connection ids are minted per worker: worker w of n peers issues w+1, w+1+n, ...
    ids = {int(m) for m in re.findall(r"\[C(\d+)\] Accepted connection", r.proc.output())}
    peers = 3  # two workers and the agent
    assert {(i - 1) % peers for i in ids} == {0, 1}, f"one worker took every connection: {ids}"
