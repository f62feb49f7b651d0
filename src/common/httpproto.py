"""HTTP/1.1 and WebSocket for one server-side connection, sans I/O: bytes in, events out.

h11 parses the requests and frames the responses; wsproto frames WebSocket messages once a
request asked for the upgrade; an ``ssl.SSLObject`` over two memory BIOs adds TLS when the
listener has an sslProfile. Nothing here touches a socket: the owner (the I/O worker for http
listeners, the agent for its internal /metrics endpoint) feeds :meth:`HttpProtocol.receive_data`
with what it read and writes what :meth:`HttpProtocol.data_to_send` returns. As in Qpid Dispatch
1.19, a TLS listener without ``requireSsl`` serves plain HTTP too (``tls_required=False``: the
first byte tells a TLS handshake from a request).

Events handed to the owner:

* :class:`Request` - one HTTP request (body, if any, already discarded); the owner answers it
  with :meth:`HttpProtocol.respond`, now or later, and the next pipelined request follows;
* :class:`Upgraded` - the request became a WebSocket with subprotocol ``amqp`` (or ``binary``,
  its alias in Qpid Dispatch 1.19); from then on :class:`AmqpData` carries the bytes of binary
  messages in, and :meth:`HttpProtocol.send_amqp` sends bytes out in binary messages (the
  first of the client's subprotocols that is ours is chosen; an upgrade offering neither is
  refused with 400, where 1.19 accepts it and then ignores what arrives);
* :class:`Closed` - the peer is gone or broke the protocol; flush, then close the socket.

A peer's protocol error never raises out of here: it becomes an HTTP error response (h11's
status hint: 400, 431...) or a WebSocket close (1002 protocol error, 1003 text message), and
:class:`Closed`. Must not import router_io, agent or router_core.core.
"""
from __future__ import annotations

import ssl
from http import HTTPStatus
from dataclasses import dataclass
from typing import Optional

import binascii

import h11
from wsproto.connection import Connection as WsConnection, ConnectionType
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Ping,
                            RejectConnection, TextMessage)
from wsproto.extensions import Extension
from wsproto.frame_protocol import CloseReason, RsvBits
from wsproto.handshake import H11Handshake
from wsproto.utilities import RemoteProtocolError as WsRemoteProtocolError

SERVER = "qdrouterd"
MAX_HEADER_BYTES = 16384    # a request head (h11's max_incomplete_event_size: 431 beyond)
MAX_PIPELINED_BYTES = 4 * MAX_HEADER_BYTES  # read ahead while a request waits for its answer
MAX_BODY_BYTES = 65536      # a request body (nothing here wants one): 413 beyond
MAX_OUTPUT_BYTES = 1 << 20  # answers the client has not read: no more requests are read
WS_MAX_FRAME = 16 << 20     # a WebSocket frame declaring more is closed with 1009
WS_PATHS_REFUSED = ("/metrics", "/healthz")  # HTTP endpoints, never upgraded
WS_SUBPROTOCOLS = ("amqp", "binary")  # "binary": 1.19's alias for clients made for a ws proxy
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict  # lower-case names; repeated ones joined by ","

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0].split("#", 1)[0]


@dataclass(frozen=True)
class Upgraded:
    subprotocol: str


@dataclass(frozen=True)
class AmqpData:
    data: bytes


@dataclass(frozen=True)
class Closed:
    reason: str


class FrameLimit(Extension):
    """wsproto's hook on every frame header it reads (an extension that is always on, never
    negotiated): a frame that declares more than ``limit`` bytes fails the parse with 1009
    (message too big) before any of its payload is waited for."""

    name = "x-qdrouter-frame-limit"

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def enabled(self) -> bool:
        return True

    def offer(self) -> bool:
        return False

    def frame_inbound_header(self, proto, opcode, rsv, payload_length):
        if payload_length > self.limit:
            return CloseReason.MESSAGE_TOO_BIG
        return RsvBits(False, False, False)


