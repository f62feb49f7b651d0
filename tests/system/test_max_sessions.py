"""maxSessions on a listener or connector sets the open's channel-max, as Qpid Dispatch 1.19.

What 1.19 does (observed with a raw proton transport against a real 1.19 router; these tests
run against it too when ``QDROUTERD_1X`` names its install prefix): the open it sends carries
``channel-max`` = maxSessions - 1 (maxSessions 10 -> 9, 20 -> 19; 32767 when maxSessions is not
set), and a client that pipelines more begins than that with its open (a begin on channel 10
when the channel-max is 9) is closed with ``amqp:connection:framing-error`` "remote channel 10
is above negotiated channel_max 9.". A connector's maxSessions is the channel-max of the open
the router sends to its peer.

Every router and client is real (loopback); every wait is bounded.
"""
from __future__ import annotations

import os
import select
import socket
import time

import proton
import pytest

from conftest import free_port

TIMEOUT = 10.0
ONE_X = os.environ.get("QDROUTERD_1X", "")


def _listener(port: int, max_sessions: int) -> str:
    extra = f"maxSessions: {max_sessions}" if max_sessions else ""
    return f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            {extra}
        }}
        """


@pytest.fixture(params=["ours", "1.x"])
def start(request, router_factory, tmp_path):
    """start(body) -> None: a fresh router (ours or 1.19) with ``body`` appended."""
    procs = []

    def make(body: str) -> None:
        if request.param == "ours":
            router_factory(extra=body)
            return
        if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
            pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")
        from test_autolinks_1x import start_1x
        procs.append(start_1x(tmp_path, f"X{free_port()}", body).proc)

    yield make
    for proc in procs:
        proc.stop()


class RawClient:
    """A proton client transport on a socket: an open and ``sessions`` begins go out at once
    (before the router's open arrives, so nothing holds them to its channel-max)."""

    def __init__(self, port: int, sessions: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setblocking(False)
        self.transport = proton.Transport()
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.conn = proton.Connection()
        self.conn.container = "max-sessions-test"
        self.transport.bind(self.conn)
        self.conn.open()
        for _ in range(sessions):
            self.conn.session().open()
        self.ended = False

    def pump(self, until, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not until() and not self.ended:
            if time.monotonic() > deadline:
                raise AssertionError("timed out")
            while self.transport.pending() > 0:
                try:
                    n = self.sock.send(self.transport.peek(self.transport.pending()))
                except BlockingIOError:
                    break
                except OSError:
                    self.transport.close_head()
                    break
                self.transport.pop(n)
            r, _, _ = select.select([self.sock], [], [], 0.05)
            if r:
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    data = b""
                if data:
                    self.transport.push(data)
                else:
                    self.transport.close_tail()
                    self.ended = True

    def close(self) -> None:
        self.sock.close()


def _remote_open(port: int, sessions: int = 1) -> RawClient:
    client = RawClient(port, sessions)
    client.pump(lambda: client.conn.state & proton.Endpoint.REMOTE_ACTIVE
                or client.conn.state & proton.Endpoint.REMOTE_CLOSED)
    return client


@pytest.mark.parametrize("max_sessions,channel_max", [(10, 9), (20, 19), (0, 32767)])
def test_listener_max_sessions_is_channel_max(start, max_sessions, channel_max):
    port = free_port()
    start(_listener(port, max_sessions))
    client = _remote_open(port)
    try:
        assert client.conn.state & proton.Endpoint.REMOTE_ACTIVE
        assert client.transport.remote_channel_max == channel_max
    finally:
        client.close()


def test_more_begins_than_channel_max_closes_the_connection(start):
    port = free_port()
    start(_listener(port, 10))
    client = RawClient(port, 12)  # channels 0..11: 10 and 11 are above channel-max 9
    try:
        client.pump(lambda: client.conn.state & proton.Endpoint.REMOTE_CLOSED)
        cond = client.conn.remote_condition
        assert cond is not None
        assert cond.name == "amqp:connection:framing-error"
        assert cond.description == "remote channel 10 is above negotiated channel_max 9."
    finally:
        client.close()


def test_begins_within_channel_max_are_answered(start):
    port = free_port()
    start(_listener(port, 10))
    client = RawClient(port, 10)  # channels 0..9
    try:
        client.pump(lambda: sum(1 for s in _sessions(client.conn)
                                if s.state & proton.Endpoint.REMOTE_ACTIVE) == 10)
        assert not client.conn.state & proton.Endpoint.REMOTE_CLOSED
    finally:
        client.close()


def _sessions(conn):
    ssn = conn.session_head(0)
    while ssn is not None:
        yield ssn
        ssn = ssn.next(0)


def test_connector_max_sessions_is_channel_max(start):
    """A connector's maxSessions goes out in the open the router sends its peer."""
    port = free_port()
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen(1)
    server.settimeout(TIMEOUT)
    try:
        start(f"""
            connector {{
                host: 127.0.0.1
                port: {port}
                role: normal
                saslMechanisms: ANONYMOUS
                maxSessions: 20
            }}
            """)
        sock, _ = server.accept()
        sock.setblocking(False)
        transport = proton.Transport(proton.Transport.SERVER)
        transport.sasl().allowed_mechs("ANONYMOUS")
        conn = proton.Connection()
        transport.bind(conn)
        deadline = time.monotonic() + TIMEOUT
        while not conn.state & proton.Endpoint.REMOTE_ACTIVE:
            assert time.monotonic() < deadline, "no open from the router's connector"
            while transport.pending() > 0:
                try:
                    transport.pop(sock.send(transport.peek(transport.pending())))
                except BlockingIOError:
                    break
            r, _, _ = select.select([sock], [], [], 0.05)
            if r:
                data = sock.recv(65536)
                assert data, "the router closed the socket"
                transport.push(data)
        assert transport.remote_channel_max == 19
        sock.close()
    finally:
        server.close()
