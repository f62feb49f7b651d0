"""maxMessageSize against a launched router, with a real proton client (policy and listener).

As Qpid Dispatch 1.19: the receiving link advertises max-message-size; a larger message is
settled REJECTED (amqp:link:message-size-exceeded), and the link and the connection are closed
(amqp:connection:forced, "Message size exceeded"). Smaller messages pass.
"""
from __future__ import annotations

import time

import proton
from proton import Message

from conftest import free_port

TIMEOUT = 15.0


class Conn:
    """A proton engine on a blocking-free socket, pumped by hand (bounded waits)."""

    def __init__(self, port: int) -> None:
        import socket
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setblocking(False)
        self.transport = proton.Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.conn = proton.Connection()
        self.conn.container = "limits-test"
        self.transport.bind(self.conn)
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()

    def pump(self, until, timeout: float = TIMEOUT) -> None:
        import select
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError("timed out")
            while self.transport.pending() > 0:
                try:
                    n = self.sock.send(self.transport.peek(min(self.transport.pending(), 65536)))
                except BlockingIOError:
                    break
                except OSError:
                    self.transport.close_head()
                    break
                self.transport.pop(n)
            cap = self.transport.capacity()
            r, _, _ = select.select([self.sock] if cap > 0 else [], [], [], 0.05)
            if r:
                try:
                    data = self.sock.recv(min(cap, 65536))
                except OSError:
                    data = b""
                if data:
                    self.transport.push(data)
                else:
                    self.transport.close_tail()
                    return

    def close(self) -> None:
        self.sock.close()


def _exchange(router, size_ok: int, size_big: int) -> tuple:
    rc = Conn(router.port)
    rcv = rc.session.receiver("r")
    rcv.source.address = "limits"
    rcv.open()
    rcv.flow(10)
    rc.pump(lambda: rcv.state & proton.Endpoint.REMOTE_ACTIVE)
    sc = Conn(router.port)
    snd = sc.session.sender("s")
    snd.target.address = "limits"
    snd.open()
    sc.pump(lambda: snd.credit > 0)
    small = snd.delivery(b"1")
    snd.send(Message(body=b"s" * size_ok).encode())
    snd.advance()
    sc.pump(lambda: sc.transport.pending() == 0, 5)
    rc.pump(lambda: rcv.current is not None and not rcv.current.partial)
    got = Message()
    got.decode(rcv.recv(rcv.current.pending))
    rcv.current.update(proton.Delivery.ACCEPTED)
    rcv.current.settle()
    rc.pump(lambda: rc.transport.pending() == 0, 5)
    sc.pump(lambda: small.remote_state != 0)
    big = snd.delivery(b"2")
    snd.send(Message(body=b"b" * size_big).encode())
    snd.advance()
    sc.pump(lambda: bool(sc.conn.state & proton.Endpoint.REMOTE_CLOSED))
    out = (snd.remote_max_message_size, small.remote_state, big.remote_state,
           big.remote.condition, snd.state, sc.conn.remote_condition, len(got.body))
    rc.close()
    sc.close()
    return out


def _check(result, limit: int, size_ok: int) -> None:
    advertised, small, big, big_cond, link_state, conn_cond, received = result
    assert advertised == limit
    assert small == proton.Delivery.ACCEPTED
    assert big == proton.Delivery.REJECTED
    assert big_cond is not None and big_cond.name == "amqp:link:message-size-exceeded"
    assert link_state & proton.Endpoint.REMOTE_CLOSED
    assert conn_cond is not None and conn_cond.name == "amqp:connection:forced"
    assert conn_cond.description == "Message size exceeded"
    assert received == size_ok


def test_policy_max_message_size(router_factory):
    router = router_factory("""
        policy {
            maxMessageSize: 10000
        }
        """)
    _check(_exchange(router, 1000, 50000), 10000, 1000)
    router.proc.wait_for_line("maxMessageSize exceeded", timeout=10)


def test_listener_max_message_size(router_factory):
    port = free_port()
    router = router_factory(f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            maxMessageSize: 4000
        }}
        """)
    router.port = port
    _check(_exchange(router, 1000, 20000), 4000, 1000)


def test_no_limit_by_default(router):
    rc = Conn(router.port)
    rcv = rc.session.receiver("r")
    rcv.source.address = "nolimit"
    rcv.open()
    rcv.flow(1)
    rc.pump(lambda: rcv.state & proton.Endpoint.REMOTE_ACTIVE)
    sc = Conn(router.port)
    snd = sc.session.sender("s")
    snd.target.address = "nolimit"
    snd.open()
    sc.pump(lambda: snd.credit > 0)
    dlv = snd.delivery(b"1")
    snd.send(Message(body=b"n" * 200000).encode())
    snd.advance()
    sc.pump(lambda: sc.transport.pending() == 0)
    rc.pump(lambda: rcv.current is not None and not rcv.current.partial)
    rcv.current.update(proton.Delivery.ACCEPTED)
    rcv.current.settle()
    rc.pump(lambda: rc.transport.pending() == 0, 5)
    sc.pump(lambda: dlv.remote_state != 0)
    assert dlv.remote_state == proton.Delivery.ACCEPTED
    assert not snd.remote_max_message_size
    rc.close()
    sc.close()
