"""An auto-link whose ``connection`` names a listener attaches on every connection of it.

What 1.19 does (observed on a real 1.19 router; ``QDROUTERD_1X`` runs these tests against the
1.x router too): an auto-link names its container by ``connection``, the name of a listener or
connector. Every route-container connection that arrives through that listener is offered the
auto-link's link, not only the first, and so is a connection that arrives after another
closed. Messages to the auto-link's address then reach the containers on all of those links.

Every router and client is real (loopback); every wait is bounded.
"""
from __future__ import annotations


import pytest
from proton import Message
from proton.handlers import MessagingHandler

from clients import Loop
from conftest import free_port

TIMEOUT = 15.0
ADDRESS = "q.auto"


def _config(port: int) -> str:
    return f"""
        listener {{
            name: containers
            host: 127.0.0.1
            port: {port}
            role: route-container
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        autoLink {{
            name: al.out
            address: {ADDRESS}
            direction: out
            connection: containers
        }}
        """


class RouteContainer(MessagingHandler):
    """A route container that accepts the router's attaches and counts what arrives."""

    def __init__(self) -> None:
        super().__init__(auto_accept=True)
        self.attached: list = []   # the addresses the router attached to
        self.received = 0
        self.conn = None

    def on_link_remote_open(self, event) -> None:
        link = event.link
        if not link.state & link.LOCAL_UNINIT:
            return
        if link.is_receiver:
            self.attached.append(link.remote_target.address)
            link.target.address = link.remote_target.address
            link.flow(100)
        else:
            link.source.address = link.remote_source.address
        link.open()

    def on_message(self, event) -> None:
        self.received += 1


class Sender(MessagingHandler):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.sent = 0
        self.accepted = 0

    def on_connection_opened(self, event) -> None:
        event.container.create_sender(event.connection, ADDRESS)

    def on_sendable(self, event) -> None:
        while event.sender.credit and self.sent < self.count:
            event.sender.send(Message(body=f"m{self.sent}"))
            self.sent += 1

    def on_accepted(self, event) -> None:
        self.accepted += 1


@pytest.fixture(params=["ours", "1.x"])
def router_urls(request, router_of_kind):
    """(normal url, route-container listener url) of a fresh router with the auto-link."""
    port = free_port()
    r = router_of_kind(request.param, _config(port))
    return r.url, f"127.0.0.1:{port}"


def test_every_connection_of_the_listener_gets_the_auto_link(router_urls):
    url, containers_url = router_urls
    loop = Loop()
    try:
        first, second = RouteContainer(), RouteContainer()
        first.conn = loop.connect(containers_url, first)
        second.conn = loop.connect(containers_url, second)
        assert loop.run_until(lambda: first.attached and second.attached, TIMEOUT), \
            f"attaches: first {first.attached}, second {second.attached}"
        assert first.attached == [ADDRESS] and second.attached == [ADDRESS]

        sender = Sender(20)
        loop.connect(url.replace("amqp://", ""), sender)
        assert loop.run_until(lambda: sender.accepted == 20, TIMEOUT), \
            f"accepted {sender.accepted} of 20"
        assert first.received + second.received == 20
        assert first.received and second.received  # both links are destinations of the address

        # one container goes; one that comes later through the same listener is attached too
        first.conn.close()
        third = RouteContainer()
        third.conn = loop.connect(containers_url, third)
        assert loop.run_until(lambda: third.attached, TIMEOUT), "no attach after a reconnect"
        assert third.attached == [ADDRESS]
        assert second.attached == [ADDRESS]  # the other connection's link is left alone
    finally:
        loop.close()
