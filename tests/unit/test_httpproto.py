"""common.httpproto without sockets: HTTP/1.1 (h11), the WebSocket upgrade and framing
(wsproto clients on the other side), TLS over memory BIOs, and random input never raising."""
from __future__ import annotations

import ssl

import pytest
from hypothesis import given, settings, strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Message, Ping, Pong,
                            RejectConnection, Request as WsRequest, TextMessage)

import tlscerts
from common.httpproto import AmqpData, Closed, HttpProtocol, Request, Upgraded


def _get(path: str = "/", version: str = "1.1", extra: str = "") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: x\r\n{extra}\r\n".encode()


def test_request_and_keep_alive_response():
    proto = HttpProtocol()
    events = proto.receive_data(_get("/metrics?x=1"))
    assert events == [Request("GET", "/metrics?x=1", {"host": "x"})]
    assert events[0].path == "/metrics"
    assert proto.respond(200, b"hello\n")
    assert not proto.respond(200, b"twice\n")  # one answer per request
    out = proto.data_to_send()
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and out.endswith(b"\r\n\r\nhello\n")
    assert b"content-length: 6" in out.lower() and not proto.must_close


def test_pipelined_requests_one_at_a_time():
    proto = HttpProtocol()
    events = proto.receive_data(_get("/1") + _get("/2"))
    assert [e.target for e in events] == ["/1"]  # the second waits for the first answer
    proto.respond(200, b"one")
    events = proto.resume()
    assert [e.target for e in events] == ["/2"]
    proto.respond(200, b"two")
    out = proto.data_to_send()
    assert out.index(b"one") < out.index(b"two")


@pytest.mark.parametrize("version,connection,closes", [
    ("1.1", None, False), ("1.1", "close", True), ("1.1", "Keep-Alive, Close", True),
    ("1.0", None, True),
    ("1.0", "keep-alive", True)])  # h11 never keeps an HTTP/1.0 connection (allowed by RFC 9112)
def test_keep_alive_rules(version, connection, closes):
    proto = HttpProtocol()
    extra = f"Connection: {connection}\r\n" if connection else ""
    assert len(proto.receive_data(_get("/", version, extra))) == 1
    proto.respond(200, b"x")
    assert proto.must_close is closes
    assert (b"connection: close" in proto.data_to_send().lower()) is closes


def test_pipelined_flood_while_busy_holds_input_and_answers_all_in_order():
    """RFC 9112 9.3.2: pipelined requests are answered in order; past the read-ahead the owner
    stops reading (wants_input) instead of the connection being closed."""
    proto = HttpProtocol()
    assert len(proto.receive_data(_get("/r0"))) == 1
    sent = 1
    while proto.wants_input():
        assert proto.receive_data(b"".join(_get(f"/r{sent + i}") for i in range(50))) == []
        sent += 50
    assert sent > 50 and not proto.must_close
    answered = []
    events: list = [Request("GET", "/r0", {})]
    while events:
        for event in events:
            assert type(event) is Request
            answered.append(event.target)
            proto.respond(200, b"ok")
        events = proto.resume()
    assert answered == [f"/r{i}" for i in range(sent)]
    assert proto.data_to_send().count(b"HTTP/1.1 200") == sent
    assert proto.wants_input() and not proto.must_close


def test_a_request_being_read_has_a_deadline_answered_408():
    proto = HttpProtocol()
    assert not proto.reading_request()
    assert proto.receive_data(b"GET /healthz HT") == []
    assert proto.reading_request()  # the owner times it (router_io: REQUEST_TIMEOUT)
    events = proto.request_timed_out()
    assert type(events[-1]) is Closed and proto.must_close
    assert proto.data_to_send().startswith(b"HTTP/1.1 408 ")
    proto = HttpProtocol()  # a body still coming counts as the request being read
    proto.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01")
    proto.respond(200, b"ok")  # answered at its head
    assert proto.reading_request()


