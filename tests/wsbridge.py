"""A loopback TCP -> WebSocket bridge for tests: real proton clients speak AMQP over WebSockets.

Each TCP connection accepted on ``bridge.port`` opens a WebSocket (wsproto client, subprotocol
``amqp`` or ``binary``, optionally over TLS) to the router's http listener and relays bytes both
ways: TCP bytes out as binary messages, binary messages' bytes back to TCP. So
``BlockingConnection(f"amqp://127.0.0.1:{bridge.port}")`` or any client in tests/clients.py
exercises the router's AMQP-over-WebSocket path unchanged. The router sees only WebSocket frames.

One thread per bridged connection; every socket has a timeout; ``close()`` stops all of them.
"""
from __future__ import annotations

import select
import socket
import ssl
import threading
from typing import Optional

from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Message, Ping,
                            RejectConnection, RejectData, Request)


def ws_connect(host: str, port: int, subprotocols: list, tls: Optional[ssl.SSLContext] = None,
               path: str = "/", timeout: float = 10.0) -> tuple:
    """Open a WebSocket; ``(socket, WSConnection, accepted subprotocol)``; raises
    ConnectionError with the router's status if it refuses the upgrade."""
    sock = socket.create_connection((host, port), timeout=timeout)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname=host)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host=f"{host}:{port}", target=path, subprotocols=subprotocols)))
    while True:
        data = sock.recv(65536)
        if not data:
            sock.close()
            raise ConnectionError("closed during the WebSocket handshake")
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                return sock, ws, event.subprotocol
            if isinstance(event, RejectConnection):
                sock.close()
                raise ConnectionError(f"upgrade refused: {event.status_code}")
            if isinstance(event, RejectData):
                continue


class WsBridge:
    def __init__(self, ws_port: int, subprotocol: str = "amqp",
                 tls: Optional[ssl.SSLContext] = None, host: str = "127.0.0.1") -> None:
        self.ws_port, self.subprotocol, self.tls, self.host = ws_port, subprotocol, tls, host
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.running = True
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.accepted: list[str] = []  # the subprotocol the router chose, per connection
        self._accept_thread = threading.Thread(target=self._accept, daemon=True)
        self._accept_thread.start()

    def _accept(self) -> None:
        while self.running:
            try:
                tcp, _ = self.server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._relay, args=(tcp,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _relay(self, tcp: socket.socket) -> None:
        try:
            wsock, ws, chosen = ws_connect(self.host, self.ws_port, [self.subprotocol], self.tls)
        except (OSError, ConnectionError) as exc:
            self.errors.append(str(exc))
            tcp.close()
            return
        self.accepted.append(chosen)
        try:
            self._pump(tcp, wsock, ws)
        except OSError as exc:
            self.errors.append(str(exc))
        finally:
            tcp.close()
            wsock.close()

    def _pump(self, tcp: socket.socket, wsock: socket.socket, ws: WSConnection) -> None:
        while self.running:
            pending = isinstance(wsock, ssl.SSLSocket) and wsock.pending()
            ready = [wsock] if pending else select.select([tcp, wsock], [], [], 0.2)[0]
            if tcp in ready:
                data = tcp.recv(65536)
                if not data:
                    wsock.sendall(ws.send(CloseConnection(code=1000)))
                    return
                wsock.sendall(ws.send(Message(data=data)))
            if wsock in ready:
                data = wsock.recv(65536)
                ws.receive_data(data or None)
                for event in ws.events():
                    if isinstance(event, BytesMessage):
                        tcp.sendall(event.data)
                    elif isinstance(event, Ping):
                        wsock.sendall(ws.send(event.response()))
                    elif isinstance(event, CloseConnection):
                        return
                if not data:
                    return

    def close(self) -> None:
        self.running = False
        self.server.close()
        self._accept_thread.join(5)
        for thread in self.threads:
            thread.join(5)
