"""Connection-scoped link routes (``router.connection.linkRoute``) as Qpid Dispatch 1.19 has them.

A real proton container (:class:`Service`) connects to the router, creates link routes with
management CREATE over its own connection and is their destination: it takes the router's
routed attaches, keeps what it receives and sends what it holds. Real proton clients use the
routes::

    sender/receiver ── R ── Service (routes flea.* in/out created over this connection)

Every test runs against our router and, when ``QDROUTERD_1X`` names a Qpid Dispatch 1.x
install prefix, against 1.19 too with the same assertions (the oracle). Every process is
stopped at teardown; every wait is bounded.
"""
from __future__ import annotations

import collections
import os
import time

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.utils import BlockingConnection

from clients import Loop
from conftest import START_TIMEOUT
from test_link_routes import TIMEOUT, Mgmt
from test_vhost_policy import OPEN_DEFAULT, policy

T = "org.apache.qpid.dispatch."
CLR = T + "router.connection.linkRoute"
ONE_X = os.environ.get("QDROUTERD_1X", "")
HAVE_1X = bool(ONE_X) and os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK)


class Service(MessagingHandler):
    """Creates connection-scoped link routes over its own connection and serves them."""

    def __init__(self, container_id: str) -> None:
        super().__init__(auto_accept=True)
        self.container_id = container_id
        self.conn = None
        self.reply_rcv = None
        self.mgmt = None
        self.reply_to = None
        self.outbox: collections.deque = collections.deque()  # requests not sent yet
        self.replies: list = []   # (statusCode, statusDescription, body)
        self.received: list = []  # bodies that came through the routes
        self.to_send: collections.deque = collections.deque()  # for routed receivers

    def on_connection_opened(self, event) -> None:
        if self.reply_rcv is None:
            self.reply_rcv = event.container.create_receiver(event.connection, None,
                                                             dynamic=True)
            self.mgmt = event.container.create_sender(event.connection, "$management")

    def on_link_opened(self, event) -> None:
        if event.receiver == self.reply_rcv:
            self.reply_to = self.reply_rcv.remote_source.address
            self._flush()

    def on_sendable(self, event) -> None:
        if event.sender == self.mgmt:
            self._flush()
            return
        while self.to_send and event.sender.credit > 0:  # a routed receiver's link
            event.sender.send(Message(body=self.to_send.popleft()))

    def on_message(self, event) -> None:
        if event.receiver == self.reply_rcv:
            props = event.message.properties
            self.replies.append((props["statusCode"], props.get("statusDescription"),
                                 event.message.body))
        else:
            self.received.append(event.message.body)

    def request(self, operation: str, name=None, body=None, **props) -> None:
        props = {"operation": operation, "type": CLR, **props}
        if name is not None:
            props["name"] = name
        self.outbox.append((props, body))
        self._flush()

    def _flush(self) -> None:
        while self.outbox and self.reply_to and self.mgmt.credit > 0:
            props, body = self.outbox.popleft()
            self.mgmt.send(Message(reply_to=self.reply_to, properties=props, body=body))


class Client(MessagingHandler):
    """A sender of ``count`` messages or a receiver, on its own connection."""

    def __init__(self, address: str, count: int = 0, receive: bool = False) -> None:
        super().__init__(auto_accept=True)
        self.address, self.count, self.receive = address, count, receive
        self.sent = self.accepted = 0
        self.received: list = []
        self.link = None

    def on_connection_opened(self, event) -> None:
        if self.receive:
            self.link = event.container.create_receiver(event.connection, self.address)
        else:
            self.link = event.container.create_sender(event.connection, self.address)

    def on_sendable(self, event) -> None:
        while self.sent < self.count and event.sender.credit > 0:
            event.sender.send(Message(body=f"to {self.address} #{self.sent}"))
            self.sent += 1

    def on_accepted(self, event) -> None:
        self.accepted += 1

    def on_message(self, event) -> None:
        self.received.append(event.message.body)


