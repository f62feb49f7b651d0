"""AMQP over WebSockets, static files, /metrics and /healthz on the http listener, in real
routers on loopback.

The AMQP clients are real proton clients connected through tests/wsbridge.py (a TCP ->
WebSocket relay made with wsproto): the router sees only WebSocket frames on its http port.
Every router started here is stopped; every wait is bounded.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from proton import ConnectionException, Delivery, Endpoint, Message
from proton.utils import BlockingConnection
from wsproto.events import CloseConnection, Message as WsMessage, TextMessage

import tlscerts
from clients import BulkSender, CountingReceiver, Loop, body_seq, seq_body
from conftest import RouterProcess, free_port
from wsbridge import WsBridge, ws_connect

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 15.0


class Net:
    """One router: an AMQP port, an http port (default root), an http port with httpRootDir,
    a TLS http port, and an http port with metrics off and websockets off."""

    def __init__(self, tmp: Path) -> None:
        self.pki = tlscerts.make_pki(tmp / "pki")
        self.root = tmp / "www"
        (self.root / "sub").mkdir(parents=True)
        (self.root / "index.html").write_text("<html>console index</html>")
        (self.root / "sub" / "app.js").write_text("console.log('hi');")
        (self.root / "data.json").write_text('{"a": 1}')
        (tmp / "secret.txt").write_text("top secret")
        os.symlink(tmp / "secret.txt", self.root / "link.txt")
        self.default_root = tmp / "default-console"
        self.default_root.mkdir()
        (self.default_root / "index.html").write_text("<html>default console</html>")
        self.amqp, self.http, self.files, self.tls, self.off, self.mtls = (free_port()
                                                                            for _ in range(6))
        conf = tmp / "qdrouterd.conf"
        conf.write_text(textwrap.dedent(f"""\
            router {{
                mode: standalone
                id: Router.WS
                workerThreads: 2
            }}
            sslProfile {{
                name: web-tls
                certFile: {self.pki['server']}
                privateKeyFile: {self.pki['server_key']}
            }}
            sslProfile {{
                name: web-mtls
                certFile: {self.pki['server']}
                privateKeyFile: {self.pki['server_key']}
                caCertFile: {self.pki['ca']}
            }}
            listener {{
                host: 127.0.0.1
                port: {self.mtls}
                http: yes
                sslProfile: web-mtls
                authenticatePeer: yes
                saslMechanisms: ANONYMOUS
            }}
            listener {{
                host: 127.0.0.1
                port: {self.amqp}
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
            }}
            listener {{
                host: 127.0.0.1
                port: {self.http}
                http: yes
                authenticatePeer: no
                saslMechanisms: ANONYMOUS
            }}
            listener {{
                host: 127.0.0.1
                port: {self.files}
                http: yes
                httpRootDir: {self.root}
            }}
            listener {{
                host: 127.0.0.1
                port: {self.tls}
                http: yes
                sslProfile: web-tls
                requireSsl: yes
            }}
            listener {{
                host: 127.0.0.1
                port: {self.off}
                http: yes
                metrics: no
                websockets: no
            }}
            """))
        self.proc = RouterProcess(conf, env={"QDROUTER_CONSOLE_DIR": str(self.default_root)})
        self.proc.wait_for_line("Operational")

    def tls_client(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.pki["ca"])
        return ctx


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    n = Net(tmp_path_factory.mktemp("ws"))
    yield n
    n.proc.stop()
    output = n.proc.output()
    assert "internal error" not in output and "Traceback" not in output, output


@pytest.fixture
def bridges():
    made: list = []

    def make(*args, **kwargs) -> WsBridge:
        bridge = WsBridge(*args, **kwargs)
        made.append(bridge)
        return bridge

    yield make
    for bridge in made:
        bridge.close()


def _get(url: str, context=None, method: str = "GET") -> tuple:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read()


def _raw(port: int, data: bytes, timeout: float = TIMEOUT, half_close: bool = False) -> bytes:
    """Send raw bytes (then end the stream if ``half_close``); everything the router answers
    until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def _send_receive(url: str, address: str, bodies: list) -> list:
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver(address, credit=len(bodies))
        snd = conn.create_sender(address)
        deliveries = [snd.link.send(Message(body=b)) for b in bodies]
        got = []
        for _ in bodies:
            got.append(rcv.receive(timeout=TIMEOUT).body)
            rcv.accept()
        conn.wait(lambda: all(d.settled for d in deliveries), timeout=TIMEOUT)
        assert all(d.remote_state == d.ACCEPTED for d in deliveries)
        return got
    finally:
        conn.close()