def test_unread_answers_hold_the_input():
    proto = HttpProtocol()
    big = b"x" * (1 << 20)
    proto.receive_data(_get("/a") + _get("/b"))
    proto.respond(200, big)
    assert not proto.wants_input()  # the client reads no answers: its requests wait unread
    proto.data_to_send()
    assert proto.wants_input() and [e.target for e in proto.resume()] == ["/b"]


def test_head_has_no_body_and_request_bodies_are_skipped():
    proto = HttpProtocol()
    proto.receive_data(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n")
    proto.respond(200, b"body")
    out = proto.data_to_send()
    assert out.endswith(b"\r\n\r\n") and b"content-length: 4" in out.lower()
    proto = HttpProtocol()
    events = proto.receive_data(b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"
                                + _get("/next"))
    assert events[0].method == "POST"
    proto.respond(405, b"no")
    assert [e.target for e in proto.resume()] == ["/next"]


@pytest.mark.parametrize("data,status", [
    (b"GET /\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n\r\n", 400),                      # no Host
    (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET / FOO/1.1\r\n\r\n", 400),
    (b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20000, 431),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40, 400),  # TLS on plain HTTP
])
def test_bad_requests_answer_and_close(data, status):
    proto = HttpProtocol()
    events = proto.receive_data(data)
    assert type(events[-1]) is Closed and proto.must_close
    assert proto.data_to_send().startswith(f"HTTP/1.1 {status} ".encode())
    assert proto.receive_data(b"GET / HTTP/1.1\r\n\r\n") == []  # nothing after that


def test_end_of_stream():
    proto = HttpProtocol()
    assert type(proto.receive_data(b"")[0]) is Closed
    proto = HttpProtocol()
    proto.receive_data(b"GET / HTT")
    events = proto.receive_data(b"")
    assert type(events[-1]) is Closed


# --- WebSocket ------------------------------------------------------------------------------------
def _upgrade(proto: HttpProtocol, subprotocols: list, extra_bytes: bytes = b"") -> tuple:
    """A wsproto client asks ``proto`` for a WebSocket; (client, events, accepted subprotocol)."""
    client = WSConnection(ConnectionType.CLIENT)
    events = proto.receive_data(client.send(WsRequest(host="x", target="/",
                                                      subprotocols=subprotocols)) + extra_bytes)
    client.receive_data(proto.data_to_send())
    answer = list(client.events())
    chosen = None
    for event in answer:
        if isinstance(event, AcceptConnection):
            chosen = event.subprotocol
        elif isinstance(event, RejectConnection):
            chosen = event.status_code
    return client, events, chosen


@pytest.mark.parametrize("offered,chosen", [(["amqp"], "amqp"), (["binary"], "binary"),
                                            (["mqtt", "binary", "amqp"], "binary")])
def test_upgrade_and_binary_messages(offered, chosen):
    proto = HttpProtocol()
    client, events, accepted = _upgrade(proto, offered)
    assert accepted == chosen and events == [Upgraded(chosen)]
    assert proto.receive_data(client.send(Message(data=b"AMQP\x00\x01\x00\x00"))) == [
        AmqpData(b"AMQP\x00\x01\x00\x00")]
    proto.send_amqp(b"\x00\x00\x00\x08frame")
    client.receive_data(proto.data_to_send())
    got = [e for e in client.events() if isinstance(e, BytesMessage)]
    assert b"".join(e.data for e in got) == b"\x00\x00\x00\x08frame"


def test_bytes_sent_with_the_upgrade_request_are_kept():
    proto = HttpProtocol()
    # the frame a client would send right after its request (masked, as clients must)
    from wsproto.frame_protocol import FrameProtocol
    frame = FrameProtocol(client=True, extensions=[]).send_data(b"early", fin=True)
    client, events, accepted = _upgrade(proto, ["amqp"], frame)
    assert accepted == "amqp" and events == [Upgraded("amqp"), AmqpData(b"early")]


@pytest.mark.parametrize("headers,status", [
    ({}, 400),                                                   # no subprotocol
    ({"Sec-WebSocket-Protocol": "mqtt"}, 400),
    ({"Sec-WebSocket-Protocol": "amqp", "Sec-WebSocket-Version": "8"}, 426),
    ({"Sec-WebSocket-Protocol": "amqp", "Connection": "keep-alive"}, 400),
    ({"Sec-WebSocket-Protocol": "amqp", "Sec-WebSocket-Key": ""}, 400),
])
def test_upgrade_refused(headers, status):
    base = {"Host": "x", "Upgrade": "websocket", "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
    base.update(headers)
    head = "".join(f"{k}: {v}\r\n" for k, v in base.items() if v != "")
    proto = HttpProtocol()
    events = proto.receive_data(f"GET / HTTP/1.1\r\n{head}\r\n".encode())
    assert type(events[-1]) is Closed and proto.ws is None
    assert proto.data_to_send().startswith(f"HTTP/1.1 {status} ".encode())


def test_websockets_switched_off():
    proto = HttpProtocol(websockets=False)
    _, events, status = _upgrade(proto, ["amqp"])
    assert status == 404 and type(events[-1]) is Closed


def test_ping_text_and_close():
    proto = HttpProtocol()
    client, _, _ = _upgrade(proto, ["amqp"])
    assert proto.receive_data(client.send(Ping(b"p"))) == []
    client.receive_data(proto.data_to_send())
    assert any(isinstance(e, Pong) for e in client.events())
    events = proto.receive_data(client.send(TextMessage(data="hi")))
    assert type(events[-1]) is Closed
    client.receive_data(proto.data_to_send())
    closes = [e for e in client.events() if isinstance(e, CloseConnection)]
    assert closes[0].code == 1003
    proto = HttpProtocol()
    client, _, _ = _upgrade(proto, ["amqp"])
    events = proto.receive_data(client.send(CloseConnection(code=1000)))
    assert type(events[-1]) is Closed
    client.receive_data(proto.data_to_send())
    assert any(isinstance(e, CloseConnection) for e in client.events())  # the close answered


def test_bad_frame_closes_with_protocol_error():
    proto = HttpProtocol()
    client, _, _ = _upgrade(proto, ["amqp"])
    events = proto.receive_data(b"\x82\x05hello")  # unmasked: clients must mask
    assert type(events[-1]) is Closed
    client.receive_data(proto.data_to_send())
    closes = [e for e in client.events() if isinstance(e, CloseConnection)]
    assert closes and closes[0].code == 1002


# --- TLS --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return tlscerts.make_pki(tmp_path_factory.mktemp("pki"))


def _tls_pair(pki):
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki["server"], pki["server_key"])
    client_ctx = ssl.create_default_context(cafile=pki["ca"])
    c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    return HttpProtocol(server_ctx), client, c_in, c_out


def _pump(proto, client, c_in, c_out, rounds=10):
    events = []
    for _ in range(rounds):
        try:
            client.do_handshake()
        except ssl.SSLWantReadError:
            pass
        data = c_out.read()
        if data:
            events += proto.receive_data(data)
        back = proto.data_to_send()
        if back:
            c_in.write(back)
        if not data and not back:
            break
    return events


def _read_all(client) -> bytes:
    out = b""
    while True:
        try:
            out += client.read(65536)
        except ssl.SSLWantReadError:
            return out


def test_tls_request_and_websocket(pki):
    proto, client, c_in, c_out = _tls_pair(pki)
    _pump(proto, client, c_in, c_out)
    client.write(_get("/healthz"))
    events = _pump(proto, client, c_in, c_out)
    assert events == [Request("GET", "/healthz", {"host": "x"})]
    proto.respond(200, b"ok\n")
    _pump(proto, client, c_in, c_out)
    assert _read_all(client).endswith(b"ok\n")
    ws = WSConnection(ConnectionType.CLIENT)
    client.write(ws.send(WsRequest(host="x", target="/", subprotocols=["amqp"])))
    assert _pump(proto, client, c_in, c_out) == [Upgraded("amqp")]
    ws.receive_data(_read_all(client))
    assert any(isinstance(e, AcceptConnection) for e in ws.events())
    client.write(ws.send(Message(data=b"secret amqp")))
    assert _pump(proto, client, c_in, c_out) == [AmqpData(b"secret amqp")]


def test_tls_optional_serves_plain_http_too(pki):
    proto, client, c_in, c_out = _tls_pair(pki)
    proto = HttpProtocol(proto and _server_ctx(pki), tls_required=False)
    assert proto.receive_data(_get("/plain")) == [Request("GET", "/plain", {"host": "x"})]
    proto = HttpProtocol(_server_ctx(pki), tls_required=False)
    _pump(proto, client, c_in, c_out)
    client.write(_get("/secure"))
    assert _pump(proto, client, c_in, c_out) == [Request("GET", "/secure", {"host": "x"})]


def _server_ctx(pki):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server"], pki["server_key"])
    return ctx


def test_tls_garbage_closes(pki):
    proto, _, _, _ = _tls_pair(pki)
    events = proto.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert type(events[-1]) is Closed


# --- random input never raises --------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=6), st.booleans())
def test_random_input_never_raises(chunks, upgrade_first):
    proto = HttpProtocol()
    if upgrade_first:
        _upgrade(proto, ["amqp"])
    for chunk in chunks:
        for event in proto.receive_data(chunk):
            if type(event) is Request:
                proto.respond(404, b"")
        proto.data_to_send()


# --- RFC 9112 request targets and lengths, RFC 6455 handshakes and frame limits ----------------
_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def _upgrade_head(path: str = "/", key_lines: str = f"Sec-WebSocket-Key: {_KEY}\r\n",
                  version: str = "13") -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"{key_lines}Sec-WebSocket-Version: {version}\r\nSec-WebSocket-Protocol: amqp\r\n"
            f"\r\n").encode()


