"""Details of link routing as 1.19 has them (issue 28, item 13): delivery tags, detaches,
empty transfers. Each is checked the same way against
our router and against a real Qpid Dispatch 1.19 (when QDROUTERD_1X names one, see
test_mixed_1x.py): the route container is a small proton container in a thread that records
the tags it receives and sends tagged messages back; the client sends with its own tags.

1.19 hands each side the other side's own tag (it keeps up to 32 bytes of it) and refuses a
link-routed delivery whose tag is longer: REJECTED ``amqp:invalid-field`` "delivery tag length
exceeded".
"""
import threading
import time

import pytest
from cproton import ffi, lib
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from conftest import free_port
from test_link_routes import TIMEOUT, Mgmt, wait_active
from test_mixed_1x import ONE_X, mixed  # noqa: F401 - the fixture

SENT_TAGS = [b"t", b"client-tag-0123", b"x" * 32, b"y" * 33]
BACK_TAGS = [b"ctag-1", b"c" * 20]


def wait_remote(router):
    """Until ``router`` knows another router with both ``tagq`` route addresses."""
    deadline = time.monotonic() + 30
    while True:
        client = Mgmt(router.url)
        try:
            remote = {a["key"]: a["remoteCount"]
                      for a in client.query("router.address", ["key", "remoteCount"])}
        finally:
            client.close()
        if remote.get("Ctagq") and remote.get("Dtagq"):
            return
        assert time.monotonic() < deadline, f"{router.id} did not learn the routes: {remote}"
        time.sleep(0.2)


def raw_tag(delivery):
    """A delivery's tag as bytes (proton's ``Delivery.tag`` decodes it as UTF-8)."""
    tag = lib.pn_delivery_tag(delivery._impl)
    return ffi.unpack(tag.start, tag.size)


def routes(port):
    return f"""
        connector {{
            name: tags
            host: 127.0.0.1
            port: {port}
            role: route-container
        }}
        linkRoute {{
            prefix: tagq
            direction: in
            connection: tags
        }}
        linkRoute {{
            prefix: tagq
            direction: out
            connection: tags
        }}
        """


class TagContainer:
    """The route container: records (tag, body) of what it receives (and accepts it); on a
    link it is asked to send on, sends one message per BACK_TAGS tag, with that tag."""

    def __init__(self, port):
        outer = self
        self.received = []
        self.ends = {}  # "sender"/"receiver" (its own side) -> "detach" or "close"

        class Handler(MessagingHandler):
            def __init__(self):
                super().__init__(prefetch=10)
                self.to_send = {}

            def on_start(self, event):
                event.container.listen(f"127.0.0.1:{port}")

            def on_link_opening(self, event):  # answered with the termini asked for
                event.link.source.copy(event.link.remote_source)
                event.link.target.copy(event.link.remote_target)

            def on_sendable(self, event):
                todo = self.to_send.setdefault(event.sender, list(BACK_TAGS))
                while todo and event.sender.credit > 0:
                    tag = todo.pop(0)
                    event.sender.send(Message(body=tag.decode()), tag=tag)

            def on_message(self, event):
                outer.received.append((raw_tag(event.delivery), event.message.body))

            def on_link_remote_detach(self, event):
                outer.ends["sender" if event.link.is_sender else "receiver"] = "detach"
                event.link.detach()

            def on_link_remote_close(self, event):
                outer.ends["sender" if event.link.is_sender else "receiver"] = "close"
                event.link.close()

        self.container = Container(Handler())
        self.container.container_id = "tag.container"
        self.thread = threading.Thread(target=self.container.run, daemon=True)
        self.thread.start()

    def stop(self):
        self.container.stop()
        self.thread.join(TIMEOUT)


