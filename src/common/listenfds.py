"""Listening sockets owned by the supervisor and lent to the I/O workers.

Why: a listener is bound ONCE, exclusively (no SO_REUSEPORT), so a second router on the same port
fails at start-up instead of silently sharing clients with this one, and a worker that dies and is
restarted finds its listeners still open: connections that arrive meanwhile wait in the kernel's
backlog and are accepted by the other workers or by the new one.

The supervisor runs a :class:`SocketBroker` on a ``SOCK_SEQPACKET`` Unix socket in the router's
private runtime directory. A worker asks it with :func:`request` (one connection per request, one
JSON message each way, file descriptors passed with ``SCM_RIGHTS``):

* ``{"op": "open", "settings": {...}}``: bind the listener (or reuse the socket already bound for
  that name) and lend a duplicate of it;
* ``{"op": "close", "name": N}``: the listener was deleted, the broker closes its own copy;
* ``{"op": "connector", "action": "add"|"del", "settings": {...}}``: keep the list of connectors
  current, so a restarted worker opens the ones created at run time too;
* ``{"op": "list"}``: every current listener (with its socket) and connector, for a worker that
  starts (first start or restart);
* ``{"op": "record", "change": {...}}`` / ``{"op": "journal"}``: the configuration changes made
  at run time (management, reload), in order, as the agent applied them: a restarted agent,
  worker or core replays them on top of the configuration file, so it has what the dead one had
  (runtime vhosts, sslProfiles, addresses, log levels, the agent's entities).

Sans policy: the broker only binds, lends and lists; who asks and when is the worker's business.
Must not import agent or router_io (every process uses it).
"""
from __future__ import annotations

import array
import json
import os
import socket
from typing import Any, Optional

SERVICE_PORTS = {"amqp": 5672, "amqps": 5671}
_MAX_MESSAGE = 1 << 20
_MAX_FDS = 250  # SCM_RIGHTS carries at most 253 descriptors per message on Linux
REQUEST_TIMEOUT = 5.0
_JOURNAL_PAGE_BYTES = 48 * 1024
JOURNAL_MAX = 10000  # runtime changes kept for restarted children (a refusal beyond: logged)


class ListenerError(Exception):
    """A listener could not be bound; ``str()`` is Qpid Dispatch's text for it."""


def broker_path(ipc_dir: str) -> str:
    return os.path.join(ipc_dir, "listeners")


def resolve_port(port: Any) -> int:
    """A port number from a number or a service name (``amqp``, ``amqps``, /etc/services)."""
    text = str(port if port not in (None, "") else "amqp")
    if text.isdigit():
        value = int(text)
        if value > 65535:
            raise ListenerError(f"port {text} out of range")
        return value
    if text in SERVICE_PORTS:
        return SERVICE_PORTS[text]
    try:
        return socket.getservbyname(text, "tcp")
    except OSError:
        raise ListenerError(f"unknown port or service name '{text}'") from None


def listener_name(settings: dict) -> str:
    return str(settings.get("name") or f"{settings.get('host')}:{settings.get('port')}")