# --- AMQP over WebSockets ---------------------------------------------------------------------
@pytest.mark.parametrize("subprotocol", ["amqp", "binary"])
def test_send_and_receive_over_websocket(net, bridges, subprotocol):
    bridge = bridges(net.http, subprotocol)
    bodies = [f"m{i}" for i in range(20)] + ["x" * 300_000]  # one spans many ws messages
    assert _send_receive(f"amqp://127.0.0.1:{bridge.port}", f"ws-{subprotocol}",
                         bodies) == bodies
    assert bridge.accepted == [subprotocol] and not bridge.errors


def test_websocket_and_plain_clients_meet(net, bridges):
    """A receiver over a WebSocket gets what a plain AMQP sender sends, and the other way round:
    the WebSocket connection is routed like any other."""
    bridge = bridges(net.http)
    loop = Loop()
    try:
        for rx_url, tx_url, address in (
                (f"amqp://127.0.0.1:{bridge.port}", f"amqp://127.0.0.1:{net.amqp}", "to-ws"),
                (f"amqp://127.0.0.1:{net.amqp}", f"amqp://127.0.0.1:{bridge.port}", "from-ws")):
            rx = CountingReceiver(address, prefetch=50)
            loop.connect(rx_url, rx)
            assert loop.run_until(lambda: rx.opened)
            tx = BulkSender(address, 100, lambda i: Message(body=f"n{i}"))
            loop.connect(tx_url, tx)
            assert loop.run_until(lambda: rx.count == 100 and tx.settled == 100), \
                (rx.count, tx.settled)
            assert rx.bodies == [f"n{i}" for i in range(100)]
    finally:
        loop.close()