class Session:
    """A Loop, a router and the Service connected to it; ``call`` runs one request."""

    def __init__(self, url: str, container_id: str = "FakeService") -> None:
        self.url = url
        self.loop = Loop()
        self.loop.container.container_id = container_id
        self.service = Service(container_id)
        self.service_conn = self.loop.connect(url, self.service)
        assert self.loop.run_until(lambda: self.service.reply_to is not None), "no reply link"

    def call(self, operation: str, name=None, body=None, **props) -> tuple:
        before = len(self.service.replies)
        self.service.request(operation, name, body, **props)
        assert self.loop.run_until(lambda: len(self.service.replies) > before), \
            f"no answer to {operation} {name}"
        return self.service.replies[before]

    def close(self) -> None:
        self.loop.close()


# --- the two routers under test -----------------------------------------------------------------
@pytest.fixture(params=["ours", pytest.param("1.19", marks=pytest.mark.skipif(
    not HAVE_1X, reason="set QDROUTERD_1X to compare with Qpid Dispatch 1.19"))])
def any_router(request, router_factory, tmp_path):
    if request.param == "ours":
        yield router_factory()
        return
    from test_mixed_1x import MixedNet  # noqa: PLC0415 - only with 1.x
    net = MixedNet(router_factory, tmp_path)
    try:
        yield net.add_1x("Test")  # an interior router on its own: routes work alike
    finally:
        net.stop_all()


@pytest.fixture
def session(any_router):
    s = Session(any_router.url)
    try:
        yield s
    finally:
        s.close()


def query_other(router, entity_type: str, names: list) -> list:
    """A QUERY over another connection (not the service's)."""
    client = Mgmt(router.url)
    try:
        return client.query(entity_type, names)
    finally:
        client.close()


def route_addresses(router) -> dict:
    return {r["key"]: r["containerCount"]
            for r in query_other(router, "router.address", ["key", "distribution",
                                                            "containerCount"])
            if r["distribution"] == "linkBalanced"}


def wait_until(condition, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.1)


# --- tests --------------------------------------------------------------------------------------
def test_create_query_read_delete_over_the_own_connection(any_router, session):
    for i in range(10):
        status, _, body = session.call("CREATE", f"lr1-{i}", {
            "pattern": f"*/hi/there/{i}", "direction": "out" if i % 2 else "in"})
        assert status == 201, body
        assert body["name"] == f"lr1-{i}" and body["pattern"] == f"*/hi/there/{i}"
        assert body["type"] == CLR and body["containerId"] == "FakeService"
        assert str(body["identity"]).isdigit()  # 1.19: a number from its core's counter
    status, _, body = session.call("QUERY", entityType=CLR)
    assert status == 200 and len(body["results"]) == 10
    # another connection sees none of them
    assert query_other(any_router, "router.connection.linkRoute", ["name"]) == []
    status, _, attrs = session.call("READ", "lr1-5")
    assert status == 200
    assert (attrs["name"], attrs["pattern"], attrs["direction"], attrs["containerId"]) == (
        "lr1-5", "*/hi/there/5", "out", "FakeService")
    status, _, by_id = session.call("READ", identity=attrs["identity"])
    assert status == 200 and by_id["name"] == "lr1-5"
    # bad creates: 1.19's checks and texts, in its order
    for bad, text in (({"pattern": "bad", "direction": "bad"}, "Invalid value for 'direction'"),
                      ({"direction": "in"}, "Pattern field is required"),
                      ({}, "Pattern field is required"),
                      ({"pattern": ""}, "Pattern must be a non-empty string type"),
                      ({"pattern": 7}, "Pattern must be a non-empty string type"),
                      ({"pattern": "./."}, "Pattern invalid - no tokens"),
                      ({"pattern": "a.b"}, "Missing value for 'direction'")):
        status, description, _ = session.call("CREATE", "iamnoone", bad)
        assert (status, description) == (400, text), bad
    status, _, _ = session.call("CREATE", "nobody", "not a map")
    assert status == 400
    assert session.call("READ", "iamnoone")[0] == 404
    assert session.call("DELETE", "iamnoone")[0] == 404
    for i in range(10):
        assert session.call("DELETE", f"lr1-{i}")[0] == 204
    status, _, body = session.call("QUERY", entityType=CLR)
    assert status == 200 and body["results"] == []


