"""The agent's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz``, and the metrics sink timer.

A listener with ``http: yes`` is served here, in the agent process, not by the AMQP workers
(they skip such listeners). The server is a minimal non-blocking HTTP/1.1 server driven by the
agent's ZeroMQ poll loop: its listening and connection sockets are registered (by fd) in the
same ``zmq.Poller`` as the core's socket, so nothing here ever blocks or needs a thread.

* ``GET /metrics``  the Prometheus text (``agent.metrics.prometheus_text``) of a FRESH core
  snapshot: the request waits for the CoreState (bounded: ``METRICS_TIMEOUT``, then 503);
* ``GET /healthz``  ``200 ok`` when the core answers a query within ``HEALTHZ_TIMEOUT``, else 503;
* anything else 404; methods other than GET/HEAD 405. ``metrics: no`` / ``healthz: no`` on the
  listener turn the endpoint into a 404 (both default to yes, as in Qpid Dispatch).

HTTP handled: request line + headers up to ``MAX_HEADER_BYTES`` (else 431), keep-alive (HTTP/1.1
default, ``Connection: close`` honoured; HTTP/1.0 closes unless keep-alive is asked), one request
at a time per connection (pipelined ones wait their turn), requests with a body are answered and
the connection closed. Idle connections close after ``IDLE_TIMEOUT``; at most
``MAX_CONNECTIONS`` at once (more get a 503 and are closed).

The metrics sink (router attributes ``metricsDir``, ``metricsIntervalSeconds``,
``metricsMaxBytes``, ``metricsKeepFiles``): every interval a snapshot is taken and its
``agent.metrics.snapshot_records`` are appended by ``agent.metrics_sink.MetricsSink``; when the
router stops, the agent takes one more (``sample_now``) and ``close`` fsyncs the file.

Must not import router_io or router_core.core.
"""
from __future__ import annotations

import itertools
import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import zmq

from router_core import ipc

MAX_HEADER_BYTES = 16384
MAX_CONNECTIONS = 64
IDLE_TIMEOUT = 30.0
METRICS_TIMEOUT = 5.0
HEALTHZ_TIMEOUT = 2.0
SERVER = "qdrouterd"
_READ_SIZE = 65536

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           413: "Payload Too Large", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
           505: "HTTP Version Not Supported"}
TEXT = "text/plain; charset=utf-8"


class HttpError(Exception):
    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message or REASONS.get(status, ""))
        self.status = status


@dataclass
class HttpRequest:
    method: str
    target: str
    version: str
    headers: dict = field(default_factory=dict)  # lower-case names; repeated ones joined by ","

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0].split("#", 1)[0]

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.1":
            return "close" not in tokens
        return "keep-alive" in tokens

    @property
    def content_length(self) -> int:
        value = self.headers.get("content-length", "0").strip()
        if not value.isdigit():
            raise HttpError(400, "bad Content-Length")
        return int(value)


def parse_request(buf: bytes, max_header: int = MAX_HEADER_BYTES) -> Optional[tuple]:
    """``(HttpRequest, bytes consumed by the head)`` or None while the head is incomplete.

    Raises HttpError (400, 431, 501, 505) for a request that cannot be served.
    """
    end = buf.find(b"\r\n\r\n")
    sep = 4
    if end < 0:
        end = buf.find(b"\n\n")  # tolerate bare LF, as most servers do
        sep = 2
    if end < 0:
        if len(buf) > max_header:
            raise HttpError(431)
        return None
    if end > max_header:
        raise HttpError(431)
    try:
        head = bytes(buf[:end]).decode("latin-1")
    except Exception:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError(400) from None
    lines = head.replace("\r\n", "\n").split("\n")
    while lines and not lines[0]:
        lines.pop(0)  # RFC 9112: ignore empty lines before the request line
    if not lines:
        raise HttpError(400, "empty request")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise HttpError(400, "bad request line")
    method, target, version = parts
    if not method.isalpha() or not method.isupper():
        raise HttpError(400, "bad method")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        if version.startswith("HTTP/"):
            raise HttpError(505)
        raise HttpError(400, "bad version")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):
            raise HttpError(400, "obsolete header folding")
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpError(400, "bad header line")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]},{value}" if key in headers else value
    if "transfer-encoding" in headers:
        raise HttpError(501, "request bodies are not supported")
    request = HttpRequest(method, target, version, headers)
    request.content_length  # noqa: B018 - validates it
    return request, end + sep