def test_management_over_websocket(net, bridges):
    """qdstat, unchanged, through a WebSocket: the router and its connections (this one too)."""
    bridge = bridges(net.http)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    for flag, expected in (("-g", "Router.WS"), ("-c", "127.0.0.1")):
        out = subprocess.run([sys.executable, "-m", "tools.qdstat", flag, "-b",
                              f"127.0.0.1:{bridge.port}", "-t", "10"], capture_output=True,
                             text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert expected in out.stdout
    assert bridge.accepted == ["amqp", "amqp"]


def test_upgrade_refused_without_a_known_subprotocol(net):
    for offered in (["mqtt"], []):
        with pytest.raises(ConnectionError, match="400"):
            ws_connect("127.0.0.1", net.http, offered)
    with pytest.raises(ConnectionError, match="404"):  # websockets: no
        ws_connect("127.0.0.1", net.off, ["amqp"])


# --- /metrics, /healthz, static files on the same port ----------------------------------------
def test_metrics_and_healthz_on_the_websocket_port(net):
    status, ctype, body = _get(f"http://127.0.0.1:{net.http}/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert b'qdr_connections{router="Router.WS"' in body or b"qdr_" in body
    assert b'router="Router.WS"' in body
    assert _get(f"http://127.0.0.1:{net.http}/healthz")[::2] == (200, b"ok\n")
    assert _get(f"http://127.0.0.1:{net.off}/metrics")[0] == 404  # metrics: no
    assert _get(f"http://127.0.0.1:{net.off}/healthz")[0] == 200
    # a client that ends its side right after the request still gets the (forwarded) answer
    answer = _raw(net.http, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", half_close=True)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok\n")
    head = _get(f"http://127.0.0.1:{net.http}/healthz", method="HEAD")
    assert head[0] == 200 and head[2] == b""


def test_static_files_from_http_root_dir(net):
    base = f"http://127.0.0.1:{net.files}"
    assert _get(base + "/") == (200, "text/html; charset=utf-8", b"<html>console index</html>")
    assert _get(base + "/index.html")[0] == 200
    assert _get(base + "/sub/app.js")[1:] == ("text/javascript", b"console.log('hi');")
    assert _get(base + "/data.json")[1] == "application/json"
    assert _get(base + "/sub/")[0] == 404  # a directory without index.html
    assert _get(base + "/nope.html")[0] == 404
    assert _get(base + "/x", method="POST")[0] == 405
    # the listener without httpRootDir serves the default console root
    assert _get(f"http://127.0.0.1:{net.http}/")[2] == b"<html>default console</html>"


def test_many_pipelined_requests(net):
    """Answered in order, each in turn (no recursion per request), on one connection."""
    request = b"GET /sub/app.js HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = _raw(net.files, request * 1500 + b"GET / HTTP/1.1\r\nHost: x\r\n"
                  b"Connection: close\r\n\r\n")
    assert answer.count(b"HTTP/1.1 200 OK") == 1501
    assert answer.count(b"console.log('hi');") == 1500 and answer.endswith(b"console index</html>")
    net.proc.wait_for_line("Listening for HTTP on 127.0.0.1:%d" % net.files, timeout=10)


@pytest.mark.parametrize("target", ["/../secret.txt", "/sub/../../secret.txt",
                                    "/%2e%2e/secret.txt", "/sub/%2E%2E/%2e%2e/secret.txt",
                                    "/..%2fsecret.txt", "/link.txt", "//etc/passwd",
                                    "/%00index.html", "/sub\\..\\..\\secret.txt", "/%ff%fe"])
def test_no_file_outside_the_root(net, target):
    answer = _raw(net.files, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                  .encode())
    assert answer.startswith(b"HTTP/1.1 404") and b"secret" not in answer.split(b"\r\n\r\n")[1]


# --- bad input costs only its own connection ----------------------------------------------------
def test_bad_http_and_websocket_input_closes_only_that_connection(net, bridges):
    pids_before = _children(net)
    assert _raw(net.http, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _raw(net.http, b"GET / HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n")[:12] in (
        b"HTTP/1.1 431", b"HTTP/1.1 400")
    assert _raw(net.http, b"\x00\x01\x02\xff" * 100).startswith(b"HTTP/1.1 400")
    # a WebSocket that sends garbage frames, a text message, or closes mid-frame
    for payload in (b"\xff" * 64, "text", b"\x82\xfe\xff"):
        sock, ws, _ = ws_connect("127.0.0.1", net.http, ["amqp"])
        with sock:
            if payload == "text":
                sock.sendall(ws.send(TextMessage(data="hello")))
            else:
                sock.sendall(payload)
                if len(payload) < 8:  # half a frame header, then the client's end of stream
                    sock.shutdown(socket.SHUT_WR)
            sock.settimeout(TIMEOUT)
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            ws.receive_data(data or None)
            if payload == "text":
                closes = [e for e in ws.events() if isinstance(e, CloseConnection)]
                assert closes and closes[0].code == 1003
    # AMQP garbage inside well-formed binary messages: the AMQP connection is closed
    sock, ws, _ = ws_connect("127.0.0.1", net.http, ["amqp"])
    with sock:
        sock.sendall(ws.send(WsMessage(data=b"AMQP\x09\x09\x09\x09" + b"\x00" * 50)))
        sock.settimeout(TIMEOUT)
        while sock.recv(65536):
            pass
    # random bytes, raw and inside WebSocket binary messages (fixed seed: reproducible)
    rng = random.Random(17)
    for i in range(40):
        junk = rng.randbytes(rng.randrange(1, 3000))
        if i % 2:
            _raw(net.http, junk[:1] + b"GET /" + junk, half_close=True)
        else:
            sock, ws, _ = ws_connect("127.0.0.1", net.http, ["amqp"])
            with sock:
                sock.sendall(ws.send(WsMessage(data=b"AMQP\x00\x01\x00\x00" + junk)))
                sock.settimeout(TIMEOUT)
                while sock.recv(65536):
                    pass
    # nothing else was hurt: the same processes serve the next clients
    bridge = bridges(net.http)
    assert _send_receive(f"amqp://127.0.0.1:{bridge.port}", "after-bad", ["ok"]) == ["ok"]
    assert _get(f"http://127.0.0.1:{net.http}/healthz")[0] == 200
    assert _children(net) == pids_before


def _children(net) -> set:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(net.proc.proc.pid)],
                         capture_output=True, text=True, timeout=10)
    return set(out.stdout.split())