def test_attaches_route_to_the_creating_connection_and_the_routes_go_with_it(any_router,
                                                                               session):
    """A sender's and a receiver's attach on other connections are routed to the service;
    messages pass both ways; once the service's connection closes the routes and their
    addresses are gone, the links routed through them detached, and a matching attach is
    an ordinary attach again."""
    for name, direction in (("clr1", "out"), ("clr2", "in")):
        status, _, body = session.call("CREATE", name, {"pattern": "flea.*",
                                                        "direction": direction})
        assert status == 201, body
    assert route_addresses(any_router) == {"Eflea.*": 1, "Fflea.*": 1}
    loop = session.loop
    sender = Client("flea.B", count=5)
    loop.connect(any_router.url, sender)
    assert loop.run_until(lambda: sender.accepted == 5), (sender.sent, sender.accepted)
    assert session.service.received == [f"to flea.B #{i}" for i in range(5)]
    session.service.to_send.extend(f"from the service #{i}" for i in range(3))
    receiver = Client("flea.A", receive=True)
    loop.connect(any_router.url, receiver)
    assert loop.run_until(lambda: len(receiver.received) == 3)
    assert receiver.received == [f"from the service #{i}" for i in range(3)]
    session.service_conn.close()
    assert loop.run_until(lambda: session.service_conn.state & session.service_conn.REMOTE_CLOSED)
    wait_until(lambda: route_addresses(any_router) == {}, "route addresses gone")
    # the links routed through them were detached as their destination went away
    assert loop.run_until(lambda: receiver.link.state & receiver.link.REMOTE_CLOSED)
    assert receiver.link.remote_condition.name == "qd:routed-link-lost"
    # flea.C is an ordinary address again: the attach is the router's (no routed detach)
    conn = BlockingConnection(any_router.url, timeout=TIMEOUT)
    try:
        conn.create_sender("flea.C")
        assert not route_addresses(any_router)
    finally:
        conn.close()


def test_deleting_a_route_stops_routing_its_attaches(any_router, session):
    assert session.call("CREATE", "r", {"pattern": "gnat.#", "direction": "in"})[0] == 201
    assert route_addresses(any_router) == {"Cgnat": 1}
    assert session.call("DELETE", "r")[0] == 204
    assert route_addresses(any_router) == {}


# the open $default vhost of test_vhost_policy, its group forbidding them
NO_DYNAMIC_ROUTES = policy() + OPEN_DEFAULT.replace(
    '"allowDynamicSource": true', '"allowDynamicSource": true,\n'
    '            "allowDynamicLinkRoutes": false')


@pytest.mark.parametrize("which", ["ours", pytest.param("1.19", marks=pytest.mark.skipif(
    not HAVE_1X, reason="set QDROUTERD_1X to compare with Qpid Dispatch 1.19"))])
def test_vhost_policy_can_forbid_them(router_factory, tmp_path, which):
    if which == "ours":
        router, net = router_factory(NO_DYNAMIC_ROUTES), None
    else:
        from test_mixed_1x import MixedNet  # noqa: PLC0415 - only with 1.x
        net = MixedNet(router_factory, tmp_path)
        router = net.add_1x("Test", extra=NO_DYNAMIC_ROUTES)
    s = Session(router.url)
    try:
        status, description, _ = s.call("CREATE", "r", {"pattern": "a.#", "direction": "in"})
        assert (status, description) == (403, "Forbidden")
    finally:
        s.close()
        if net is not None:
            net.stop_all()


def test_a_connection_link_route_section_is_a_configuration_error(router_factory):
    router = router_factory("connection.linkRoute {\n    pattern: i/am/bad\n"
                            "    direction: out\n}\n", wait=False)
    assert router.proc.proc.wait(START_TIMEOUT) == 1
