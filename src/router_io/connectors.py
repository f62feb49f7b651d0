"""Outgoing connections of a worker: connectors, their attempts, back-off and failure log lines.

Owns ``Connector`` (one outgoing connection kept up: its socket while connecting, its engine
connection once up, its status for management) and ``ConnectorsMixin``, the part of
``router_io.worker.Worker`` that decides which worker runs a connector (a stable hash of its
name), starts due attempts without blocking (``connect_ex`` + POLLOUT), finishes them when the
socket becomes writable, logs a failed attempt as 1.19 does (``[Cn] Connection to HOST:PORT
failed: proton:io ...``) and retries 1, 2, 4, then every 8 s; a connector whose peer offered a
failover list (``common.failover``) goes through it instead, one attempt a second, each address
twice before the next, as 1.19. The worker's poll loop calls ``_finish_connect`` and
``_service_connectors``; the per-message path is not here.
"""
from __future__ import annotations

import errno
import os
import socket
import time
import zlib
from typing import TYPE_CHECKING, Optional

import zmq

from common import ipc
from common.failover import FailoverList
from common.listenfds import ListenerError, resolve_port

if TYPE_CHECKING:  # the compiled build's worker never imports the pure engine
    from router_io.engine import Connection

POLLIN, POLLOUT = zmq.POLLIN, zmq.POLLOUT


class Connector:
    """An outgoing connection kept up by one worker: connect, and connect again after a loss.

    Retries back off 1, 2, 4 s up to 8 s between attempts, as long as the connector exists.
    """

    def __init__(self, settings: dict) -> None:
        self.settings = settings
        self.name = str(settings.get("name") or f"{settings.get('host')}:{settings.get('port')}")
        # its own address first; then what its peers offer (1.19: amqps with requireSsl and
        # an sslProfile)
        scheme = "amqps" if settings.get("sslProfile") and settings.get("requireSsl") else "amqp"
        self.failover = FailoverList(scheme, str(settings.get("host") or "127.0.0.1"),
                                     str(settings.get("port", "amqp")))
        self.sock: Optional[socket.socket] = None
        self.conn: Optional[Connection] = None
        self.next_attempt = 0.0
        self.failures = 0
        self.message = ""  # the last failure, 1.19's text (management's connectionMsg), or ""

    @property
    def host(self) -> str:
        """The host of the address the next (or current) attempt goes to."""
        return self.failover.current[1]

    @property
    def port(self) -> int:
        return resolve_port(self.failover.current[2])

    @property
    def port_text(self) -> str:
        """The port as configured or offered (1.19's log lines show it so: ``amqp``)."""
        return self.failover.current[2]

    def retry_later(self, now: float, why: Optional[str]) -> None:
        """Try again after a back-off; ``why``: the failure (1.19's text), None for a connection
        that closed in order (reported as no text: the core keeps its Connection Opened text).
        With a failover list: the next address in turn, a second later (as 1.19)."""
        conn = self.conn
        if conn is not None:
            self.take_offered()
            if conn.reported_open:
                self.failover.opened()
        self.sock = None
        self.conn = None
        self.failures += 1
        self.message = why or ""
        self.failover.failed()
        if self.failover.has_failover():
            self.next_attempt = now + 1.0
        else:
            self.next_attempt = now + min(8.0, 2.0 ** (self.failures - 1))

    def take_offered(self) -> bool:
        """Merge the failover list the open connection's peer offered (once); True if it
        offered one."""
        conn = self.conn
        offered = getattr(conn, "failover", None) if conn is not None else None
        if offered is None:
            return False
        conn.failover = None
        self.failover.offered(offered)
        return True

    def report(self) -> ipc.ConnectorStatus:
        """The core's (management's) view of it while it has no open connection: connecting
        (the core shows SUCCESS itself while it has one), and its failover list."""
        return ipc.ConnectorStatus(self.name, "CONNECTING", self.message, self.failover.urls())