# --- TLS on the http listener --------------------------------------------------------------------
def test_tls_http_listener(net, bridges):
    ctx = net.tls_client()
    status, _, body = _get(f"https://localhost:{net.tls}/healthz", context=ctx)
    assert (status, body) == (200, b"ok\n")
    assert b"qdr_" in _get(f"https://127.0.0.1:{net.tls}/metrics", context=ctx)[2]
    bridge = bridges(net.tls, tls=ctx, host="127.0.0.1")
    assert _send_receive(f"amqp://127.0.0.1:{bridge.port}", "over-wss", ["secure"]) == ["secure"]
    # plain HTTP on the TLS port is not served; the router goes on
    assert not _raw(net.tls, b"GET /healthz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200")
    untrusted = ssl.create_default_context(cafile=net.pki["other_ca"])
    with pytest.raises(urllib.error.URLError):
        _get(f"https://127.0.0.1:{net.tls}/healthz", context=untrusted)
    assert _get(f"https://127.0.0.1:{net.tls}/healthz", context=ctx)[0] == 200


def test_tls_optional_and_client_certificates(net, bridges):
    """Without requireSsl a TLS http listener serves plain HTTP too (as 1.19); with
    authenticatePeer and a caCertFile a TLS client must show a certificate signed by it."""
    assert _get(f"http://127.0.0.1:{net.mtls}/healthz")[0] == 200
    no_cert = net.tls_client()
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        _get(f"https://127.0.0.1:{net.mtls}/healthz", context=no_cert)
    with_cert = net.tls_client()
    with_cert.load_cert_chain(net.pki["client"], net.pki["client_key"])
    assert _get(f"https://127.0.0.1:{net.mtls}/healthz", context=with_cert)[0] == 200
    rogue = net.tls_client()
    rogue.load_cert_chain(net.pki["rogue"], net.pki["rogue_key"])
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        _get(f"https://127.0.0.1:{net.mtls}/healthz", context=rogue)
    bridge = bridges(net.mtls, tls=with_cert)
    assert _send_receive(f"amqp://127.0.0.1:{bridge.port}", "mtls", ["m"]) == ["m"]


# --- policy and SASL apply to the AMQP connection inside the WebSocket ---------------------------
def test_vhost_policy_and_sasl_over_websocket(router_factory, bridges):
    http, closed_http = free_port(), free_port()
    router = router_factory(f"""
        policy {{
            enableVhostPolicy: true
            defaultVhost: $default
        }}
        vhost {{
            hostname: ws.tenant
            maxConnections: 1
            allowUnknownUser: true
            groups: {{
                "$default": {{"remoteHosts": "*", "sources": "*", "targets": "allowed"}}
            }}
        }}
        listener {{
            host: 127.0.0.1
            port: {http}
            http: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        listener {{
            host: 127.0.0.1
            port: {closed_http}
            http: yes
            authenticatePeer: yes
            saslMechanisms: PLAIN
        }}
        """)
    bridge = bridges(http)
    url = f"amqp://127.0.0.1:{bridge.port}"
    first = BlockingConnection(url, timeout=TIMEOUT, virtual_host="ws.tenant")
    try:
        first.create_sender("allowed")
        with pytest.raises(Exception, match="unauthorized-access|not allowed|LinkDetached|"
                                            "Link detached"):
            first.create_sender("forbidden")
        second = BlockingConnection(url, timeout=TIMEOUT, virtual_host="ws.tenant")
        with pytest.raises(ConnectionException, match="resource-limit-exceeded"):
            second.wait(lambda: second.conn.state & Endpoint.REMOTE_CLOSED, timeout=TIMEOUT)
        second.close()
    finally:
        first.close()
    # authenticatePeer with PLAIN only: an anonymous client is refused by SASL
    locked = bridges(closed_http)
    with pytest.raises(Exception, match="(?i)auth|sasl"):
        BlockingConnection(f"amqp://127.0.0.1:{locked.port}", timeout=TIMEOUT)
    assert "Traceback" not in router.proc.output()


