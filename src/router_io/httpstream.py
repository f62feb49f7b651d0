"""A connection accepted on an http listener, as the I/O worker sees it.

``HttpStream`` wraps the accepted socket and a :class:`common.httpproto.HttpProtocol`
(TLS, HTTP/1.1 by h11, WebSocket by wsproto). While it speaks HTTP the worker hands its requests
to :func:`static_response` or forwards ``/metrics`` and ``/healthz`` to the agent
(:class:`AgentFetch`). Once a request upgraded it to a WebSocket it behaves, for the worker, like
the socket of any AMQP connection: ``recv_into`` gives the bytes of the binary messages received,
``send`` sends bytes in a binary message; so the proton engine and the rest of the worker loop
treat it as any other connection (routing, management, policy, SASL).

Besides ``router_io.worker`` this is the one module that touches sockets (the worker's).
Must not import router_core.core or agent (except common.security for the TLS password and
protocols).
"""
from __future__ import annotations

import errno
import mimetypes
import os
import socket
import ssl
import sys
import time
from pathlib import Path
from typing import Optional

import h11

from common.httpproto import TEXT, AmqpData, Closed, HttpProtocol

_READ_SIZE = 65536
OUTPUT_HIGH_WATER = 1 << 20   # bytes queued for the socket before the engine is held back
IDLE_TIMEOUT = 30.0           # an HTTP connection (not a WebSocket) waiting for a request
REQUEST_TIMEOUT = 10.0        # from a request's first byte to its end (head and body): else 408
AGENT_TIMEOUT = 10.0          # /metrics, /healthz: the agent answers within this (else 503)
AGENT_RETRY = 0.05            # a request held for an agent not listening yet: connect again
MAX_FILE_BYTES = 16 << 20       # static files are read whole, in the worker loop
AGENT_SOCKET = "http-agent"   # the agent's Unix socket in the router's ipc directory
_EXTRA_TYPES = {".json": "application/json", ".woff2": "font/woff2", ".js": "text/javascript",
                ".mjs": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml",
                ".html": "text/html; charset=utf-8", ".map": "application/json"}


def default_http_root() -> Optional[str]:
    """The console shipped with the router (see NOTES / README): the first existing of
    ``$QDROUTER_CONSOLE_DIR``, ``<prefix>/share/qdrouter-py/console``, ``<repo>/console/dist``."""
    candidates = [os.environ.get("QDROUTER_CONSOLE_DIR") or "",
                  os.path.join(sys.prefix, "share", "qdrouter-py", "console"),
                  str(Path(__file__).resolve().parents[2] / "console" / "dist")]
    for path in candidates:
        if path and os.path.isdir(path):
            return path
    return None


def http_root(settings: dict) -> Optional[str]:
    root = settings.get("httpRootDir")
    return str(root) if root else default_http_root()


def static_response(root: Optional[str], method: str, path: str) -> tuple:
    """``(status, body, content_type, headers)`` for a GET/HEAD of a static file under root.

    Only regular files inside root are served (``..``, symlinks leading out and encoded
    slashes are refused with 404); a directory serves its ``index.html``.
    """
    if method not in ("GET", "HEAD"):
        return 405, b"only GET and HEAD\n", TEXT, {"Allow": "GET, HEAD"}
    if root is None:
        return 404, b"not found\n", TEXT, {}
    from urllib.parse import unquote
    try:
        rel = unquote(path, errors="strict") if "%" in path else path
    except UnicodeDecodeError:  # not UTF-8 once decoded: no such file
        return 404, b"not found\n", TEXT, {}
    if "\x00" in rel or "\\" in rel:
        return 404, b"not found\n", TEXT, {}
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return 404, b"not found\n", TEXT, {}
    base = os.path.realpath(root)
    target = os.path.realpath(os.path.join(base, *parts))
    if target != base and not target.startswith(base + os.sep):
        return 404, b"not found\n", TEXT, {}
    if os.path.isdir(target):
        target = os.path.join(target, "index.html")
    try:
        if not os.path.isfile(target) or os.path.getsize(target) > MAX_FILE_BYTES:
            return 404, b"not found\n", TEXT, {}
        with open(target, "rb") as f:
            body = f.read()
    except OSError:
        return 404, b"not found\n", TEXT, {}
    ext = os.path.splitext(target)[1].lower()
    ctype = _EXTRA_TYPES.get(ext) or mimetypes.guess_type(target)[0] or "application/octet-stream"
    return 200, body, ctype, {}