@pytest.mark.parametrize("data,status", [
    (_upgrade_head(key_lines="Sec-WebSocket-Key: abc\r\n"), 400),
    (_upgrade_head(key_lines=f"Sec-WebSocket-Key: {_KEY}==\r\n"), 400),
    (_upgrade_head(key_lines=f"Sec-WebSocket-Key: {_KEY}\r\nSec-WebSocket-Key: {_KEY}\r\n"), 400),
    (_upgrade_head(version="12"), 426),
    (_upgrade_head(path="/metrics"), 400),
    (_upgrade_head(path="/healthz?x"), 400),
    (b"GET index.html HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (f"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 64}\r\n\r\n".encode(), 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 65537\r\n\r\n", 413),
])
def test_refused_with_a_status(data, status):
    proto = HttpProtocol()
    events = proto.receive_data(data)
    assert type(events[-1]) is Closed and proto.ws is None and proto.must_close
    out = proto.data_to_send()
    assert out.startswith(f"HTTP/1.1 {status} ".encode()), out
    if status == 426:
        assert b"sec-websocket-version: 13\r\n" in out.lower()


def test_absolute_form_target_is_served_by_its_path():
    proto = HttpProtocol()
    events = proto.receive_data(b"GET http://x:5672/healthz?a HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [e.path for e in events] == ["/healthz"]


def test_a_websocket_frame_over_the_limit_closes_with_1009():
    proto = HttpProtocol()
    events = proto.receive_data(_upgrade_head())
    assert events == [Upgraded("amqp")]
    proto.data_to_send()
    mask = b"\x01\x02\x03\x04"
    frame = b"\x82\xff" + (1 << 62).to_bytes(8, "big") + mask + bytes(
        b ^ mask[i] for i, b in enumerate(b"AMQP"))
    events = proto.receive_data(frame)
    assert type(events[-1]) is Closed and "1009" in events[-1].reason
    out = bytes(proto.data_to_send())
    assert out[0] == 0x88 and int.from_bytes(out[2:4], "big") == 1009  # a close, 1009