# --- supervision: the http port lives on through agent and worker restarts ------------------------
def _eventually(check, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not yet
            pass
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_agent_and_worker_restarts(router_factory, bridges):
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_recovery import children
    http = free_port()
    router = router_factory(f"""
        listener {{
            host: 127.0.0.1
            port: {http}
            http: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """)
    bridge = bridges(http)
    url = f"amqp://127.0.0.1:{bridge.port}"
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("restarts", credit=10)
        snd = conn.create_sender("restarts")
        pids = children(router.proc.proc.pid)
        os.kill(pids["agent"], signal.SIGKILL)
        # the WebSocket's AMQP connection lives in the worker: it goes on while the agent is away
        snd.link.send(Message(body="during"))
        assert rcv.receive(timeout=TIMEOUT).body == "during"
        rcv.accept()
        _eventually(lambda: _get(f"http://127.0.0.1:{http}/healthz")[0] == 200)
    finally:
        conn.close()
    pids = children(router.proc.proc.pid)
    os.kill(pids["worker0"], signal.SIGKILL)
    _eventually(lambda: _send_receive(url, "after-restart", ["again"]) == ["again"])
    assert _get(f"http://127.0.0.1:{http}/metrics")[0] == 200


def test_bulk_transfer_both_ways_over_websockets(net, bridges):
    """Many large messages from a WebSocket sender to a WebSocket receiver: the router's input
    (decoded bytes waiting for the engine) and output (frames waiting for the socket) paths."""
    bridge = bridges(net.http)
    loop = Loop()
    try:
        rx = CountingReceiver("bulk-ws", prefetch=200)
        loop.connect(f"amqp://127.0.0.1:{bridge.port}", rx)
        assert loop.run_until(lambda: rx.opened)
        tx = BulkSender("bulk-ws", 800, lambda i: Message(body=seq_body(i, 16384)))
        loop.connect(f"amqp://127.0.0.1:{bridge.port}", tx)
        assert loop.run_until(lambda: rx.count == 800 and tx.settled == 800, 60), \
            (rx.count, tx.settled)
        assert [body_seq(b) for b in rx.bodies] == list(range(800))
        assert tx.outcomes == {Delivery.ACCEPTED: 800}
    finally:
        loop.close()


def test_healthz_is_held_while_the_agent_is_not_listening(tmp_path):
    """1.19 answers /healthz from the router itself; here the agent answers, and an agent not
    listening yet (starting, restarting) holds the request rather than failing it with 503.
    The agent's socket is moved away to stand for an agent that is not up yet."""
    runtime = tmp_path / "run"
    runtime.mkdir()
    port = free_port()
    conf = tmp_path / "qdrouterd.conf"
    conf.write_text(textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Router.Held
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            http: yes
        }}
        """))
    proc = RouterProcess(conf, env={"RUNTIME_DIRECTORY": str(runtime)})
    try:
        proc.wait_for_line("Operational")
        agent_socket = next(runtime.glob("qdrouterd-*/http-agent"))
        away = agent_socket.with_name("away")
        agent_socket.rename(away)
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            sock.settimeout(1.0)
            with pytest.raises(socket.timeout):  # held, not answered 503
                sock.recv(65536)
            away.rename(agent_socket)
            sock.settimeout(TIMEOUT)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok\n"), answer
    finally:
        proc.stop()