def bind_listener(settings: dict) -> socket.socket:
    """Bind and listen, exclusively: SO_REUSEADDR (for TIME_WAIT) but never SO_REUSEPORT.

    Raises :class:`ListenerError` with ``Listener error on HOST:PORT: REASON`` as 1.x logs it.
    """
    host = settings.get("host") or ""
    where = f"{settings.get('host') or ''}:{settings.get('port', 'amqp')}"
    try:
        port = resolve_port(settings.get("port", "amqp"))
        if host in ("", "0.0.0.0"):
            host = "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        family, stype, proto, _, sockaddr = socket.getaddrinfo(
            host, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
    except ListenerError as exc:
        raise ListenerError(f"Listener error on {where}: {exc}") from None
    except OSError as exc:
        raise ListenerError(f"Listener error on {where}: {exc.strerror or exc}") from None
    sock = socket.socket(family, stype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(int(settings.get("backlog") or 128))
    except OSError as exc:
        sock.close()
        raise ListenerError(f"Listener error on {where}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def _recv(sock: socket.socket) -> tuple:
    data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, _MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("peer closed the listener broker connection")
    return json.loads(data.decode("utf-8")), fds


class SocketBroker:
    """The supervisor's side: owns the bound listeners and the list of connectors."""

    def __init__(self, ipc_dir: str) -> None:
        self.path = broker_path(ipc_dir)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server.bind(self.path)
        self.server.listen(64)
        self.server.setblocking(False)
        self.listeners: dict[str, tuple[socket.socket, dict]] = {}
        self.connectors: dict[str, dict] = {}
        self.journal: list = []  # runtime configuration changes, in the order applied

    def fileno(self) -> int:
        return self.server.fileno()

    # --- what the supervisor does itself -------------------------------------------------------
    def open(self, settings: dict) -> socket.socket:
        """Bind a listener (idempotent per name). Raises ListenerError."""
        name = listener_name(settings)
        entry = self.listeners.get(name)
        if entry is not None:
            return entry[0]
        sock = bind_listener(settings)
        self.listeners[name] = (sock, dict(settings))
        return sock

    def close(self, name: str) -> None:
        entry = self.listeners.pop(name, None)
        if entry is not None:
            entry[0].close()

    def add_connector(self, settings: dict) -> None:
        self.connectors[str(settings.get("name"))] = dict(settings)

    def close_all(self) -> None:
        for sock, _ in self.listeners.values():
            sock.close()
        self.listeners.clear()
        self.server.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    # --- requests from workers -----------------------------------------------------------------
    def serve(self) -> None:
        """Answer every request that is waiting (call when the server socket is readable)."""
        while True:
            try:
                conn, _ = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            with conn:
                conn.settimeout(1.0)  # a client sends its request right after connecting
                try:
                    request, fds = _recv(conn)
                    for fd in fds:  # requests never carry descriptors
                        os.close(fd)
                    reply, lend = self._answer(request)
                    socket.send_fds(conn, [json.dumps(reply).encode("utf-8")],
                                    [s.fileno() for s in lend])
                except (OSError, ValueError, ConnectionError, AttributeError, TypeError):
                    continue  # a broken request (or a client that gave up) costs only itself

    def _answer(self, request: dict) -> tuple:
        op = request.get("op")
        if op == "open":
            settings = request.get("settings") or {}
            try:
                sock = self.open(settings)
            except ListenerError as exc:
                return {"ok": False, "error": str(exc)}, []
            return {"ok": True, "name": listener_name(settings)}, [sock]
        if op == "close":
            self.close(str(request.get("name")))
            return {"ok": True}, []
        if op == "connector":
            settings = request.get("settings") or {}
            if request.get("action") == "add":
                self.add_connector(settings)
            else:
                self.connectors.pop(str(settings.get("name")), None)
            return {"ok": True}, []
        if op == "record":
            if len(self.journal) >= JOURNAL_MAX:
                return {"ok": False, "error": f"more than {JOURNAL_MAX} runtime configuration "
                                              "changes: a restarted process will miss this one"}, []
            self.journal.append(request.get("change") or {})
            return {"ok": True}, []
        if op == "journal":  # a page at a time: a SEQPACKET message must fit the socket buffer
            start = max(0, int(request.get("offset") or 0))
            page, size = [], 0
            for change in self.journal[start:]:
                size += len(json.dumps(change))
                if page and size > _JOURNAL_PAGE_BYTES:
                    break
                page.append(change)
            return {"ok": True, "changes": page, "total": len(self.journal)}, []
        if op == "list":
            entries = list(self.listeners.values())[:_MAX_FDS]
            return ({"ok": True, "listeners": [settings for _, settings in entries],
                     "connectors": list(self.connectors.values())},
                    [sock for sock, _ in entries])
        return {"ok": False, "error": f"unknown request {op!r}"}, []


def request(ipc_dir: str, message: dict, timeout: float = REQUEST_TIMEOUT) -> tuple:
    """Ask the supervisor's broker; return ``(reply, [socket.socket, ...])`` (bounded wait)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.settimeout(timeout)
        conn.connect(broker_path(ipc_dir))
        conn.sendall(json.dumps(message).encode("utf-8"))
        reply, fds = _recv(conn)
    socks = []
    for fd in fds:
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        socks.append(sock)
    return reply, socks


def lent_listeners(ipc_dir: str) -> tuple:
    """Every current listener as ``[(socket, settings)]`` and connector settings, for a worker."""
    reply, socks = request(ipc_dir, {"op": "list"})
    return list(zip(socks, reply.get("listeners", []))), reply.get("connectors", [])


def runtime_changes(ipc_dir: str) -> list:
    """The configuration changes made at run time so far (see SocketBroker), oldest first."""
    changes: list = []
    while True:
        reply, socks = request(ipc_dir, {"op": "journal", "offset": len(changes)})
        for sock in socks:
            sock.close()
        page = list(reply.get("changes") or [])
        changes += page
        if not page or len(changes) >= int(reply.get("total") or 0):
            return changes


def open_lent(ipc_dir: str, settings: dict) -> socket.socket:
    """Have the supervisor bind (or reuse) a listener; raises ListenerError with 1.x's text."""
    reply, socks = request(ipc_dir, {"op": "open", "settings": settings})
    if not reply.get("ok") or not socks:
        for sock in socks:
            sock.close()
        raise ListenerError(reply.get("error") or "listener broker refused")
    return socks[0]
