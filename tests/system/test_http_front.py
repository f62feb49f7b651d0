"""The front door under hostile and heavy traffic: the http listener (HTTP/1.1, WebSocket) and
the AMQP handshake, on real routers on loopback (ours, and Qpid Dispatch 1.x where
``QDROUTERD_1X`` is set and the behaviour is the same).

Every router started here is stopped; every wait is bounded; the assertions count answers and
closes, never times.
"""
from __future__ import annotations

import base64
import importlib.util
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from conftest import default_vhost_policy, free_port

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_http_front.py"
_spec = importlib.util.spec_from_file_location("bench_http_front", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_http_front", bench)
_spec.loader.exec_module(bench)
_FUZZ = _PATH.with_name("fuzz_http_front.py")  # its WebSocket frame writer and reader
_fspec = importlib.util.spec_from_file_location("bench_fuzz_http_front", _FUZZ)
fuzz = importlib.util.module_from_spec(_fspec)
sys.modules.setdefault("bench_fuzz_http_front", fuzz)
_fspec.loader.exec_module(fuzz)

TIMEOUT = 15.0
WS_KEY = base64.b64encode(b"0123456789abcdef").decode()


def http_listener(port: int, more: str = "") -> str:
    return (f"\nlistener {{\n    host: 127.0.0.1\n    port: {port}\n    http: yes\n"
            f"    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n{more}}}\n")


@pytest.fixture
def web(router_of_kind):
    """``make(kind, more="")``: a router (ours or "1.x") with an http listener; returns
    (router, http_port)."""

    def make(kind: str = "ours", more: str = "", **kwargs):
        port = free_port()
        router = router_of_kind(kind, http_listener(port, more), **kwargs)
        wait_accepting(port)
        return router, port

    return make


def wait_accepting(port: int) -> None:
    """1.x binds its http listener after it logs "Operational"."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)


def _no_deaths(router) -> None:
    out = router.proc.output()
    assert router.proc.proc.poll() is None, out
    assert "(critical)" not in out and "internal error" not in out, out


# --- 1. /healthz and /metrics under many concurrent clients --------------------------------------
def test_healthz_and_metrics_answer_500_concurrent_clients(web):
    """Every request is answered 200 by a healthy router, whatever the number of clients: the
    worker asks the agent once per path at a time and shares the answer (the agent's
    connection cap never decides)."""
    router, port = web(workers=2)
    summary = bench.hammer(port, ("/healthz", "/metrics"), clients=500, seconds=60.0,
                           max_requests=1500, timeout=30.0)
    assert summary["by_status"] == {"200": 1500}, summary
    _no_deaths(router)


def test_healthz_503_for_every_client_while_the_core_is_stopped(web):
    import psutil_free as procs
    router, port = web()
    core = [pid for pid in procs.children_of(router.proc.proc.pid)
            if "router_core.coreproc" in procs.cmdline(pid)][0]
    os.kill(core, signal.SIGSTOP)
    try:
        summary = bench.hammer(port, ("/healthz",), clients=50, seconds=60.0, max_requests=50,
                               timeout=30.0)
    finally:
        os.kill(core, signal.SIGCONT)
    assert summary["by_status"] == {"503": 50}, summary
    summary = bench.hammer(port, ("/healthz",), clients=50, seconds=60.0, max_requests=50,
                           timeout=30.0)
    assert summary["by_status"] == {"200": 50}, summary


# --- helpers: raw sockets, WebSocket by hand ---------------------------------------------------
def ending(sock: socket.socket, timeout: float = TIMEOUT) -> tuple:
    """Read until the router ends the connection or ``timeout``: (bytes, "eof" | "reset" |
    "open")."""
    out = b""
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return out, "reset"
        if not chunk:
            return out, "eof"
        out += chunk
    return out, "open"


def raw_request(port: int, data: bytes, timeout: float = TIMEOUT) -> tuple:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return ending(sock, timeout)


def upgrade_request(path: str = "/", key: str = WS_KEY, version: str = "13",
                    extra: str = "") -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: {version}\r\nSec-WebSocket-Protocol: amqp\r\n{extra}\r\n"
            ).encode("latin-1")


def ws_open(port: int) -> socket.socket:
    """A socket after a successful upgrade (the 101 head read)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.sendall(upgrade_request())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


ws_frame = fuzz.ws_frame  # a masked client frame; ``declared``: the length its header claims


def ws_close_code(data: bytes):
    """The status code of the first close frame the router sent in ``data``."""
    for opcode, payload in fuzz.server_frames(data):
        if opcode == 8:
            return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
    return None


def amqp_bytes(data: bytes) -> bytes:
    """The payloads of the binary frames the router sent in ``data``."""
    return b"".join(payload for opcode, payload in fuzz.server_frames(data) if opcode in (0, 2))


def amqp_socket(kind_of_port: str, router, http_port: int) -> socket.socket:
    if kind_of_port == "ws":
        return ws_open(http_port)
    return socket.create_connection(("127.0.0.1", router.port), timeout=TIMEOUT)


def send_amqp(sock: socket.socket, kind_of_port: str, data: bytes) -> None:
    sock.sendall(ws_frame(data) if kind_of_port == "ws" else data)


# --- 2. a protocol header the router does not speak: closed at once ----------------------------
@pytest.mark.parametrize("kind", ["ours", "1.x"])
@pytest.mark.parametrize("port_kind", ["plain", "ws"])
def test_a_wrong_protocol_header_is_closed_at_once(web, kind, port_kind):
    router, http_port = web(kind)
    for header in (b"AMQP\x02\x01\x00\x00", b"AMQP\x01\x01\x00\x00"):
        with amqp_socket(port_kind, router, http_port) as sock:
            send_amqp(sock, port_kind, header)
            data, how = ending(sock)
        assert how in ("eof", "reset"), (header, data)
        received = amqp_bytes(data) if port_kind == "ws" else data
        # the router's answer, if any, is a protocol header it speaks, then nothing usable
        assert received == b"" or received.startswith(b"AMQP\x00\x01\x00\x00"), received
    if kind == "ours":
        _no_deaths(router)


# --- 3. a handshake that never completes: closed at initialHandshakeTimeoutSeconds ----------------
HANDSHAKE_LINE = "ERROR (error) Run Time: Timeout waiting for initial handshake"  # 1.19's


# 1.19 applies the setting to AMQP ports only: over a WebSocket it holds the socket for ever
@pytest.mark.parametrize("kind,port_kind", [("ours", "plain"), ("ours", "ws"), ("1.x", "plain")])
def test_an_incomplete_handshake_is_closed_at_its_deadline(router_of_kind, kind, port_kind):
    http_port, plain_port = free_port(), free_port()
    more = "    initialHandshakeTimeoutSeconds: 2\n"
    plain = (f"\nlistener {{\n    host: 127.0.0.1\n    port: {plain_port}\n"
             f"    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n{more}}}\n")
    router = router_of_kind(kind, http_listener(http_port, more) + plain)
    wait_accepting(http_port)
    for partial in (b"AMQ", b"AMQP\x03\x01\x00\x00", b"AMQP\x00\x01\x00\x00"):
        if port_kind == "ws":
            sock = ws_open(http_port)
        else:
            sock = socket.create_connection(("127.0.0.1", plain_port), timeout=TIMEOUT)
        with sock:
            send_amqp(sock, port_kind, partial)
            _, how = ending(sock, timeout=20.0)
        assert how in ("eof", "reset"), partial
    deadline = time.monotonic() + TIMEOUT
    while router.proc.output().count(HANDSHAKE_LINE) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert router.proc.output().count(HANDSHAKE_LINE) == 3, router.proc.output()


# --- 4. an oversize WebSocket frame: 1009 at once ----------------------------------------------
def test_a_websocket_frame_over_the_limit_is_closed_with_1009(web):
    from common.httpproto import WS_MAX_FRAME
    router, port = web()
    for declared in (1 << 62, WS_MAX_FRAME + 1):
        with ws_open(port) as sock:
            sock.sendall(ws_frame(b"AMQP", declared=declared))
            data, how = ending(sock)
        assert how in ("eof", "reset") and ws_close_code(data) == 1009, (declared, data, how)
    _no_deaths(router)


# --- 5. pipelined requests: all answered, in order ---------------------------------------------
@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_2000_pipelined_requests_are_all_answered(web, kind):
    router, port = web(kind)
    count = 2000
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(request * (count - 1) + request.replace(b"\r\n\r\n",
                                                               b"\r\nConnection: close\r\n\r\n"))
        data, how = ending(sock, timeout=60.0)
    assert how == "eof"
    assert data.count(b"HTTP/1.1 200 ") == count, data[-300:]


# --- 6. a request head sent a byte at a time: closed at the request deadline ---------------------
@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_slow_request_heads_are_closed_and_healthz_still_answers(web, kind):
    router, port = web(kind)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    socks = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(30)]
    try:
        for sock in socks:
            sock.setblocking(False)
        closed: set = set()
        deadline = time.monotonic() + 40.0
        for i in range(len(head)):
            if len(closed) == len(socks) or time.monotonic() > deadline:
                break
            for n, sock in enumerate(socks):
                if n in closed:
                    continue
                try:
                    sock.send(head[i:i + 1])
                    if sock.recv(65536) == b"":
                        closed.add(n)
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(n)
            if i % 5 == 0:
                summary = bench.hammer(port, ("/healthz",), clients=1, seconds=10.0,
                                       max_requests=1, timeout=10.0)
                assert summary["by_status"] == {"200": 1}, summary
            time.sleep(1.0)
        assert len(closed) == len(socks)
    finally:
        for sock in socks:
            sock.close()


