"""Connectors: the router opens outgoing connections, and opens them again after a loss."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

from conftest import free_port

TIMEOUT = 15


PEER_SCRIPT = r"""
import sys
from proton.handlers import MessagingHandler
from proton.reactor import Container

class Peer(MessagingHandler):
    def on_start(self, event):
        event.container.listen("127.0.0.1:%s" % sys.argv[1])
        print("LISTENING", flush=True)

    def on_connection_opened(self, event):
        c = event.connection
        props = dict(c.remote_properties or {})
        print("OPENED", c.remote_container, props.get("product"), c.remote_hostname, flush=True)
        if len(sys.argv) > 2 and sys.argv[2] == "close":  # closes it at once, in order
            c.close()

Container(Peer()).run()
"""


class Peer:
    """A proton peer in its own process, so killing it really closes its sockets."""

    def __init__(self, port: int, *how: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", PEER_SCRIPT, str(port), *how],
                                     stdout=subprocess.PIPE, text=True)
        self.lines: list = []
        self.opened = threading.Event()
        self.listening = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.split())
            if line.startswith("OPENED"):
                self.opened.set()
            elif line.startswith("LISTENING"):
                self.listening.set()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(TIMEOUT)
        self.thread.join(TIMEOUT)


def test_connector_connects_and_reconnects(router_factory):
    port = free_port()
    peer = Peer(port)
    try:
        router_factory(router_id="Router.C", extra=f"""
            connector {{
                name: peer
                host: 127.0.0.1
                port: {port}
                role: normal
            }}
            """)
        assert peer.opened.wait(TIMEOUT), "the router never connected"
        assert peer.lines[-1] == ["OPENED", "Router.C", "qpid-dispatch-router", "127.0.0.1"]
    finally:
        peer.stop()
    # The peer went away; a new one on the same port is connected to again.
    peer2 = Peer(port)
    try:
        assert peer2.opened.wait(TIMEOUT), "the router did not reconnect"
    finally:
        peer2.stop()


def test_connector_to_nothing_keeps_retrying_and_router_serves(router_factory):
    port = free_port()
    r = router_factory(extra=f"""
        connector {{
            host: 127.0.0.1
            port: {port}
        }}
        """)
    time.sleep(1.5)  # a few failed attempts
    assert r.proc.proc.poll() is None
    from proton.utils import BlockingConnection
    from proton import Message
    conn = BlockingConnection(r.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("still-works", credit=1)
        dlv = conn.create_sender("still-works").link.send(Message(body="ok"))
        assert rcv.receive(timeout=TIMEOUT).body == "ok"
        rcv.accept()
        conn.wait(lambda: dlv.settled, timeout=TIMEOUT)
    finally:
        conn.close()
    # and the peer appearing later gets connected
    peer = Peer(port)
    try:
        assert peer.opened.wait(TIMEOUT)
    finally:
        peer.stop()


def test_connector_status_in_management_as_1_19_shows_it(router_factory):
    """READ of a connector shows 1.19's read-only columns: CONNECTING and the last failed
    attempt while nothing listens, SUCCESS and the Connection Opened text while connected,
    CONNECTING again after the peer is gone; failoverUrls is the URL it connects to. (Same
    texts as a real 1.19 router answers.)"""
    import re
    from test_management import T, Mgmt  # (same folder: tests/system)
    port = free_port()
    router = router_factory(router_id="Router.S", extra=f"""
        connector {{
            name: peer
            host: 127.0.0.1
            port: {port}
            role: normal
        }}
        """)
    mgmt = Mgmt(router.url)

    def read() -> dict:
        status, _, body = mgmt.call({"operation": "READ", "type": T + "connector",
                                     "name": "peer"})
        assert status == 200
        return body

    def wait_status(status: str) -> dict:
        deadline = time.monotonic() + TIMEOUT
        while True:
            body = read()
            if body["connectionStatus"] == status:
                return body
            assert time.monotonic() < deadline, body
            time.sleep(0.1)

    peer = None
    try:
        body = wait_status("CONNECTING")
        deadline = time.monotonic() + TIMEOUT
        while not body["connectionMsg"]:  # the first attempt's failure
            assert time.monotonic() < deadline, body
            time.sleep(0.1)
            body = read()
        where = f"127.0.0.1:{port}"
        assert re.fullmatch(rf"\[C\d+\] Connection to {where} failed: proton:io Connection "
                            rf"refused - disconnected {where}", body["connectionMsg"]), body
        assert body["failoverUrls"] == f"amqp://{where}"
        peer = Peer(port)
        body = wait_status("SUCCESS")
        assert re.fullmatch(rf"\[C\d+\] Connection Opened: dir=out host={where} vhost= "
                            r"encrypted=no auth=\S+ user=\(null\) container_id=\S*",
                            body["connectionMsg"]), body
        peer.stop()
        peer = None
        wait_status("CONNECTING")
        # a deleted connector is forgotten: one of the same name starts afresh
        status, _, _ = mgmt.call({"operation": "DELETE", "type": T + "connector",
                                  "name": "peer"})
        assert status == 204
    finally:
        if peer is not None:
            peer.stop()
        mgmt.close()


def test_connector_closed_in_order_keeps_its_connection_opened_text(router_factory):
    """A peer that closes the connection in order (no error): while the router connects again,
    READ shows CONNECTING and still the last Connection Opened text, as 1.19 (only a failed
    attempt replaces it)."""
    import re
    from test_management import T, Mgmt  # (same folder: tests/system)
    port = free_port()
    peer = Peer(port, "close")
    mgmt = None
    try:
        assert peer.listening.wait(TIMEOUT)  # so no attempt fails (that text would replace it)
        router = router_factory(router_id="Router.S", extra=f"""
            connector {{
                name: closer
                host: 127.0.0.1
                port: {port}
                role: normal
            }}
            """)
        mgmt = Mgmt(router.url)
        deadline = time.monotonic() + TIMEOUT
        while True:
            status, _, body = mgmt.call({"operation": "READ", "type": T + "connector",
                                         "name": "closer"})
            assert status == 200
            if body["connectionStatus"] == "CONNECTING" and body["connectionMsg"]:
                break  # closed by the peer, waiting to connect again
            assert time.monotonic() < deadline, body
            time.sleep(0.05)
        assert re.fullmatch(rf"\[C\d+\] Connection Opened: dir=out host=127.0.0.1:{port} "
                            r"vhost= encrypted=no auth=\S+ user=\(null\) container_id=\S*",
                            body["connectionMsg"] or ""), body
    finally:
        if mgmt is not None:
            mgmt.close()
        peer.stop()