def build_response(status: int, body: bytes = b"", content_type: str = TEXT,
                   keep_alive: bool = True, head_only: bool = False,
                   headers: Optional[dict] = None) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}",
             f"Server: {SERVER}",
             f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}",
             "Cache-Control: no-store",
             f"Connection: {'keep-alive' if keep_alive else 'close'}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return out if head_only else out + body


# Handler: (request, listener settings, respond) -> None; respond(status, body, content_type,
# headers=None) may be called later (from the poll loop), exactly once.
Handler = Callable[[HttpRequest, dict, Callable[..., None]], None]


class _Conn:
    __slots__ = ("sock", "settings", "rbuf", "wbuf", "busy", "close_after", "last", "peer",
                 "token")

    def __init__(self, sock: socket.socket, settings: dict, peer: str, now: float) -> None:
        self.sock = sock
        self.settings = settings
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.busy = False         # a request is being answered
        self.close_after = False  # close once wbuf is written
        self.last = now
        self.peer = peer
        self.token = 0            # which request a late respond() belongs to


def open_http_listener(settings: dict) -> socket.socket:
    """A non-blocking listening socket for an http listener (no SO_REUSEPORT: one owner)."""
    host = settings.get("host") or "0.0.0.0"
    port = settings.get("port", "amqp")
    text = str(port)
    port_num = int(text) if text.isdigit() else socket.getservbyname(text, "tcp")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    infos = socket.getaddrinfo(host, port_num, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    family, stype, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, stype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(64)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """Sockets and HTTP framing; what to answer is the handler's business."""

    def __init__(self, poller: zmq.Poller, handler: Handler,
                 log: Callable[[str, str], None]) -> None:
        self.poller = poller
        self.handler = handler
        self.log = log
        self.listeners: dict[int, tuple[socket.socket, dict]] = {}
        self.conns: dict[int, _Conn] = {}
        self._tokens = itertools.count(1)

    # --- listeners ----------------------------------------------------------------------------
    def open_listener(self, settings: dict) -> None:
        sock = open_http_listener(settings)
        self.listeners[sock.fileno()] = (sock, settings)
        self.poller.register(sock.fileno(), zmq.POLLIN)
        self.log("info", f"HTTP listener on {settings.get('host')}:{settings.get('port')} "
                         f"(metrics: {'yes' if settings.get('metrics', True) else 'no'}, "
                         f"healthz: {'yes' if settings.get('healthz', True) else 'no'})")

    def close_listener(self, name: str) -> bool:
        found = False
        for fd, (sock, settings) in list(self.listeners.items()):
            if settings.get("name") == name:
                self.poller.unregister(fd)
                sock.close()
                del self.listeners[fd]
                found = True
                self.log("info", f"Stopped HTTP listener on {settings.get('host')}:"
                                 f"{settings.get('port')}")
        return found

    def owns(self, fd: int) -> bool:
        return fd in self.listeners or fd in self.conns

    # --- events -------------------------------------------------------------------------------
    def handle(self, fd: int, mask: int) -> None:
        now = time.monotonic()
        if fd in self.listeners:
            self._accept(fd, now)
            return
        conn = self.conns.get(fd)
        if conn is None:
            return
        if mask & zmq.POLLIN:
            self._read(fd, conn, now)
        if fd in self.conns and mask & zmq.POLLOUT:
            self._write(fd, conn)

    def _accept(self, fd: int, now: float) -> None:
        lsock, settings = self.listeners[fd]
        for _ in range(64):
            try:
                sock, addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.log("warning", f"HTTP accept failed: {exc}")
                return
            sock.setblocking(False)
            if len(self.conns) >= MAX_CONNECTIONS:
                try:
                    sock.send(build_response(503, b"too many connections\n", keep_alive=False))
                except OSError:
                    pass
                sock.close()
                continue
            conn = _Conn(sock, settings, f"{addr[0]}:{addr[1]}", now)
            self.conns[sock.fileno()] = conn
            self.poller.register(sock.fileno(), zmq.POLLIN)

    def _read(self, fd: int, conn: _Conn, now: float) -> None:
        try:
            data = conn.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(fd)
            return
        if not data:
            self._close(fd)
            return
        conn.last = now
        conn.rbuf += data
        if len(conn.rbuf) > 4 * MAX_HEADER_BYTES and conn.busy:
            self._close(fd)  # a client flooding us while we answer
            return
        self._next_request(fd, conn)

    def _next_request(self, fd: int, conn: _Conn) -> None:
        if conn.busy or conn.close_after:
            return
        try:
            parsed = parse_request(bytes(conn.rbuf))
        except HttpError as exc:
            conn.rbuf.clear()
            self._send(fd, conn, build_response(exc.status, f"{exc}\n".encode(),
                                                keep_alive=False), close=True)
            return
        if parsed is None:
            return
        request, used = parsed
        del conn.rbuf[:used]
        keep_alive = request.keep_alive
        if request.content_length:
            keep_alive = False  # we do not read bodies: answer, then close
            conn.rbuf.clear()
        conn.busy = True
        conn.token = token = next(self._tokens)
        head_only = request.method == "HEAD"

        def respond(status: int, body: bytes = b"", content_type: str = TEXT,
                    headers: Optional[dict] = None) -> None:
            if self.conns.get(fd) is not conn or conn.token != token or not conn.busy:
                return  # the client went away (or this was answered already)
            conn.busy = False
            self._send(fd, conn, build_response(status, body, content_type, keep_alive,
                                                head_only, headers), close=not keep_alive)
            if fd in self.conns and conn.rbuf:
                self._next_request(fd, conn)

        if request.method not in ("GET", "HEAD"):
            respond(405, b"only GET and HEAD\n", headers={"Allow": "GET, HEAD"})
            return
        try:
            self.handler(request, conn.settings, respond)
        except Exception as exc:  # a handler bug answers 500, never takes the agent down
            self.log("error", f"HTTP handler failed for {request.path}: {exc!r}")
            respond(500, b"internal error\n")

    def _send(self, fd: int, conn: _Conn, data: bytes, close: bool) -> None:
        conn.wbuf += data
        conn.close_after = conn.close_after or close
        self._write(fd, conn)

    def _write(self, fd: int, conn: _Conn) -> None:
        while conn.wbuf:
            try:
                sent = conn.sock.send(conn.wbuf)
            except (BlockingIOError, InterruptedError):
                self.poller.modify(fd, zmq.POLLIN | zmq.POLLOUT)
                return
            except OSError:
                self._close(fd)
                return
            del conn.wbuf[:sent]
        self.poller.modify(fd, zmq.POLLIN)
        if conn.close_after:
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._close(fd)

    def _close(self, fd: int) -> None:
        conn = self.conns.pop(fd, None)
        if conn is None:
            return
        try:
            self.poller.unregister(fd)
        except KeyError:
            pass
        conn.sock.close()

    def tick(self, now: float) -> None:
        for fd, conn in list(self.conns.items()):
            if not conn.busy and now - conn.last > IDLE_TIMEOUT:
                self._close(fd)

    def close_all(self) -> None:
        for fd in list(self.conns):
            self._close(fd)
        for fd, (sock, _) in list(self.listeners.items()):
            try:
                self.poller.unregister(fd)
            except KeyError:
                pass
            sock.close()
        self.listeners.clear()


class CoreQueries:
    """Snapshots for the HTTP endpoints and the sink: CoreQuery out, CoreState back, bounded.

    Request ids start at 2**40 so they never meet the management agent's (which count from 1);
    ``on_core_state`` returns False for a CoreState that is not ours.
    """

    FIRST_ID = 1 << 40

    def __init__(self, send_control: Callable[..., None]) -> None:
        self.send_control = send_control
        self._ids = itertools.count(self.FIRST_ID)
        self.pending: dict[int, tuple] = {}  # id -> (on_state, on_timeout, deadline)

    def query(self, on_state: Callable[[dict], None], on_timeout: Callable[[], None],
              timeout: float, now: Optional[float] = None, what: str = "snapshot") -> None:
        request_id = next(self._ids)
        deadline = (time.monotonic() if now is None else now) + timeout
        self.pending[request_id] = (on_state, on_timeout, deadline)
        self.send_control(ipc.CoreQuery(request_id, what))

    def on_core_state(self, fx: Any) -> bool:
        entry = self.pending.pop(fx.request_id, None)
        if entry is None:
            return False
        entry[0](fx.state)
        return True

    def tick(self, now: float) -> None:
        for request_id in [i for i, (_, _, d) in self.pending.items() if d <= now]:
            _, on_timeout, _ = self.pending.pop(request_id)
            on_timeout()

    def next_deadline(self) -> Optional[float]:
        return min((d for _, _, d in self.pending.values()), default=None)


def read_restart_counts(runtime: Optional[str]) -> dict:
    """The supervisor's count of restarts per child (``restarts.json``; none yet: empty)."""
    if not runtime:
        return {}
    try:
        with open(os.path.join(runtime, "restarts.json"), encoding="utf-8") as f:
            counts = json.load(f)
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in counts.items()} if isinstance(counts, dict) else {}