# --- 8. RFC 9112 and RFC 6455 refusals -------------------------------------------------------------
BIG = str(1 << 64)


REFUSED = [
    (upgrade_request(key="abc"), 400),                             # not base64 of 16 bytes
    (upgrade_request(key=WS_KEY + "=="), 400),
    (upgrade_request(extra=f"Sec-WebSocket-Key: {WS_KEY}\r\n"), 400),  # two keys
    (upgrade_request(version="8"), 426),
    (upgrade_request(version="14"), 426),
    (upgrade_request(path="/metrics"), 400),                       # not a WebSocket endpoint
    (upgrade_request(path="/healthz"), 400),
    (b"GET index.html HTTP/1.1\r\nHost: x\r\n\r\n", 400),           # target without a /
    (f"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {BIG}\r\n\r\n".encode(), 400),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n", 413),
]


def test_bad_requests_and_handshakes_are_refused(web):
    router, port = web()
    for request_bytes, status in REFUSED:
        data, how = raw_request(port, request_bytes)
        assert data.startswith(f"HTTP/1.1 {status} ".encode()), (request_bytes, data)
        assert how in ("eof", "reset"), request_bytes
        if status == 426:
            assert b"sec-websocket-version: 13\r\n" in data.lower()
    _no_deaths(router)


