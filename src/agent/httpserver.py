"""The agent's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz``, and the metrics sink timer.

A listener with ``http: yes`` is bound by the supervisor and served by the I/O workers
(``router_io.httpstream``: AMQP over WebSockets, static files). They forward ``GET /metrics`` and
``GET /healthz`` here, as HTTP/1.1 over a Unix socket in the router's ipc directory
(``AGENT_SOCKET``), because the answer needs a fresh snapshot of the core, which the agent asks
for. The server is a non-blocking loop around :class:`common.httpproto.HttpProtocol` (h11)
driven by the agent's ZeroMQ poll loop: its sockets are registered (by fd) in the same
``zmq.Poller`` as the core's socket, so nothing here ever blocks or needs a thread.

* ``GET /metrics``  the Prometheus text (``agent.metrics.prometheus_text``) of a FRESH core
  snapshot: the request waits for the CoreState (bounded: ``METRICS_TIMEOUT``, then 503);
* ``GET /healthz``  ``200 ok`` when the core answers a query within ``HEALTHZ_TIMEOUT``, else 503;
* anything else 404; methods other than GET/HEAD 405. (``metrics: no`` / ``healthz: no`` on a
  listener are applied by the worker, which then answers 404 without asking.)

HTTP (h11): keep-alive, pipelined requests answered in order, a bad request answered with h11's
status hint (400, 431...) and the connection closed. Idle connections close after
``IDLE_TIMEOUT``; at most ``MAX_CONNECTIONS`` at once (more get a 503 and are closed).

The metrics sink (router attributes ``metricsDir``, ``metricsIntervalSeconds``,
``metricsMaxBytes``, ``metricsKeepFiles``): every interval a snapshot is taken and its
``agent.metrics.snapshot_records`` are appended by ``agent.metrics_sink.MetricsSink``. The
router's first sample counts from zero at its start (what was sent before it is in its deltas);
when the router stops, the agent takes one more (``sample_now``) and ``close`` closes the file
(``MetricsSink.close``: renamed to its next ``.<n>``, where the streaming job reads it).

Must not import router_io or router_core.core.
"""
from __future__ import annotations

import itertools
import json
import os
import socket
import time
from typing import Any, Callable, Optional

import zmq

from common import httpproto
from common import ipc

MAX_CONNECTIONS = 64
IDLE_TIMEOUT = 30.0
METRICS_TIMEOUT = 5.0
HEALTHZ_TIMEOUT = 2.0
_READ_SIZE = 65536
TEXT = httpproto.TEXT
AGENT_SOCKET = "http-agent"  # in the router's ipc directory; router_io.httpstream asks here


# Handler: (request, listener settings, respond) -> None; respond(status, body, content_type,
# headers=None) may be called later (from the poll loop), exactly once.
Handler = Callable[[httpproto.Request, dict, Callable[..., None]], None]


class _Conn:
    __slots__ = ("sock", "settings", "proto", "wbuf", "last", "token")

    def __init__(self, sock: socket.socket, settings: dict, now: float) -> None:
        self.sock = sock
        self.settings = settings
        self.proto = httpproto.HttpProtocol(websockets=False)
        self.wbuf = bytearray()
        self.last = now
        self.token = 0            # which request a late respond() belongs to