def tls_context(profile: dict, client_certs: bool = False) -> ssl.SSLContext:
    """A server SSLContext from an sslProfile's attributes (certFile, privateKeyFile, password,
    ciphers, protocols); ``client_certs``: a client certificate signed by caCertFile is
    required (1.19 does so on an http listener with authenticatePeer and a caCertFile).
    Raises ValueError with the reason."""
    from common import security
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    where = f"sslProfile '{profile.get('name')}'"
    try:
        ctx.load_cert_chain(str(profile["certFile"]), str(profile.get("privateKeyFile") or "")
                            or None, security.profile_password(profile))
        if client_certs:
            ctx.load_verify_locations(str(profile["caCertFile"]))
            ctx.verify_mode = ssl.CERT_REQUIRED
        security.set_ciphers_and_protocols(ctx, profile)
    except (OSError, ssl.SSLError, KeyError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return ctx


class HttpStream:
    """An accepted http-listener socket with its protocol state; socket-like once upgraded."""

    def __init__(self, sock: socket.socket, settings: dict, peer: str,
                 tls: Optional[ssl.SSLContext]) -> None:
        self.sock = sock
        self.settings = settings
        self.peer = peer
        self.proto = HttpProtocol(tls, websockets=settings.get("websockets", True) is not False,
                                  tls_required=bool(settings.get("requireSsl")))
        self.amqp_in = bytearray()
        self.out = bytearray()
        self.eof = False
        self.last = time.monotonic()
        self.fetch: Optional[AgentFetch] = None  # the agent answer it waits for, if any
        self.request_started: Optional[float] = None  # a request is being read since then

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def upgraded(self) -> bool:
        return self.proto.ws is not None

    # --- raw socket ---------------------------------------------------------------------------
    def read_events(self) -> list:
        """Read what the socket has and return the protocol's events (b"" read: EOF)."""
        try:
            data = self.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        self.last = time.monotonic()
        if not data:
            self.eof = True
        events = self.proto.receive_data(data)
        self._collect()
        return events

    def _collect(self) -> None:
        if self.out:
            self.out += self.proto.data_to_send()
        else:
            self.out = self.proto.data_to_send()  # taken over, not copied

    def flush(self) -> bool:
        """Write what is queued; True once all of it is written."""
        self._collect()
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                self.out.clear()
                self.eof = True
                return True
            del self.out[:sent]
        return True

    def finished(self) -> bool:
        """The connection is over: nothing more to write and the protocol ended (or EOF)."""
        return (self.proto.must_close or self.eof) and not self.out

    # --- the socket interface the worker's AMQP path uses once upgraded ---------------------
    def recv_into(self, buf, nbytes: int) -> int:
        if not self.amqp_in and not self.eof and not self.proto.closed:
            for event in self.read_events():
                if type(event) is AmqpData:
                    self.amqp_in += event.data
                elif type(event) is Closed:
                    self.eof = True
            if not self.amqp_in and not self.eof and not self.proto.closed:
                raise BlockingIOError
        if not self.amqp_in:
            return 0  # the WebSocket (or the socket) ended
        n = min(nbytes, len(self.amqp_in))
        buf[:n] = self.amqp_in[:n]
        del self.amqp_in[:n]
        return n

    def has_input(self) -> bool:
        return bool(self.amqp_in)

    def send(self, data) -> int:
        if not self.flush() and len(self.out) >= OUTPUT_HIGH_WATER:
            raise BlockingIOError
        if self.proto.closed:
            raise BrokenPipeError
        self.proto.send_amqp(bytes(data))
        self.flush()
        return len(data)

    def close(self) -> None:
        try:
            self.proto.close()
            self.flush()
        except Exception:  # noqa: BLE001 - best effort: the socket closes below
            pass
        self.fetch = None  # the fetch is shared: the worker closes it (worker_http.py)
        self.sock.close()


class AgentFetch:
    """One ``GET /metrics`` or ``/healthz`` asked of the agent over its Unix socket (bounded),
    answered to every request that waits for it (``waiters``: the worker makes one fetch per
    path at a time and the requests that come while it is under way share its answer, so the
    number of clients never decides how many connections the agent sees).

    An agent that is not listening yet (the router is starting, or the agent restarts) does
    not make the request fail: it is held (``connected`` false) and ``retry`` connects again
    until the deadline, so the port answers 200 from the moment it accepts, as 1.19's does
    (its answer waits for the router core, never for a separate process)."""

    NOT_YET = (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN)

    def __init__(self, ipc_dir: str, path: str) -> None:
        self.path = os.path.join(ipc_dir, AGENT_SOCKET)
        self.path_asked = path
        self.request = (f"GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"
                        .encode("ascii"))
        self.deadline = time.monotonic() + AGENT_TIMEOUT
        self.buf = bytearray()
        self.waiters: list = []  # the HttpStreams whose request this answers
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.connected = False
        self.retry()

    def retry(self) -> bool:
        """Connect and send the request; False while the agent is not listening yet. Any
        other failure raises OSError."""
        if self.connected:
            return True
        try:
            self.sock.setblocking(False)
            self.sock.connect(self.path)
            self.sock.send(self.request)
        except OSError as exc:
            self.sock.close()
            if exc.errno not in self.NOT_YET:
                raise
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            return False
        self.connected = True
        return True

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> Optional[tuple]:
        """Read; ``(status, body, content_type)`` once the agent's answer is complete."""
        while True:
            try:
                chunk = self.sock.recv(_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError:
                chunk = b""
            if not chunk:
                return self._parse()
            self.buf += chunk

    def _parse(self) -> tuple:
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method="GET", target="/", headers=[("Host", "agent")]))
        conn.send(h11.EndOfMessage())
        conn.receive_data(bytes(self.buf))
        conn.receive_data(b"")
        status, ctype, body = 502, TEXT, bytearray()
        try:
            while True:
                event = conn.next_event()
                if isinstance(event, h11.Response):
                    status = event.status_code
                    ctype = dict(event.headers).get(b"content-type", TEXT.encode()).decode()
                elif isinstance(event, h11.Data):
                    body += event.data
                elif event is h11.NEED_DATA or isinstance(event, (h11.EndOfMessage,
                                                                   h11.ConnectionClosed)):
                    break
        except h11.RemoteProtocolError:
            return 502, b"bad answer from the router's agent\n", TEXT
        if status == 502:
            return 503, b"the router's agent did not answer\n", TEXT
        return status, bytes(body), ctype

    def close(self) -> None:
        self.sock.close()