def test_an_upgrade_on_the_websocket_endpoint_still_works(web):
    router, port = web()
    with ws_open(port) as sock:
        send_amqp(sock, "ws", b"AMQP\x03\x01\x00\x00")
        sock.settimeout(TIMEOUT)
        data = b""
        while b"AMQP\x03\x01\x00\x00" not in amqp_bytes(data):
            chunk = sock.recv(65536)
            assert chunk
            data += chunk


# --- 7. begins pipelined past the channel-max a vhost policy sets: a framing error ---------------
VHOST_TWO_SESSIONS = default_vhost_policy({"maxSessions": 2})


def pipelined_begins(sessions: int) -> bytes:
    """What a proton client sends before any answer: header, open, ``sessions`` begins and an
    attach on the last session."""
    import proton
    transport = proton.Transport(proton.Transport.CLIENT)
    conn = proton.Connection()
    conn.container = "pipeliner"
    transport.bind(conn)
    conn.open()
    opened = [conn.session() for _ in range(sessions)]
    for ssn in opened:
        ssn.open()
    sender = opened[-1].sender("pipelined")
    sender.target.address = "q"
    sender.open()
    out = b""
    while transport.pending() > 0:
        chunk = transport.peek(transport.pending())
        out += chunk
        transport.pop(len(chunk))
    return out


def test_begins_past_the_policy_channel_max_close_the_connection(router_of_kind):
    """(1.19 refuses the extra session and leaves the connection open, its attach unanswered.)"""
    router = router_of_kind("ours", VHOST_TWO_SESSIONS)
    with socket.create_connection(("127.0.0.1", router.port), timeout=TIMEOUT) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00" + pipelined_begins(3)[8:])
        data, how = ending(sock)
    assert how in ("eof", "reset"), data
    assert b"amqp:connection:framing-error" in data, data  # the condition of its close
