"""``UPDATE connection adminStatus=deleted`` closes the connection's socket at once.

What 1.19 does (observed on a real 1.19 router; ``QDROUTERD_1X`` runs this test against the
1.x router too): the router sends its close frame and closes the socket without waiting for
the peer to answer, so the connection is gone from the next QUERY even when the peer never
answers (a hung client is exactly what an operator deletes).

Every router and client is real (loopback); every wait is bounded.
"""
from __future__ import annotations

import socket
import time

import pytest
from proton import Connection, Message, SASL, Transport
from proton.utils import BlockingConnection, SyncRequestResponse


TIMEOUT = 10.0


@pytest.fixture(params=["ours", "1.x"])
def router_port(request, router_of_kind):
    """(port, log) of a fresh router, ours or 1.19."""
    r = router_of_kind(request.param)
    return r.port, r.proc


class SilentClient:
    """An AMQP connection over a raw socket that opens and then never reads or answers."""

    def __init__(self, port: int, container: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.transport = Transport()
        SASL(self.transport).allowed_mechs("ANONYMOUS")
        self.conn = Connection()
        self.conn.container = container
        self.transport.bind(self.conn)
        self.conn.open()
        deadline = time.monotonic() + TIMEOUT
        while not self.conn.state & Connection.REMOTE_ACTIVE:
            assert time.monotonic() < deadline, "the router never opened"
            self._pump()

    def _pump(self) -> None:
        out = self.transport.peek(self.transport.pending()) if self.transport.pending() > 0 \
            else b""
        if out:
            self.sock.sendall(out)
            self.transport.pop(len(out))
        self.sock.settimeout(0.05)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return
        if data:
            self.transport.push(data)

    def wait_eof(self, timeout: float) -> bool:
        """Reads (without answering anything) until the router closes the socket."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                if self.sock.recv(65536) == b"":
                    return True
            except socket.timeout:
                continue
            except ConnectionResetError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


def _containers(rr) -> dict:
    reply = rr.call(Message(properties={"operation": "QUERY",
                                        "entityType": "org.apache.qpid.dispatch.connection"},
                            body={"attributeNames": ["identity", "container"]}))
    return {row[1]: row[0] for row in reply.body["results"]}


def test_deleted_connection_is_closed_without_waiting_for_its_peer(router_port):
    router_port, proc = router_port
    silent = SilentClient(router_port, "silent-victim")
    mgmt = BlockingConnection(f"amqp://127.0.0.1:{router_port}", timeout=TIMEOUT)
    try:
        rr = SyncRequestResponse(mgmt, "$management")
        identity = _containers(rr)["silent-victim"]
        reply = rr.call(Message(properties={"operation": "UPDATE",
                                            "type": "org.apache.qpid.dispatch.connection",
                                            "identity": identity},
                                body={"adminStatus": "deleted"}))
        assert reply.properties["statusCode"] == 200
        assert silent.wait_eof(TIMEOUT), "the socket stayed open waiting for the peer's close"
        deadline = time.monotonic() + TIMEOUT
        while "silent-victim" in _containers(rr):
            assert time.monotonic() < deadline, "the deleted connection is still listed"
            time.sleep(0.05)
        line = proc.wait_for_line(f"[C{identity}] Connection force-closed", timeout=TIMEOUT)
        assert "ROUTER_CORE (info)" in line and "by request from connection [C" in line
        assert f"[C{identity}] Connection from" not in proc.output()  # not a failure
    finally:
        mgmt.close()
        silent.close()