class ConnectorsMixin:
    """Worker methods for connectors; the state (``connectors``, ``connecting``,
    ``conn_connector``, ``sockets``, ``sock_of``, ``poller``, ``engine``) is the Worker's."""

    def owns(self, name: str) -> bool:
        """Each connector is run by exactly one worker, chosen by a stable hash of its name."""
        return zlib.crc32(name.encode()) % self.worker_count == self.index

    def open_connector(self, settings: dict) -> bool:
        """Start keeping a connector's connection up (if this worker owns it)."""
        connector = Connector(settings)
        if not self.owns(connector.name) or connector.name in self.connectors:
            return False
        self.connectors[connector.name] = connector
        self.next_tick = 0.0  # attempt at once
        self.engine.outbox.append(connector.report())
        return True

    def close_connector(self, name: str) -> None:
        connector = self.connectors.pop(name, None)
        if connector is None:
            return
        self.engine.outbox.append(ipc.ConnectorStatus(name, "", ""))  # management forgets it
        if connector.conn is not None:
            connector.conn.connection.close()
            self.engine.dirty.add(connector.conn)
            self.conn_connector.pop(connector.conn, None)
        elif connector.sock is not None:
            fd = connector.sock.fileno()
            self.connecting.pop(fd, None)
            self.poller.unregister(connector.sock)
            connector.sock.close()

    def _attempt_failed(self, connector: Connector, now: float, why: str, action: str) -> None:
        """A connection attempt that failed before AMQP: logged at info every time, as 1.19's
        ``[Cn] Connection to HOST:PORT failed: proton:io WHY - ACTION HOST:PORT`` (each attempt
        is a connection of its own there), then retried."""
        where = f"{connector.host}:{connector.port_text}"
        text = (f"[C{self.engine.new_id()}] Connection to {where} failed: proton:io {why} - "
                f"{action} {where}")
        self._log_server("info", text)
        connector.retry_later(now, text)
        self.engine.outbox.append(connector.report())

    def _attempt(self, connector: Connector, now: float) -> None:
        try:
            port = connector.port  # a peer's failover list may offer a port that is not one
        except ListenerError as exc:
            self._attempt_failed(connector, now, str(exc), "connect to ")
            return
        try:
            infos = socket.getaddrinfo(connector.host, port, 0, socket.SOCK_STREAM)
        except OSError as exc:   # socket.gaierror: the host does not resolve; 1.19 keeps trying
            self._attempt_failed(connector, now, exc.strerror or str(exc), "connect to ")
            return
        try:
            family, stype, proto, _, sockaddr = infos[0]
            sock = socket.socket(family, stype, proto)
        except OSError as exc:
            self._attempt_failed(connector, now, exc.strerror or str(exc), "connect to ")
            return
        sock.setblocking(False)
        err = sock.connect_ex(sockaddr)
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self._attempt_failed(connector, now, os.strerror(err), "disconnected")
            return
        connector.sock = sock
        connector.next_attempt = float("inf")
        self.connecting[sock.fileno()] = connector
        self.poller.register(sock, POLLOUT)

    def _finish_connect(self, fd: int) -> None:
        connector = self.connecting.pop(fd)
        sock = connector.sock
        assert sock is not None
        self.poller.unregister(sock)
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        now = time.monotonic()
        if err:
            sock.close()
            self._attempt_failed(connector, now, os.strerror(err), "disconnected")
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        settings = connector.settings
        if connector.failover.index:  # a failover address: its host in the open (as 1.19)
            settings = {**settings, "host": connector.host, "port": connector.port_text}
        conn = self.engine.new_connection(settings, f"{connector.host}:{connector.port}", "out")
        connector.conn = conn
        connector.failures = 0
        self.conn_connector[conn] = connector
        self.sockets[fd] = (sock, conn)
        self.sock_of[conn] = sock
        self.poller.register(sock, POLLIN)
        self._log_server("info", f"[C{conn.conn_id}] Connection to {connector.host}:"
                                 f"{connector.port} established")

    def _service_connectors(self, now: float) -> float:
        """Start due connection attempts; return the next attempt's time."""
        nxt = float("inf")
        for connector in self.connectors.values():
            if connector.sock is None and connector.conn is None and now >= connector.next_attempt:
                self._attempt(connector, now)
            elif connector.conn is not None and connector.take_offered():
                # its peer offered a failover list: management shows it (the status stays
                # the core's SUCCESS while the connection is open)
                self.engine.outbox.append(connector.report())
            nxt = min(nxt, connector.next_attempt)
        return nxt
