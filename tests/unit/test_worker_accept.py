"""What the worker's accept gives each connection's socket without a call a connection: a
listener's options that Linux hands to every socket accepted from it."""
from __future__ import annotations

import socket
from types import SimpleNamespace

from router_io.sockpoll import SocketPoller
from router_io.worker import Worker


def test_a_listener_gives_its_accepted_sockets_tcp_nodelay():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    poller = SocketPoller()
    worker = SimpleNamespace(listeners={}, poller=poller)
    clients, accepted = [], []
    try:
        Worker._add_listener(worker, listener, {"host": "127.0.0.1"})
        assert worker.listeners[listener.fileno()] == (listener, {"host": "127.0.0.1"})
        for _ in range(3):
            clients.append(socket.create_connection(listener.getsockname(), timeout=5))
            accepted.append(listener.accept()[0])
        assert [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted] == [1] * 3
    finally:
        for s in clients + accepted + [listener]:
            s.close()
        poller.close()
