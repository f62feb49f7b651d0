"""The global ``maxConnections`` of ``policy`` refuses an excess connection at accept.

What 1.19 does (observed on a real 1.19 router; ``QDROUTERD_1X`` runs these tests against the
1.x router too): when the router already holds ``maxConnections`` connections, a new socket is
closed as soon as it is accepted, before SASL and open: the client reads end-of-stream and not
one byte of AMQP. The POLICY log says ``DENY Connection '<host>' based on global connection
count. nConnections= N`` and the policy entity counts the denial; once a connection closes,
the next one is accepted.

Every router and client is real (loopback); every wait is bounded.
"""
from __future__ import annotations

import socket
import time

import pytest
from proton import Message
from proton.utils import BlockingConnection, SyncRequestResponse


TIMEOUT = 10.0
POLICY = """
    policy {
        maxConnections: 2
    }
    """
SASL_HEADER = b"AMQP\x03\x01\x00\x00"


@pytest.fixture(params=["ours", "1.x"])
def router(request, router_of_kind):
    """(port, log) of a fresh router allowing two connections, two workers for ours."""
    kwargs = {"workers": 2} if request.param == "ours" else {}
    r = router_of_kind(request.param, POLICY, **kwargs)
    return r.port, r.proc


def _bytes_before_eof(port: int) -> bytes:
    """Connect, send a SASL protocol header, read until the router closes (bounded)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        try:
            sock.sendall(SASL_HEADER)
        except OSError:
            return received
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                data = sock.recv(4096)
            except ConnectionResetError:
                return received
            if not data:
                return received
            received += data
    raise AssertionError(f"the excess connection stayed open; it got {received!r}")


def _denied_count(url: str) -> int:
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        rr = SyncRequestResponse(conn, "$management")
        reply = rr.call(Message(properties={"operation": "QUERY",
                                            "entityType": "org.apache.qpid.dispatch.policy"},
                                body={"attributeNames": ["connectionsDenied"]}))
        return reply.body["results"][0][0]
    finally:
        conn.close()


def test_excess_connection_is_closed_at_accept(router):
    port, proc = router
    url = f"amqp://127.0.0.1:{port}"
    first = BlockingConnection(url, timeout=TIMEOUT)
    second = BlockingConnection(url, timeout=TIMEOUT)
    try:
        assert _bytes_before_eof(port) == b""  # no SASL header, no open: closed at accept
        proc.wait_for_line("DENY Connection '127.0.0.1' based on global connection count. "
                           "nConnections= 2", timeout=TIMEOUT)
        second.close()
        # one place free again: a management connection is accepted and sees the denial
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                assert _denied_count(url) >= 1
                break
            except Exception:  # noqa: BLE001 - the close may not be counted yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        first.close()
        try:
            second.close()
        except Exception:  # noqa: BLE001
            pass


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_an_accepted_connection_has_its_allow_line_under_policy_trace(router_of_kind, kind):
    """1.19 writes a trace line for every connection the global count admits; ours writes it
    when POLICY trace is on (and, being a trace line, makes it only then)."""
    r = router_of_kind(kind, POLICY + """
    log {
        module: POLICY
        enable: trace+
    }
    """)
    conn = BlockingConnection(f"amqp://127.0.0.1:{r.port}", timeout=TIMEOUT)
    try:
        r.proc.wait_for_line("ALLOW Connection '127.0.0.1' based on global connection count. "
                             "nConnections= 1", timeout=TIMEOUT)
    finally:
        conn.close()