def exchange(url, pad=""):
    """A client sends one message per SENT_TAGS tag to ``tagq.in`` and receives from
    ``tagq.out``: (tag -> (outcome, condition, description)), [tags received]. Then it
    detaches its sender without closing it (closed=false) and closes its receiver."""
    outcomes, received = {}, []

    class Client(MessagingHandler):
        def on_start(self, event):
            self.conn = event.container.connect(url)
            self.sender = event.container.create_sender(self.conn, "tagq.in")
            self.receiver = event.container.create_receiver(self.conn, "tagq.out")
            self.todo = list(SENT_TAGS)
            self.ended = 0

        def on_sendable(self, event):
            while self.todo and event.sender.credit > 0:
                tag = self.todo.pop(0)
                event.sender.send(Message(body=tag.decode() + pad), tag=tag)

        def _outcome(self, event):
            cond = event.delivery.remote.condition
            outcomes[raw_tag(event.delivery)] = (
                event.delivery.remote_state, cond.name if cond else None,
                cond.description if cond else None)
            self._done_maybe()

        on_accepted = on_rejected = on_released = _outcome

        def on_message(self, event):
            received.append(raw_tag(event.delivery))
            self._done_maybe()

        def _done_maybe(self):
            if len(outcomes) == len(SENT_TAGS) and len(received) == len(BACK_TAGS):
                self.sender.detach()
                self.receiver.close()

        def on_link_remote_detach(self, event):
            self._ended()

        def on_link_remote_close(self, event):
            self._ended()

        def _ended(self):
            self.ended += 1
            if self.ended == 2:
                self.conn.close()

    client = Container(Client())
    thread = threading.Thread(target=client.run, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    if thread.is_alive():
        client.stop()
        thread.join(TIMEOUT)
    return outcomes, received


def check(url, container, pad=""):
    outcomes, received = exchange(url, pad)
    accepted = (0x24, None, None)
    assert outcomes == {
        SENT_TAGS[0]: accepted, SENT_TAGS[1]: accepted, SENT_TAGS[2]: accepted,
        SENT_TAGS[3]: (0x25, "amqp:invalid-field", "delivery tag length exceeded")}
    assert received == BACK_TAGS  # the container's own tags
    deadline = time.monotonic() + TIMEOUT
    while len(container.received) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert container.received == [(tag, tag.decode() + pad) for tag in SENT_TAGS[:3]]
    # the client's detach(closed=false) reaches the container as a detach, its close as a close
    while len(container.ends) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert container.ends == {"receiver": "detach", "sender": "close"}


@pytest.fixture
def tag_container():
    port = free_port()
    container = TagContainer(port)
    yield port, container
    container.stop()


def test_tags_pass_unchanged_through_a_link_route(router_factory, tag_container):
    port, container = tag_container
    router = router_factory(routes(port))
    wait_active(router)
    check(router.url, container)


def test_tags_of_large_streamed_messages(router_factory, tag_container):
    """Messages large enough to be streamed through the router keep their tags too (and the
    one with a tag too long is refused as a small one is)."""
    port, container = tag_container
    router = router_factory(routes(port))
    wait_active(router)
    check(router.url, container, pad="x" * 300_000)


def test_tags_pass_unchanged_across_two_routers(mixed, tag_container):
    """client ── A ── B ── container: each hop keeps the sender's tag."""
    port, container = tag_container
    mixed.add("B", extra=routes(port))
    a = mixed.add("A", connect_to=(("B", 1),))
    wait_remote(a)
    check(a.url, container)


@pytest.mark.skipif(not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix")
def test_tags_through_1_19_as_through_ours(mixed, tag_container):
    """The same exchange through a real 1.19: the expectations above are its behaviour."""
    port, container = tag_container
    x = mixed.add_1x("X", extra=routes(port))
    wait_active(x)
    check(x.url, container)


def empty_transfer(url):
    """A client sends a transfer with no bytes on a routed link: its outcome
    (state, condition, description), or None when none came."""
    outcome = []

    class Client(MessagingHandler):
        def on_start(self, event):
            self.conn = event.container.connect(url)
            event.container.create_sender(self.conn, "tagq.empty")
            self.sent = False

        def on_sendable(self, event):
            if not self.sent:
                self.sent = True
                dlv = event.sender.delivery(b"e")
                event.sender.advance()
                self.dlv = dlv

        def _outcome(self, event):
            cond = event.delivery.remote.condition
            outcome.append((event.delivery.remote_state, cond.name if cond else None,
                            cond.description if cond else None))
            self.conn.close()

        on_accepted = on_rejected = on_released = on_modified = _outcome

    client = Container(Client())
    thread = threading.Thread(target=client.run, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    if thread.is_alive():
        client.stop()
        thread.join(TIMEOUT)
    return outcome[0] if outcome else None


EMPTY_REJECTED = (0x25, "amqp:decode-error", "invalid message format")


def test_an_empty_transfer_is_rejected_at_once(router_factory, tag_container):
    port, container = tag_container
    router = router_factory(routes(port))
    wait_active(router)
    assert empty_transfer(router.url) == EMPTY_REJECTED
    assert container.received == []


@pytest.mark.skipif(not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix")
def test_an_empty_transfer_through_1_19(mixed, tag_container):
    port, container = tag_container
    x = mixed.add_1x("X", extra=routes(port))
    wait_active(x)
    assert empty_transfer(x.url) == EMPTY_REJECTED
    assert container.received == []



def routed_owning_addrs(url):
    """owningAddr of every link while a client's routed sender to ``tagq.owning`` is open."""
    from proton.utils import BlockingConnection  # noqa: PLC0415
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        conn.create_sender("tagq.owning")
        client = Mgmt(url)
        try:
            rows = client.query("router.link", ["linkType", "owningAddr"])
        finally:
            client.close()
        return sorted(r["owningAddr"] for r in rows if r["linkType"] == "endpoint"
                      and r["owningAddr"] and "tagq" in r["owningAddr"])
    finally:
        conn.close()


def test_routed_links_owning_addr_as_1_19_names_it(router_factory, tag_container):
    """Both links of a routed pair name the client's address (M0 + its terminus address)."""
    port, _ = tag_container
    router = router_factory(routes(port))
    wait_active(router)
    assert routed_owning_addrs(router.url) == ["M0tagq.owning", "M0tagq.owning"]


@pytest.mark.skipif(not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix")
def test_routed_links_owning_addr_in_1_19(mixed, tag_container):
    port, _ = tag_container
    x = mixed.add_1x("X", extra=routes(port))
    wait_active(x)
    assert routed_owning_addrs(x.url) == ["M0tagq.owning", "M0tagq.owning"]


COUNTERS = ["deliveriesIngress", "deliveriesEgress", "deliveriesTransit"]


def counters(router) -> list:
    client = Mgmt(router.url)
    try:
        row = client.query("router", COUNTERS)[0]
    finally:
        client.close()
    return [row[name] for name in COUNTERS]


@pytest.mark.parametrize("kind", ["ours", pytest.param("1x", marks=pytest.mark.skipif(
    not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix"))])
def test_routed_deliveries_between_routers_count_as_transit(mixed, tag_container, kind):
    """client ── A ── B ── container: a link-routed delivery that leaves a router on an
    inter-router connection is transit there (1.19), not egress; arriving on one it is
    ingress. Each router's counters move by the same amounts on ours and on 1.19."""
    port, container = tag_container
    if kind == "ours":
        mixed.add("B", extra=routes(port))
        a = mixed.add("A", connect_to=(("B", 1),))
        b = mixed["B"]
    else:
        b = mixed.add_1x("X", extra=routes(port))
        a = mixed.add_1x("Y", connect_to=(("X", 1),))
    wait_remote(a)
    before = counters(a), counters(b)
    check(a.url, container)
    after = counters(a), counters(b)
    moved = [[n - m for n, m in zip(x, y)] for x, y in zip(after, before)]
    # A: the client's 3 (its fourth is refused, tag too long) on to B (transit), B's 2 to
    # the client (egress); B: A's 3 to the container (egress), the container's 2 on to A
    # (transit). Each router also counts one management request (ingress) and its answer
    # (egress) between the two readings.
    assert moved == [[6, 3, 3], [6, 4, 2]]
