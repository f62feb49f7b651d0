"""The http listeners of a worker: HTTP requests, static files, /metrics, WebSocket upgrades.

Owns ``HttpMixin``, the part of ``router_io.worker.Worker`` that serves a listener with
``http: yes``: accepting a connection as an ``HttpStream`` (h11, TLS from its sslProfile), its
requests (``/metrics`` and ``/healthz`` asked of the agent through ``AgentFetch``, other GETs
static files from ``httpRootDir``), idle time-outs, and the WebSocket upgrade that turns a
stream into an AMQP connection of the engine like any other (its bytes then take the worker's
ordinary ``_read``/``_flush`` path). The protocol itself is common.httpproto and
router_io.httpstream; the state (``http``, ``ws``, ``fetches``...) is the Worker's.
"""
from __future__ import annotations

import socket
import traceback
from typing import Any

import zmq

from common.httpproto import AmqpData, Closed, Request, Upgraded
from router_io.httpstream import (AGENT_RETRY, IDLE_TIMEOUT, REQUEST_TIMEOUT, AgentFetch,
                                  HttpStream, http_root, static_response, tls_context)

POLLIN, POLLOUT = zmq.POLLIN, zmq.POLLOUT


class HttpMixin:
    """Worker methods for http listeners (see the module docstring)."""

    def _http_tls(self, settings: dict) -> Any:
        name = settings.get("sslProfile")
        if not name:
            return None
        profile = settings.get("sslProfileAttributes") or self.engine.ssl_profiles.get(str(name))
        if profile is None:
            raise ValueError(f"sslProfile '{name}' is not configured")
        client_certs = bool(settings.get("authenticatePeer") and profile.get("caCertFile"))
        key = (str(name), id(profile), client_certs)
        ctx = self.tls_contexts.get(key)
        if ctx is None:
            ctx = self.tls_contexts[key] = tls_context(profile, client_certs)
        return ctx

    def _http_accept(self, sock: socket.socket, settings: dict, host: str) -> None:
        try:
            tls = self._http_tls(settings)
        except ValueError as exc:
            self._log_server("error", f"HTTP connection from {host} refused: {exc}")
            sock.close()
            return
        stream = HttpStream(sock, settings, host, tls)
        self.http[sock.fileno()] = stream
        self.poller.register(stream, POLLIN)

    def _http_event(self, fd: int, mask: int) -> None:
        stream = self.http[fd]
        try:
            if mask & POLLIN:
                self._http_events(fd, stream, stream.read_events())
            if self.http.get(fd) is stream:
                self._http_flush(fd, stream)
        except Exception as exc:  # noqa: BLE001 - that connection closes, the worker goes on
            self._log_server("error", f"HTTP connection from {stream.peer}: internal error: "
                             + "".join(traceback.format_exception(exc)).rstrip())
            if self.http.get(fd) is stream:
                self._http_close(fd)

    def _http_events(self, fd: int, stream: HttpStream, events: list) -> None:
        """Handle the requests read; pipelined ones in turn, in a loop (not recursion), as long
        as each is answered at once (a forwarded one resumes the loop when answered)."""
        while events:
            for i, event in enumerate(events):
                if type(event) is Request:
                    self._http_request(stream, event)
                elif type(event) is Upgraded:
                    self._ws_upgrade(fd, stream, events[i + 1:])
                    return
                elif type(event) is Closed and not stream.eof and stream.proto.ws is None:
                    self._log_server("info", f"HTTP connection from {stream.peer} closed: "
                                             f"{event.reason}")
            if stream.proto.busy or self.http.get(fd) is not stream:
                return
            events = stream.proto.resume()

    def _http_request(self, stream: HttpStream, request: Request) -> None:
        path, settings = request.path, stream.settings
        if (path in ("/metrics", "/healthz") and settings.get(path[1:], True) is not False
                and request.method in ("GET", "HEAD")):
            self._ask_agent(stream, path)
            return
        status, body, ctype, headers = static_response(http_root(settings), request.method, path)
        stream.proto.respond(status, body, ctype, headers)

    def _ask_agent(self, stream: HttpStream, path: str) -> None:
        """Wait for the agent's answer for ``path``: the fetch under way if there is one
        (its answer is given to every request waiting for it), else a new one. So a worker
        holds at most one connection to the agent per path, however many clients ask."""
        fetch = self.agent_fetches.get(path)
        if fetch is None:
            try:
                fetch = AgentFetch(self.ipc_dir, path)
            except OSError as exc:
                stream.proto.respond(503, f"the router's agent is not reachable: {exc}\n"
                                     .encode())
                return
            self.agent_fetches[path] = fetch
            if fetch.connected:
                self._fetch_started(fetch)
            # else held: _http_tick connects again (the agent is starting)
        fetch.waiters.append(stream)
        stream.fetch = fetch

    def _http_respond(self, stream: HttpStream, status: int, body: bytes,
                      ctype: str = "text/plain; charset=utf-8") -> None:
        """A late answer (from the agent, or its timeout): send it, then go on reading."""
        if not stream.proto.respond(status, body, ctype):
            return
        fd = stream.fileno()
        if self.http.get(fd) is stream:
            self._http_events(fd, stream, stream.proto.resume())  # pipelined requests
        if self.http.get(fd) is stream:
            self._http_flush(fd, stream)

    def _http_flush(self, fd: int, stream: HttpStream) -> None:
        done = stream.flush()
        # a client that ended its side after a request still gets the answer
        if stream.finished() and stream.fetch is None or stream.eof and done \
                and not stream.proto.busy:
            self._http_close(fd)
            return
        # after the client's end of stream the socket stays readable: stop polling for input;
        # so too while the protocol holds enough unanswered input or unread answers (its
        # back-pressure: pipelined requests wait in the socket, none is refused)
        readable = not stream.eof and stream.proto.wants_input()
        mask = (POLLIN if readable else 0) | (0 if done else POLLOUT)
        try:
            self.poller.modify(stream, mask)  # (mask 0 unregisters it until the next one)
        except KeyError:  # unregistered already by an earlier mask 0
            pass

    def _http_close(self, fd: int) -> None:
        stream = self.http.pop(fd, None)
        if stream is None:
            return
        fetch = stream.fetch
        if fetch is not None and stream in fetch.waiters:
            fetch.waiters.remove(stream)  # the fetch goes on for the others (and ends bounded)
        try:
            self.poller.unregister(stream)
        except KeyError:
            pass
        stream.close()

    def _fetch_started(self, fetch: AgentFetch) -> None:
        self.fetches[fetch.fileno()] = fetch
        self.poller.register(fetch, POLLIN)

    def _fetch_done(self, fetch: AgentFetch, answer: tuple) -> None:
        """The fetch is over: its socket closes and every request waiting for it is answered."""
        if self.agent_fetches.get(fetch.path_asked) is fetch:
            del self.agent_fetches[fetch.path_asked]
        if self.fetches.get(fetch.fileno()) is fetch:
            del self.fetches[fetch.fileno()]
            try:
                self.poller.unregister(fetch)
            except KeyError:
                pass
        fetch.close()
        waiters, fetch.waiters = fetch.waiters, []
        for stream in waiters:
            stream.fetch = None
            if self.http.get(stream.fileno()) is stream:
                self._http_respond(stream, *answer)

    def _fetch_event(self, fd: int) -> None:
        fetch = self.fetches[fd]
        answer = fetch.read()
        if answer is not None:
            self._fetch_done(fetch, answer)

    def _http_tick(self, now: float) -> float:
        """Time-outs (agent answers, idle connections), and the fetches held for an agent not
        listening yet; returns when to tick again."""
        held = False
        for fetch in list(self.agent_fetches.values()):
            if fetch.connected:
                if now >= fetch.deadline:
                    self._fetch_done(fetch, (503, b"the router's agent did not answer in time\n"))
                continue
            try:
                if fetch.retry():
                    self._fetch_started(fetch)
                    continue
            except OSError as exc:
                reason = f"the router's agent is not reachable: {exc}\n"
            else:
                if now < fetch.deadline:
                    held = True
                    continue
                reason = "the router's agent is not reachable: it did not start in time\n"
            self._fetch_done(fetch, (503, reason.encode()))
        for fd, stream in list(self.http.items()):
            if stream.proto.reading_request():
                # a deadline for the whole request, however slowly its bytes come (the idle
                # time restarts at each byte)
                if stream.request_started is None:
                    stream.request_started = now
                elif now - stream.request_started > REQUEST_TIMEOUT:
                    self._log_server("info", f"HTTP connection from {stream.peer} closed: "
                                             "request not complete in time")
                    stream.proto.request_timed_out()
                    self._http_flush(fd, stream)
                continue
            stream.request_started = None
            if stream.fetch is None and not stream.proto.busy \
                    and now - stream.last > IDLE_TIMEOUT:
                self._http_close(fd)
        return now + (AGENT_RETRY if held else 1.0)

    def _ws_upgrade(self, fd: int, stream: HttpStream, rest: list) -> None:
        """The request became a WebSocket: from now on an AMQP connection like any other."""
        for event in rest:
            if type(event) is AmqpData:
                stream.amqp_in += event.data
            elif type(event) is Closed:
                stream.eof = True
        # TLS, if any, is the WebSocket's (HttpStream); proton sees plain AMQP
        settings = {k: v for k, v in stream.settings.items()
                    if k not in ("sslProfile", "requireSsl", "requireEncryption")}
        conn = self.engine.new_connection(settings, stream.peer, "in")
        del self.http[fd]
        self.poller.modify(stream, POLLIN)  # _flush_one asks for POLLOUT when it needs it
        self.sockets[fd] = (stream, conn)
        self.sock_of[conn] = stream
        self.ws[fd] = (stream, conn)
        self._log_server("info", f"[C{conn.conn_id}] Accepted WebSocket connection to "
                                 f"{stream.settings.get('host')}:{stream.settings.get('port')} "
                                 f"from {stream.peer}")
        self._handshake_deadline(conn, stream.settings)
        self._flush_one(stream, conn)  # the 101 answer
        if stream.amqp_in or stream.eof:
            self._read(stream, conn)

    def _ws_pending_input(self) -> None:
        """AMQP bytes decoded from WebSocket messages wait for the engine's capacity: the
        socket is not readable any more, so the poll would not bring them back."""
        for stream, conn in list(self.ws.values()):
            if stream.amqp_in and conn.capacity() > 0 and self.sock_of.get(conn) is stream:
                self._read(stream, conn)