class HttpProtocol:
    """One accepted connection: TLS (optional) -> HTTP/1.1 -> (optional) WebSocket."""

    def __init__(self, tls: Optional[ssl.SSLContext] = None, websockets: bool = True,
                 tls_required: bool = True) -> None:
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.ws: Optional[WsConnection] = None
        self.websockets = websockets
        self.busy = False     # a Request was handed out and is not answered yet
        self.closed = False   # Closed was handed out: no more input is looked at
        self.must_close = False  # close the socket once data_to_send() is empty
        self._out = bytearray()
        self._tls: Optional[ssl.SSLObject] = None
        if tls is not None:
            self._tls_in, self._tls_out = ssl.MemoryBIO(), ssl.MemoryBIO()
            self._tls = tls.wrap_bio(self._tls_in, self._tls_out, server_side=True)
        self._handshaken = False
        self._tls_undecided = tls is not None and not tls_required  # 1.19: plain HTTP too
        self._eof = False
        self._head = False  # the request being answered is a HEAD: no body goes out
        self._upgrade_request: Optional[Request] = None
        self._upgrade_event: Optional[h11.Request] = None
        self.ws_max_frame = WS_MAX_FRAME

    # --- input ----------------------------------------------------------------------------------
    def receive_data(self, data: bytes) -> list:
        """Feed bytes read from the socket (``b""``: end of stream); return the events."""
        if self.closed:
            return []
        if self._tls_undecided and data:
            self._tls_undecided = False
            if data[0] != 0x16:  # not a TLS handshake record: plain HTTP on this port
                self._tls = None
        if self._tls is not None:
            try:
                plain = self._tls_receive(data)
            except ssl.SSLError as exc:
                return self._close(f"TLS error: {exc.reason or exc}")
            if plain is None:
                return []
            data = plain
        if self.ws is not None:
            return self._ws_receive(data)
        self.http.receive_data(data)
        return self._http_events()

    def wants_input(self) -> bool:
        """False while the owner should not read: enough pipelined requests wait behind the
        one being answered, or the client has not read enough answers (back-pressure: the
        socket is left unread, nothing is refused)."""
        if self.closed:
            return False
        if self.ws is not None:
            return True
        return not ((self.busy and len(self.http.trailing_data[0]) >= MAX_PIPELINED_BYTES)
                    or len(self._out) >= MAX_OUTPUT_BYTES)

    def request_timed_out(self) -> list:
        """The owner's deadline for the request being read passed: 408, then closed."""
        self._error_response(408, "the request was not complete in time")
        return [self._closed_event("request not complete in time")]

    def reading_request(self) -> bool:
        """A request has begun and is not complete yet (its head, or its body): the owner
        bounds the time it may take (a client sending a byte now and then)."""
        if self.closed or self.busy or self.ws is not None:
            return False
        return bool(self.http.trailing_data[0]) or self.http.their_state is h11.SEND_BODY

    def resume(self) -> list:
        """After :meth:`respond`: the events of requests that were already read (pipelined)."""
        if self.ws is not None or self.closed:
            return []
        return self._http_events()

    def _tls_receive(self, data: bytes) -> Optional[bytes]:
        """Decrypt; None while nothing is readable yet (handshake, partial record, EOF)."""
        assert self._tls is not None
        if data:
            self._tls_in.write(data)
        else:
            self._tls_in.write_eof()
            self._eof = True
        if not self._handshaken:
            try:
                self._tls.do_handshake()
                self._handshaken = True
            except ssl.SSLWantReadError:
                return None
            finally:
                self._pull_tls()
        chunks = []
        while True:
            try:
                chunk = self._tls.read(65536)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self._eof = True
                break
            if not chunk:
                self._eof = True
                break
            chunks.append(chunk)
        self._pull_tls()
        if chunks:
            return b"".join(chunks)
        return b"" if self._eof else None

    def _pull_tls(self) -> None:
        assert self._tls is not None
        pending = self._tls_out.read()
        if pending:
            self._out += pending

    def _http_events(self) -> list:
        events: list = []
        while not self.busy and not self.closed:
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError as exc:
                self._error_response(exc.error_status_hint, str(exc))
                events.append(self._closed_event(f"bad HTTP request: {exc}"))
                break
            if event is h11.NEED_DATA:
                break
            if event is h11.PAUSED:
                if self.http.their_state is h11.MUST_CLOSE or self.http.our_state is h11.MUST_CLOSE:
                    self._send_http(h11.ConnectionClosed())
                    events.append(self._closed_event("connection closed"))
                    break
                if self.http.our_state is h11.DONE and self.http.their_state is h11.DONE:
                    self.http.start_next_cycle()
                    continue
                break
            if isinstance(event, h11.Request) and event.http_version not in (b"1.0", b"1.1"):
                self._error_response(505, "HTTP version not supported")
                events.append(self._closed_event("HTTP version not supported"))
                break
            if isinstance(event, h11.Request):
                problem = _request_problem(event)
                if problem is not None:
                    self._error_response(*problem)
                    events.append(self._closed_event(f"bad HTTP request: {problem[1]}"))
                    break
                request = Request(event.method.decode("ascii", "replace"),
                                  _origin_form(event.target).decode("ascii", "replace"),
                                  _headers(event.headers))
                if request.headers.get("upgrade", "").lower() == "websocket":
                    self._upgrade_request = request  # answered once the request has ended
                    self._upgrade_event = event
                    continue
                self.busy = True
                self._head = request.method == "HEAD"
                events.append(request)
            elif isinstance(event, h11.EndOfMessage) and self._upgrade_request is not None:
                request, self._upgrade_request = self._upgrade_request, None
                events += self._upgrade(request)
                if self.ws is not None or self.closed:
                    break
            elif isinstance(event, h11.ConnectionClosed):
                events.append(self._closed_event("connection closed"))
                break
            # h11.Data (a request body: nobody here wants one) and EndOfMessage: read on
        return events

    # --- WebSocket --------------------------------------------------------------------------------
    def _upgrade(self, request: Request) -> list:
        """RFC 6455's opening handshake: wsproto checks it (GET, Connection: Upgrade,
        Upgrade: websocket, Host, Sec-WebSocket-Version 13 else 426, a key) and writes the
        101; the key's form (base64 of 16 bytes, once), the subprotocol and the path are
        checked here."""
        event, self._upgrade_event = self._upgrade_event, None
        assert event is not None
        handshake = H11Handshake(ConnectionType.SERVER)
        offered: list = []
        problem: Optional[tuple] = None
        try:
            handshake.initiate_upgrade_connection(event.headers, event.target)
            offered = next(iter(handshake.events())).subprotocols
        except WsRemoteProtocolError as exc:
            hint = exc.event_hint if isinstance(exc.event_hint, RejectConnection) else None
            problem = (hint.status_code if hint else 400, str(exc),
                       {k.decode(): v.decode() for k, v in (hint.headers if hint else [])})
        keys = [v for k, v in event.headers if k.lower() == b"sec-websocket-key"]
        chosen = next((p for p in offered if p in WS_SUBPROTOCOLS), None)
        if not self.websockets:
            problem = (404, "websockets are disabled on this listener", {})
        elif problem is not None:
            pass
        elif len(keys) != 1 or not _valid_key(keys[0]):
            problem = (400, "Sec-WebSocket-Key must be one base64 value of 16 bytes", {})
        elif request.path in WS_PATHS_REFUSED:
            problem = (400, f"{request.path} is not a WebSocket endpoint", {})
        elif chosen is None:
            problem = (400, "no supported WebSocket subprotocol offered (amqp or binary)", {})
        if problem is not None:
            self.busy = True  # answer it like any request; a refused upgrade is not kept alive
            self._head = False
            self.must_close = True
            self.respond(problem[0], f"{problem[1]}\n".encode(),
                         headers={"Connection": "close", **problem[2]})
            return [self._closed_event(problem[1])]
        self._write(handshake.send(AcceptConnection(subprotocol=chosen,
                                                    extra_headers=[(b"Server", SERVER.encode())])))
        trailing, _ = self.http.trailing_data
        self.ws = WsConnection(ConnectionType.SERVER, extensions=[FrameLimit(self.ws_max_frame)])
        return [Upgraded(chosen)] + (self._ws_receive(trailing) if trailing else [])

    def _ws_receive(self, data: bytes) -> list:
        assert self.ws is not None
        self.ws.receive_data(data if data else None)
        events: list = []
        try:
            for event in self.ws.events():
                if isinstance(event, BytesMessage):
                    if event.data:
                        events.append(AmqpData(bytes(event.data)))
                elif isinstance(event, Ping):
                    self._out_ws(event.response())
                elif isinstance(event, CloseConnection):
                    # a close from the peer, or one wsproto made of a frame it refused (1002,
                    # 1007, 1009: FrameLimit): answered with the same code either way
                    if self.ws.state.name not in ("CLOSED", "LOCAL_CLOSING"):
                        self._out_ws(event.response())
                    events.append(self._closed_event(f"WebSocket closed ({event.code}"
                                                     f"{': ' + event.reason if event.reason else ''})"))
                    break
                elif isinstance(event, TextMessage):
                    self._ws_close(1003, "AMQP travels in binary messages only")
                    events.append(self._closed_event("text message on an AMQP WebSocket"))
                    break
        except Exception as exc:  # noqa: BLE001 - wsproto raises on a bad frame
            self._ws_close(1002, "protocol error")
            events.append(self._closed_event(f"bad WebSocket frame: {exc}"))
        if not data and not self.closed:
            events.append(self._closed_event("connection closed"))
        return events

    def send_amqp(self, data: bytes) -> None:
        """AMQP bytes out, as one binary message."""
        if self.ws is not None and not self.closed:
            self._out_ws(BytesMessage(data=bytes(data)))

    def _out_ws(self, event) -> None:
        assert self.ws is not None
        try:
            self._write(self.ws.send(event))
        except Exception:  # noqa: BLE001 - wsproto refuses to send once closing: nothing to send
            pass

    def _ws_close(self, code: int, reason: str) -> None:
        if self.ws is not None and self.ws.state.name == "OPEN":
            self._out_ws(CloseConnection(code=code, reason=reason))

    # --- HTTP output ------------------------------------------------------------------------------
    def respond(self, status: int, body: bytes = b"", content_type: str = TEXT,
                headers: Optional[dict] = None) -> bool:
        """Answer the current request (once); False if there is none (the peer went away)."""
        if not self.busy:
            return False
        self.busy = False
        head = [("Server", SERVER), ("Content-Type", content_type),
                ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
        head += [(k, str(v)) for k, v in (headers or {}).items()]
        try:
            self._send_http(h11.Response(status_code=status, headers=head,
                                         reason=_reason(status)))
            if body and not self._head and self.http.our_state is h11.SEND_BODY:
                self._send_http(h11.Data(data=body))
            self._send_http(h11.EndOfMessage())
        except h11.LocalProtocolError:
            self.must_close = True
            return True
        if self.http.our_state is h11.MUST_CLOSE or self.must_close:
            self.must_close = True
            self.closed = True
        return True

    def _error_response(self, status: int, text: str) -> None:
        if self.http.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.busy = True
            self._head = False
            self.must_close = True
            self.respond(status, f"{text}\n".encode(), headers={"Connection": "close"})

    def _send_http(self, event) -> None:
        data = self.http.send(event)
        if data:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self._tls is not None:
            try:
                self._tls.write(data)
            except ssl.SSLError:
                self.must_close = True
                return
            self._pull_tls()
        else:
            self._out += data

    def _closed_event(self, reason: str) -> Closed:
        self.closed = True
        self.must_close = True
        return Closed(reason)

    def _close(self, reason: str) -> list:
        return [self._closed_event(reason)]

    def close(self, code: int = 1000, reason: str = "") -> None:
        """The local side ends the connection: a WebSocket close frame, TLS close_notify."""
        if self.ws is not None:
            self._ws_close(code, reason)
        if self._tls is not None and self._handshaken:
            try:
                self._tls.unwrap()
            except ssl.SSLError:
                pass
            self._pull_tls()
        self.closed = True
        self.must_close = True

    def data_to_send(self) -> bytearray:
        """What to write to the socket, handed over (not copied): the caller owns it."""
        out, self._out = self._out, bytearray()
        return out

    def pending_output(self) -> int:
        return len(self._out)


def _request_problem(event: h11.Request) -> Optional[tuple]:
    """(status, text) for a request h11 parsed but RFC 9112 says to refuse, else None."""
    target = event.target
    if not (target.startswith(b"/") or target.lower().startswith((b"http://", b"https://"))
            or (target == b"*" and event.method == b"OPTIONS")):
        return 400, "the request target must be a path starting with /"
    lengths = [v for k, v in event.headers if k == b"content-length"]
    if lengths:
        length = int(lengths[0])  # h11 checked the digits and that repeats agree
        if length >= 1 << 63:
            return 400, "invalid Content-Length"
        if length > MAX_BODY_BYTES:
            return 413, "request body too large"
    return None


def _origin_form(target: bytes) -> bytes:
    """The path (and query) of an absolute-form target; an origin-form one as it is."""
    if target.startswith(b"/"):
        return target
    rest = target.split(b"://", 1)[-1]
    slash = rest.find(b"/")
    return rest[slash:] if slash >= 0 else b"/"


def _valid_key(key: bytes) -> bool:
    try:
        return len(binascii.a2b_base64(key.strip())) == 16 and len(key.strip()) == 24
    except binascii.Error:
        return False


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _headers(raw) -> dict:
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]},{text}" if key in headers else text
    return headers


__all__ = ["HttpProtocol", "Request", "Upgraded", "AmqpData", "Closed", "WS_SUBPROTOCOLS",
           "TEXT"]