def open_unix_listener(path: str) -> socket.socket:
    """The agent's internal HTTP endpoint: a Unix stream socket only the router's workers use."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(64)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """Sockets around :class:`common.httpproto.HttpProtocol` (h11); what to answer is the
    handler's business."""

    def __init__(self, poller: zmq.Poller, handler: Handler,
                 log: Callable[[str, str], None]) -> None:
        self.poller = poller
        self.handler = handler
        self.log = log
        self.listeners: dict[int, tuple[socket.socket, dict]] = {}
        self.conns: dict[int, _Conn] = {}
        self._tokens = itertools.count(1)

    # --- listeners ----------------------------------------------------------------------------
    def add_listener(self, sock: socket.socket, settings: dict) -> None:
        """Serve a bound, listening, non-blocking socket (the server closes it)."""
        self.listeners[sock.fileno()] = (sock, settings)
        self.poller.register(sock.fileno(), zmq.POLLIN)

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
                sock, _ = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.log("warning", f"HTTP accept failed: {exc}")
                return
            sock.setblocking(False)
            if len(self.conns) >= MAX_CONNECTIONS:
                try:
                    sock.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 21\r\n"
                              b"Connection: close\r\n\r\ntoo many connections\n")
                except OSError:
                    pass
                sock.close()
                continue
            self.conns[sock.fileno()] = _Conn(sock, settings, now)
            self.poller.register(sock.fileno(), zmq.POLLIN)

    def _read(self, fd: int, conn: _Conn, now: float) -> None:
        try:
            data = conn.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data and not conn.proto.busy:
            self._close(fd)
            return
        conn.last = now
        self._events(fd, conn, conn.proto.receive_data(data))

    def _events(self, fd: int, conn: _Conn, events: list) -> None:
        """Pipelined requests in turn, in a loop, while each is answered at once."""
        while events:
            for event in events:
                if type(event) is httpproto.Request:
                    self._request(fd, conn, event)
            if conn.proto.busy or self.conns.get(fd) is not conn:
                break
            events = conn.proto.resume()
        self._write(fd, conn)

    def _request(self, fd: int, conn: _Conn, request: httpproto.Request) -> None:
        conn.token = token = next(self._tokens)
        sync = [True]  # answered while the handler runs: _events goes on with the next request

        def respond(status: int, body: bytes = b"", content_type: str = TEXT,
                    headers: Optional[dict] = None) -> None:
            if self.conns.get(fd) is not conn or conn.token != token:
                return  # the client went away (or this was answered already)
            if not conn.proto.respond(status, body, content_type, headers):
                return
            conn.token = 0
            if not sync[0]:  # a late answer: send it and read on
                self._events(fd, conn, conn.proto.resume())

        if request.method not in ("GET", "HEAD"):
            respond(405, b"only GET and HEAD\n", headers={"Allow": "GET, HEAD"})
            return
        try:
            self.handler(request, conn.settings, respond)
        except Exception as exc:  # a handler bug answers 500, never takes the agent down
            self.log("error", f"HTTP handler failed for {request.path}: {exc!r}")
            respond(500, b"internal error\n")
        sync[0] = False

    def _write(self, fd: int, conn: _Conn) -> None:
        if self.conns.get(fd) is not conn:
            return
        conn.wbuf += conn.proto.data_to_send()
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
        if conn.proto.must_close and not conn.proto.busy:
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
            if not conn.proto.busy and now - conn.last > IDLE_TIMEOUT:
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
        # the router entity's counts the core does not keep (linkRouteCount, autoLinkCount):
        # the agent's configuration store sets this (controlplane)
        self.counts: Callable[[], dict] = dict
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
    def start(self, ipc_dir: str) -> Optional[str]:
        """Serve /metrics and /healthz on the internal Unix socket the workers forward the
        requests of http listeners to; an error text if it cannot be bound."""
        path = os.path.join(ipc_dir, AGENT_SOCKET)
        try:
            self.server.add_listener(open_unix_listener(path), {})
        except OSError as exc:
            return f"cannot serve /metrics and /healthz on {path}: {exc.strerror or exc}"
        return None

    # --- HTTP ---------------------------------------------------------------------------------
    def handle(self, request: httpproto.Request, settings: dict, respond: Callable[..., None]) -> None:
        path = request.path
        if path == "/metrics" and settings.get("metrics", True):
            from agent.metrics import PROMETHEUS_CONTENT_TYPE, prometheus_text

            def on_state(state: dict) -> None:
                text = prometheus_text(state, self.router_id, time.time() - self.started,
                                       read_restart_counts(self.runtime), self.counts())
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
            at, ts = time.monotonic(), time.time()
            previous, interval = self.previous, at - self.previous_at
            if previous is None:
                previous, interval = self._first_baseline(ts)
            from agent.metrics import snapshot_records
            try:
                records = snapshot_records(state, self.router_id, ts, interval, previous)
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

    def _first_baseline(self, ts: float) -> tuple[Optional[dict], float]:
        """The baseline of this agent's first sample and the seconds it covers.

        The router's counters (in the core) start at zero when it starts, so while neither
        this agent nor the core has been restarted, the first sample is taken against an empty
        snapshot (``agent.metrics``: every d_ is the value) covering the time since the router
        started: the traffic sent before the first sample counts in the windows too. After a
        restart the span the counters cover is not known (a restarted agent does not know what
        its predecessor wrote; a restarted core counts from its own start): no baseline (null
        deltas), as before."""
        restarts = read_restart_counts(self.runtime)
        if not restarts.get("agent") and not restarts.get("core") and self.started <= ts:
            return {}, max(0.001, ts - self.started)
        return None, self.sink_interval

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
                self.sink.close()
            except OSError as exc:
                self.log("error", f"cannot close the metrics file: {exc}")


__all__ = ["HttpServer", "MetricsService", "CoreQueries", "open_unix_listener", "AGENT_SOCKET"]
