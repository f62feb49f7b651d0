"""A real AMQP container for tests that listens, and opens links on every connection it accepts.

A router's connector connects to it; once the router's open arrives the peer attaches one link
per ``(direction, address)`` asked for ("send" = the peer sends, the router receives), and
records how the router answered each: ``"open"`` or the condition it was closed with, or how
the connection itself ended. ``python tests/link_opening_peer.py PORT send:a recv:b ...`` runs
it standalone (prints the outcomes as JSON lines, for comparing with another router).
"""
from __future__ import annotations

import json
import sys
import threading

from proton import Endpoint
from proton.handlers import MessagingHandler
from proton.reactor import Container


class LinkOpeningPeer(MessagingHandler):
    def __init__(self, port: int, links: list, on_result=None) -> None:
        super().__init__(auto_accept=True)
        self.port = port
        self.links = list(links)
        self.results: dict = {}  # "send:addr" / "recv:addr" / "connection" -> outcome
        self.done = threading.Event()
        self.ready = threading.Event()
        self.on_result = on_result
        self.acceptor = None

    def _record(self, key: str, value: str) -> None:
        if key in self.results:
            return
        self.results[key] = value
        if self.on_result:
            self.on_result(key, value)
        if all(f"{d}:{a}" in self.results for d, a in self.links) or key == "connection":
            self.done.set()

    def on_start(self, event) -> None:
        self.acceptor = event.container.listen(f"127.0.0.1:{self.port}")
        self.ready.set()

    def on_connection_opened(self, event) -> None:
        for direction, address in self.links:
            name = f"{direction}:{address}"
            if direction == "send":
                event.container.create_sender(event.connection, address, name=name)
            else:
                event.container.create_receiver(event.connection, address, name=name)

    def on_link_opened(self, event) -> None:
        if event.link.remote_source.address or event.link.remote_target.address:
            self._record(event.link.name, "open")

    def on_link_remote_close(self, event) -> None:
        cond = event.link.remote_condition
        self._record(event.link.name, f"{cond.name}: {cond.description}" if cond else "closed")
        event.link.close()

    def on_link_error(self, event) -> None:
        """Recorded by on_link_remote_close. MessagingHandler's default would close the whole
        connection here, racing the router's answers to the other links."""

    def on_connection_remote_close(self, event) -> None:
        cond = event.connection.remote_condition
        self._record("connection", f"{cond.name}: {cond.description}" if cond else "closed")
        if not event.connection.state & Endpoint.LOCAL_CLOSED:
            event.connection.close()

    def on_transport_error(self, event) -> None:
        pass


def run_in_thread(port: int, links: list) -> tuple:
    """(peer, container, thread): a running peer; stop with ``stop(container, thread)``."""
    peer = LinkOpeningPeer(port, links)
    container = Container(peer, container_id="link-opening-peer")
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    peer.ready.wait(10)
    return peer, container, thread


def stop(peer: LinkOpeningPeer, container: Container, thread: threading.Thread) -> None:
    def close(_event=None):
        if peer.acceptor is not None:
            peer.acceptor.close()
        container.stop()
    container.schedule(0, type("Stop", (), {"on_timer_task": lambda self, e: close()})())
    thread.join(10)


if __name__ == "__main__":
    wanted = [tuple(arg.split(":", 1)) for arg in sys.argv[2:]]
    Container(LinkOpeningPeer(int(sys.argv[1]), wanted,
                              lambda k, v: print(json.dumps([k, v]), flush=True))).run()
