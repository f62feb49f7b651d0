"""The agent's HTTP server (h11, via common.httpproto) driven by a zmq.Poller with real
loopback sockets (no router): keep-alive, late answers, errors, limits; and the /metrics and
/healthz handlers. The protocol itself (parsing, WebSocket, TLS) is tested in test_httpproto."""
from __future__ import annotations

import socket
import time

import pytest
import zmq

from agent import httpserver as hs
from common import httpproto
from common import ipc


# --- the server in a poll loop ------------------------------------------------------------------
class Harness:
    """An HttpServer on loopback with a handler the test controls; pump() runs the poll loop."""

    def __init__(self, settings=None) -> None:
        self.poller = zmq.Poller()
        self.pending: list = []
        self.logs: list = []
        self.server = hs.HttpServer(self.poller, self.handle, lambda lvl, t: self.logs.append(t))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.server.add_listener(sock, {"name": "h", **(settings or {})})
        self.defer = False

    def handle(self, request, settings, respond):
        if request.path == "/boom":
            raise RuntimeError("boom")
        if self.defer:
            self.pending.append((request, respond))
            return
        respond(200, f"you asked {request.path}\n".encode())

    def pump(self, seconds: float = 0.2) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for fd, mask in self.poller.poll(20):
                self.server.handle(fd, mask)

    def client(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        self.pump(0.1)
        return sock

    def read_response(self, sock: socket.socket, seconds: float = 2.0) -> bytes:
        """Pump until one whole response (head + Content-Length body) has arrived."""
        sock.setblocking(False)
        data = b""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.pump(0.05)
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            except BlockingIOError:
                pass
            if b"\r\n\r\n" in data:
                head, body = data.split(b"\r\n\r\n", 1)
                length = int([h for h in head.split(b"\r\n")
                              if h.lower().startswith(b"content-length")][0].split(b":")[1])
                if len(body) >= length:
                    break
        sock.setblocking(True)
        return data

    def close(self):
        self.server.close_all()


@pytest.fixture
def harness():
    h = Harness()
    yield h
    h.close()


def test_get_and_keep_alive(harness):
    with harness.client() as c:
        c.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        assert harness.read_response(c).endswith(b"you asked /a\n")
        c.sendall(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")  # same connection
        assert harness.read_response(c).endswith(b"you asked /b\n")


def test_pipelined_requests_answered_in_order(harness):
    with harness.client() as c:
        c.sendall(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
        data = harness.read_response(c)
        data += harness.read_response(c)
        assert data.index(b"you asked /1") < data.index(b"you asked /2")


def test_many_pipelined_requests_answered_in_a_loop(harness):
    with harness.client() as c:
        c.sendall(b"GET /p HTTP/1.1\r\nHost: x\r\n\r\n" * 1500
                  + b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        deadline = time.monotonic() + 10
        c.setblocking(False)
        while time.monotonic() < deadline and not data.endswith(b"you asked /last\n"):
            harness.pump(0.05)
            try:
                data += c.recv(1 << 20)
            except BlockingIOError:
                pass
        assert data.count(b"you asked /p\n") == 1500 and data.endswith(b"you asked /last\n")
    assert not any("failed" in line for line in harness.logs)


def test_late_answer_and_client_gone(harness):
    harness.defer = True
    with harness.client() as c:
        c.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
        harness.pump(0.2)
        assert len(harness.pending) == 1
        _, respond = harness.pending.pop()
        respond(200, b"later\n")
        respond(500, b"twice\n")  # a second answer is ignored
        data = harness.read_response(c)
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"later\n")
        assert b"twice" not in data
    c2 = harness.client()
    c2.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    harness.pump(0.2)
    c2.close()
    harness.pump(0.2)
    _, respond = harness.pending.pop()
    respond(200, b"nobody listens\n")  # must not raise
    assert not harness.server.conns


def test_connection_close_and_http10(harness):
    with harness.client() as c:
        c.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = harness.read_response(c)
        assert b"Connection: close" in data
        harness.pump(0.1)
        assert c.recv(10) == b""  # closed by the server


def test_errors(harness):
    with harness.client() as c:
        c.sendall(b"DELETE /x HTTP/1.1\r\nHost: x\r\n\r\n")
        data = harness.read_response(c)
        assert data.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in data
    with harness.client() as c:
        c.sendall(b"garbage\r\n\r\n")
        assert harness.read_response(c).startswith(b"HTTP/1.1 400")
    with harness.client() as c:
        c.sendall(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        assert harness.read_response(c).startswith(b"HTTP/1.1 500")
    assert any("boom" in line for line in harness.logs)
    with harness.client() as c:
        c.sendall(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n")
        data = harness.read_response(c)
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"\r\n\r\n")


def test_idle_connections_are_closed(harness, monkeypatch):
    with harness.client() as c:
        assert harness.server.conns
        harness.server.tick(time.monotonic() + hs.IDLE_TIMEOUT + 1)
        assert not harness.server.conns
        c.settimeout(2)
        assert c.recv(10) == b""


def test_connection_limit(harness, monkeypatch):
    monkeypatch.setattr(hs, "MAX_CONNECTIONS", 1)
    with harness.client() as first, harness.client() as second:
        second.settimeout(2)
        assert second.recv(4096).startswith(b"HTTP/1.1 503")
        first.sendall(b"GET /still HTTP/1.1\r\nHost: x\r\n\r\n")
        assert harness.read_response(first).endswith(b"you asked /still\n")


def test_close_all_closes_the_listener(harness):
    harness.server.close_all()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", harness.port), timeout=1).close()


def test_http11_without_host_is_refused(harness):
    with harness.client() as c:
        c.sendall(b"GET /a HTTP/1.1\r\n\r\n")
        data = harness.read_response(c)
        assert data.startswith(b"HTTP/1.1 400") and b"Host" in data


def test_unix_listener(tmp_path):
    poller = zmq.Poller()
    server = hs.HttpServer(poller, lambda req, settings, respond: respond(200, b"unix\n"),
                           lambda lvl, t: None)
    path = str(tmp_path / hs.AGENT_SOCKET)
    server.add_listener(hs.open_unix_listener(path), {})
    try:
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(2)
            c.connect(path)
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not data.endswith(b"unix\n"):
                for fd, mask in poller.poll(20):
                    server.handle(fd, mask)
                c.setblocking(False)
                try:
                    data += c.recv(4096)
                except BlockingIOError:
                    pass
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"unix\n")
    finally:
        server.close_all()


# --- MetricsService endpoints ---------------------------------------------------------------------
SNAPSHOT = {"router": {"deliveriesIngress": 3, "acceptedDeliveries": 3},
            "addresses": [{"key": "M0q", "deliveriesIngress": 3, "deliveriesEgress": 3,
                           "subscriberCount": 1}],
            "links": [], "connections": []}


def _service(tmp_path=None, router=None):
    sent: list = []
    poller = zmq.Poller()
    svc = hs.MetricsService({"router_id": "R", "router": router or {}}, poller,
                            lambda *m: sent.extend(m), lambda lvl, t: None, time.time() - 5)
    return svc, sent


def _answer(svc, sent, state=SNAPSHOT):
    query = sent.pop()
    assert isinstance(query, ipc.CoreQuery) and query.request_id >= hs.CoreQueries.FIRST_ID
    assert svc.queries.on_core_state(ipc.CoreState(query.request_id, state))


def _request(path):
    return httpproto.Request("GET", path, {"host": "agent"})


def test_metrics_endpoint_answers_from_a_fresh_snapshot():
    svc, sent = _service()
    got = []
    svc.handle(_request("/metrics"), {"metrics": True}, lambda *a, **k: got.append(a))
    assert not got  # waits for the core
    _answer(svc, sent)
    status, body, ctype = got[0]
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert b'qdr_address_deliveries_ingress_total{address="M0q",router="R"} 3.0' in body
    assert b"qdr_uptime_seconds" in body


def test_healthz_and_timeouts():
    svc, sent = _service()
    got = []
    svc.handle(_request("/healthz"), {}, lambda *a, **k: got.append(a))
    _answer(svc, sent)
    assert got[-1][:2] == (200, b"ok\n")
    svc.handle(_request("/healthz"), {}, lambda *a, **k: got.append(a))
    svc.tick(time.monotonic() + hs.HEALTHZ_TIMEOUT + 1)
    assert got[-1][0] == 503
    svc.handle(_request("/metrics"), {}, lambda *a, **k: got.append(a))
    svc.tick(time.monotonic() + hs.METRICS_TIMEOUT + 1)
    assert got[-1][0] == 503
    assert not svc.queries.on_core_state(ipc.CoreState(1, {}))  # management's id: not ours


def test_disabled_endpoints_and_unknown_paths():
    svc, sent = _service()
    got = []
    for path, settings in (("/metrics", {"metrics": False}), ("/healthz", {"healthz": False}),
                           ("/", {})):
        svc.handle(_request(path), settings, lambda *a, **k: got.append(a))
    assert [g[0] for g in got] == [404, 404, 404] and not sent


def test_sink_samples_every_interval(tmp_path):
    svc, sent = _service(router={"metricsDir": str(tmp_path), "metricsIntervalSeconds": 1})
    now = time.monotonic()
    svc.tick(now)
    assert not sent
    svc.tick(now + 1.5)
    _answer(svc, sent)
    svc.tick(now + 3.0)
    _answer(svc, sent, {**SNAPSHOT, "router": {"deliveriesIngress": 5}})
    lines = (tmp_path / "router-metrics-R.jsonl").read_text().splitlines()
    import json
    records = [json.loads(line) for line in lines]
    routers = [r for r in records if r["kind"] == "router"]
    assert len(routers) == 2
    assert routers[1]["d_deliveriesIngress"] == 2
    assert any(r["kind"] == "address" and r["address"] == "q" for r in records)


def _sink_records(svc, sent, tmp_path, state=SNAPSHOT):
    svc.tick(time.monotonic() + 2)
    _answer(svc, sent, state)
    import json
    return [json.loads(line)
            for line in (tmp_path / "router-metrics-R.jsonl").read_text().splitlines()]


def test_first_sample_counts_from_the_router_start(tmp_path):
    """The router's counters start at zero: what was sent before the first sample counts in
    it (deltas = the values, over the time since the router started), so the windows hold the
    traffic the exact totals do."""
    svc, sent = _service(router={"metricsDir": str(tmp_path), "metricsIntervalSeconds": 1})
    records = _sink_records(svc, sent, tmp_path)
    router = next(r for r in records if r["kind"] == "router")
    addr = next(r for r in records if r["kind"] == "address")
    assert (router["d_deliveriesIngress"], router["d_acceptedDeliveries"]) == (3, 3)
    assert (addr["d_deliveriesIngress"], addr["d_deliveriesEgress"]) == (3, 3)
    # the service was told the router started 5 s before it was made
    assert 5.0 <= router["interval_s"] < 60.0 and addr["interval_s"] == router["interval_s"]


@pytest.mark.parametrize("restarted", ["agent", "core"])
def test_first_sample_after_a_restart_has_no_baseline(tmp_path, restarted):
    """An agent the supervisor restarted does not know what its predecessor counted, and a
    restarted core counts from its own start: the first deltas stay unknown (the batch job
    fills them from the files)."""
    runtime = tmp_path / "run"
    runtime.mkdir()
    (runtime / "restarts.json").write_text(f'{{"{restarted}": 1, "worker0": 2}}')
    svc = hs.MetricsService({"router_id": "R", "runtime": str(runtime),
                             "router": {"metricsDir": str(tmp_path),
                                        "metricsIntervalSeconds": 1}},
                            zmq.Poller(), lambda *m: sent.extend(m), lambda lvl, t: None,
                            time.time() - 5)
    sent: list = []
    records = _sink_records(svc, sent, tmp_path)
    router = next(r for r in records if r["kind"] == "router")
    assert router["d_deliveriesIngress"] is None and router["interval_s"] == 1.0