class MetricsService:
    """What the agent serves over HTTP, and the periodic metrics sink."""

    def __init__(self, spec: dict, poller: zmq.Poller, send_control: Callable[..., None],
                 log: Callable[[str, str], None], started: float) -> None:
        self.router_id = spec["router_id"]
        self.runtime = spec.get("runtime")  # the supervisor's runtime directory (restarts.json)
        self.log = log
        self.started = started  # unix time the router started (uptime)
        self.queries = CoreQueries(send_control)
        self.server = HttpServer(poller, self.handle, log)
        self.sink: Any = None
        self.sink_interval = 0.0
        self.next_sample = float("inf")
        self.previous: Optional[dict] = None
        self.previous_at = 0.0
        self.gone_seen = 0  # the newest seq of a removed entity the sink has been given
        self.sampling = False
        self._configure_sink(spec.get("router") or {})

    # --- listeners ----------------------------------------------------------------------------
    def start(self, listeners: list) -> Optional[str]:
        """Bind every http listener; an error text if one cannot be bound."""
        for settings in listeners:
            if not settings.get("http"):
                continue
            try:
                self.server.open_listener(settings)
            except OSError as exc:
                return (f"HTTP listener error on {settings.get('host')}:{settings.get('port')}: "
                        f"{exc.strerror or exc}")
        return None

    def on_config_change(self, change: Any) -> None:
        """Follow management/reload listener changes that concern http listeners."""
        kind = change.entity_type.rsplit(".", 1)[-1]
        attrs = change.attributes
        if kind != "listener" or not attrs.get("http"):
            return
        if change.op == "create":
            try:
                self.server.open_listener(attrs)
            except OSError as exc:
                self.log("error", f"HTTP listener error on {attrs.get('host')}:"
                                  f"{attrs.get('port')}: {exc.strerror or exc}")
        elif change.op == "delete":
            self.server.close_listener(str(attrs.get("name")))

    # --- HTTP ---------------------------------------------------------------------------------
    def handle(self, request: HttpRequest, settings: dict, respond: Callable[..., None]) -> None:
        path = request.path
        if path == "/metrics" and settings.get("metrics", True):
            from agent.metrics import PROMETHEUS_CONTENT_TYPE, prometheus_text

            def on_state(state: dict) -> None:
                text = prometheus_text(state, self.router_id, time.time() - self.started,
                                       read_restart_counts(self.runtime))
                respond(200, text.encode(), PROMETHEUS_CONTENT_TYPE)

            self.queries.query(on_state, lambda: respond(503, b"the router core did not "
                                                              b"answer in time\n"),
                               METRICS_TIMEOUT)
            return
        if path == "/healthz" and settings.get("healthz", True):
            self.queries.query(lambda state: respond(200, b"ok\n"),
                               lambda: respond(503, b"the router core is not answering\n"),
                               HEALTHZ_TIMEOUT)
            return
        respond(404, b"not found\n")

    # --- metrics sink -------------------------------------------------------------------------
    def _configure_sink(self, router: dict) -> None:
        directory = router.get("metricsDir")
        if not directory:
            return
        from agent.metrics_sink import DEFAULT_KEEP_FILES, DEFAULT_MAX_BYTES, MetricsSink
        interval = float(router.get("metricsIntervalSeconds") or 10)
        max_bytes = router.get("metricsMaxBytes")
        keep_files = router.get("metricsKeepFiles")
        try:
            self.sink = MetricsSink(
                directory, self.router_id,
                max_bytes=int(max_bytes) if max_bytes is not None else DEFAULT_MAX_BYTES,
                keep_files=int(keep_files) if keep_files is not None else DEFAULT_KEEP_FILES)
        except (OSError, ValueError) as exc:
            self.log("error", f"metrics sink disabled: cannot use {directory}: {exc}")
            return
        self.sink_interval = max(0.1, interval)
        self.next_sample = time.monotonic() + self.sink_interval
        self.log("info", f"Writing metrics every {self.sink_interval:g} s to {self.sink.path}")

    def _sample(self, now: float) -> None:
        self.sampling = True

        def on_state(state: dict) -> None:
            self.sampling = False
            newest = int(state.get("goneSeq") or 0)
            if newest < self.gone_seen:  # a new core process: its seqs start again
                self.gone_seen = 0
            else:
                self.gone_seen = max([self.gone_seen] + [g.get("seq", 0)
                                                         for g in state.get("gone", ())])
            at = time.monotonic()
            interval = at - self.previous_at if self.previous is not None else self.sink_interval
            from agent.metrics import snapshot_records
            try:
                records = snapshot_records(state, self.router_id, time.time(), interval,
                                           self.previous)
                self.sink.write(records)
            except (OSError, ValueError, TypeError) as exc:
                self.log("error", f"cannot write metrics: {exc}")
            self.previous, self.previous_at = state, at

        def on_timeout() -> None:
            self.sampling = False
            self.log("warning", "metrics sample skipped: the router core did not answer")

        # only the removed entities not seen yet: a snapshot with the whole ring (up to
        # GONE_MAX entries) would cost the core far more than the sample itself
        self.queries.query(on_state, on_timeout, METRICS_TIMEOUT, now,
                           what=f"snapshot+gone>{self.gone_seen}")

    def sample_now(self) -> bool:
        """Start a sample now (the router is stopping); False when there is no sink. The
        caller runs the loop until ``sampling`` is False."""
        if self.sink is None:
            return False
        self._sample(time.monotonic())
        return True

    # --- loop ---------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.queries.tick(now)
        self.server.tick(now)
        if self.sink is not None and now >= self.next_sample:
            self.next_sample = now + self.sink_interval
            if not self.sampling:
                self._sample(now)

    def next_deadline(self) -> Optional[float]:
        deadlines = [d for d in (self.queries.next_deadline(), self.next_sample)
                     if d is not None and d != float("inf")]
        if self.server.conns:
            deadlines.append(time.monotonic() + 1.0)  # idle-connection checks
        return min(deadlines) if deadlines else None

    def close(self) -> None:
        self.server.close_all()
        if self.sink is not None:
            try:
                self.sink.sync()
            except OSError as exc:
                self.log("error", f"cannot sync the metrics file: {exc}")


def is_http_listener(settings: dict) -> bool:
    return bool(settings.get("http"))


__all__ = ["HttpError", "HttpRequest", "HttpServer", "MetricsService", "CoreQueries",
           "build_response", "parse_request", "is_http_listener"]
