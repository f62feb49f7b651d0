"""Link routing through real routers to a real broker (tests/brokers.py: proton-C's example
broker). Real proton clients; every process is stopped at teardown, every wait bounded.

One router::

    client ── R (linkRoute queue in/out) ── route-container connector ── broker
"""
import threading
import time

import pytest
from proton import Message
from proton.utils import BlockingConnection, LinkDetached, SyncRequestResponse

TIMEOUT = 10
T = "org.apache.qpid.dispatch."


class Mgmt:
    """A management client over one connection (bounded waits)."""

    def __init__(self, url):
        self.conn = BlockingConnection(url, timeout=TIMEOUT)
        self.rr = SyncRequestResponse(self.conn, "$management")

    def call(self, props, body=None):
        reply = self.rr.call(Message(properties=props, body=body))
        return reply.properties["statusCode"], reply.properties["statusDescription"], reply.body

    def query(self, entity_type, names):
        status, _, body = self.call({"operation": "QUERY", "entityType": T + entity_type},
                                    {"attributeNames": names})
        assert status == 200
        return [dict(zip(body["attributeNames"], r)) for r in body["results"]]

    def close(self):
        self.conn.close()


def route_config(broker, by="connection", name="broker", prefix="queue"):
    where = f"connection: {name}" if by == "connection" else f"containerId: {broker.container_id}"
    return f"""
        connector {{
            name: {name}
            host: 127.0.0.1
            port: {broker.port}
            role: route-container
        }}
        linkRoute {{
            prefix: {prefix}
            direction: in
            {where}
        }}
        linkRoute {{
            prefix: {prefix}
            direction: out
            {where}
        }}
        """


def wait_active(router, count=2, timeout=TIMEOUT):
    """Until the router's link routes are active (its connector reached the broker)."""
    deadline = time.monotonic() + timeout
    while True:
        client = Mgmt(router.url)
        try:
            rows = client.query("router.config.linkRoute", ["operStatus"])
        finally:
            client.close()
        if sum(1 for r in rows if r["operStatus"] == "active") >= count:
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"link routes not active: {rows}")
        time.sleep(0.1)


@pytest.mark.parametrize("by", ["connection", "containerId"])
def test_send_and_receive_through_a_link_route(router_factory, c_broker, by):
    broker = c_broker("broker.lr")
    router = router_factory(route_config(broker, by))
    wait_active(router)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        snd = conn.create_sender("queue.one")
        for i in range(5):
            snd.send(Message(body=f"m{i}"))  # settled by the broker: accepted
        rcv = conn.create_receiver("queue.one", credit=10)
        assert [rcv.receive(timeout=TIMEOUT).body for _ in range(5)] == [f"m{i}" for i in range(5)]
    finally:
        conn.close()
    # the messages were at the broker: a direct receiver finds nothing left, and a message
    # sent straight to the broker comes out through the router
    direct = BlockingConnection(f"amqp://{broker.address}", timeout=TIMEOUT)
    try:
        direct.create_sender("queue.two").send(Message(body="from the broker"))
    finally:
        direct.close()
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("queue.two", credit=1)
        assert rcv.receive(timeout=TIMEOUT).body == "from the broker"
    finally:
        conn.close()


def test_no_route_detaches_with_1_19_condition(router_factory, c_broker):
    broker = c_broker("broker.none")
    broker.stop()  # the connector never reaches it
    router = router_factory(route_config(broker))
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        with pytest.raises(LinkDetached) as info:
            conn.create_sender("queue.x")
        assert "qd:no-route-to-dest" in str(info.value)
        with pytest.raises(LinkDetached) as info:
            conn.create_receiver("queue.x")
        assert "qd:no-route-to-dest" in str(info.value)
        conn.create_sender("other")  # the connection is still fine; other addresses routed
    finally:
        conn.close()


def test_broker_lost_detaches_routed_links_and_they_reattach(router_factory, c_broker):
    broker = c_broker("broker.restart")
    router = router_factory(route_config(broker))
    wait_active(router)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("queue.r", credit=5)
        broker.stop()
        with pytest.raises(LinkDetached) as info:  # a Timeout if it is never detached
            conn.wait(lambda: False, timeout=TIMEOUT, msg="the routed link was not detached")
        assert rcv.link.remote_condition.name == "qd:routed-link-lost"
        assert "Connectivity to the peer container was lost" in str(info.value)
        assert not conn.conn.state & conn.conn.REMOTE_CLOSED  # the client keeps its connection
        broker.start()
        wait_active(router, timeout=20)  # the connector retries with back-off
        snd = conn.create_sender("queue.r")
        snd.send(Message(body="after restart"))
        rcv = conn.create_receiver("queue.r", credit=1)
        assert rcv.receive(timeout=TIMEOUT).body == "after restart"
    finally:
        conn.close()


def test_management_shows_link_routes_and_their_addresses(router_factory, c_broker):
    broker = c_broker("broker.mgmt")
    router = router_factory(route_config(broker))
    rows = wait_active(router)
    assert len(rows) == 2
    assert "ROUTER_CORE (info) Link Route Activated 'linkRoute/0' on connection " \
           "broker" in router.proc.wait_for_line("Link Route Activated")
    client = Mgmt(router.url)
    try:
        addrs = {a["key"]: a for a in client.query("router.address",
                                                  ["key", "distribution", "containerCount"])}
        assert addrs["Cqueue"]["distribution"] == "linkBalanced"
        assert addrs["Cqueue"]["containerCount"] == 1 and addrs["Dqueue"]["containerCount"] == 1
        lr = T + "router.config.linkRoute"
        status, description, _ = client.call(
            {"operation": "CREATE", "type": lr, "name": "bad"},
            {"prefix": "p", "direction": "in", "connection": "broker", "containerId": "x"})
        assert (status, description) == (
            400, "Both connection and containerId cannot be specified. Specify only one")
        status, _, created = client.call(
            {"operation": "CREATE", "type": lr, "name": "lr.extra"},
            {"pattern": "a.*.b", "direction": "in", "containerId": broker.container_id})
        assert status == 201 and created["direction"] == created["dir"] == "in"
        assert created["operStatus"] == "active"  # its container is connected already
        rows = client.query("router.config.linkRoute", ["name", "operStatus"])
        assert {"name": "lr.extra", "operStatus": "active"} in rows
        assert "Ea.*.b" in {a["key"] for a in client.query("router.address", ["key"])}
        status, _, _ = client.call({"operation": "DELETE", "type": lr, "name": "lr.extra"})
        assert status == 204
        assert "Ea.*.b" not in {a["key"] for a in client.query("router.address", ["key"])}
    finally:
        client.close()


def test_drain_and_credit_pass_through_to_a_router_as_route_container(router_factory):
    """The route container is another router (it answers drains, and gives a sender credit
    only while its address has a consumer), so both credit rules show end to end::

        client ── R1 (linkRoute queue in/out) ── route-container ── R2 ── consumer
    """
    r2 = router_factory(router_id="R2")
    r1 = router_factory(f"""
        connector {{
            name: r2
            host: 127.0.0.1
            port: {r2.port}
            role: route-container
        }}
        linkRoute {{
            prefix: queue
            direction: out
            connection: r2
        }}
        linkRoute {{
            prefix: queue
            direction: in
            connection: r2
        }}
        """, router_id="R1")
    wait_active(r1)
    conn = BlockingConnection(r1.url, timeout=TIMEOUT)
    direct = BlockingConnection(r2.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("queue.d", credit=5)
        rcv.link.drain(0)  # nothing to send at R2: R2 drains, R1 passes it back
        conn.wait(lambda: rcv.link.credit == 0, timeout=TIMEOUT, msg="drain not answered")
        # a sender gets no credit while R2 has no consumer: R1 invents none
        snd = conn.create_sender("queue.e")
        assert snd.link.credit == 0
        consumer = direct.create_receiver("queue.e", credit=10)
        conn.wait(lambda: snd.link.credit > 0, timeout=TIMEOUT, msg="no credit from R2")
        # the sender waits for the consumer's outcome while the consumer receives (each
        # blocking connection is driven by its own thread)
        sent = []
        sender = threading.Thread(target=lambda: sent.append(
            snd.send(Message(body="through R1 and R2"), timeout=TIMEOUT)))
        sender.start()
        try:
            assert consumer.receive(timeout=TIMEOUT).body == "through R1 and R2"
            consumer.accept()  # leaves while this connection is driven
            direct.wait(lambda: not sender.is_alive(), timeout=TIMEOUT, msg="not settled")
        finally:
            sender.join(TIMEOUT + 5)
        assert sent and sent[0].remote_state == sent[0].ACCEPTED
    finally:
        conn.close()
        direct.close()


def wait_remote(router, timeout=30):
    """Until ``router`` (ours or 1.19) knows another router with both route addresses."""
    deadline = time.monotonic() + timeout
    while True:
        client = Mgmt(router.url)
        try:
            remote = {a["key"]: a["remoteCount"]
                      for a in client.query("router.address", ["key", "remoteCount"])}
        finally:
            client.close()
        if remote.get("Cqueue") and remote.get("Dqueue"):
            return
        assert time.monotonic() < deadline, f"{router.id} did not learn the routes: {remote}"
        time.sleep(0.2)


def test_across_a_three_router_line(router_factory, c_broker):
    """Only C has the broker and the link routes; A learns them from C's address updates::

        client ── A ── B ── C ── broker
    """
    from test_network import Net  # noqa: PLC0415 - the network builder of the network tests
    broker = c_broker("broker.net")
    net = Net(router_factory)
    net.add("C", extra=route_config(broker))
    net.add("B", connect_to=(("C", 1),))
    net.add("A", connect_to=(("B", 1),))
    # A knows a router with a destination for both route addresses, and so does B, which
    # routes A's attaches on to C: A's agent can take C's address update (flooded through B's
    # core) before B's agent does, and B refuses a routed attach until then (no route)
    for name in "AB":
        wait_remote(net[name])
    conn = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        snd = conn.create_sender("queue.far")
        for i in range(3):
            snd.send(Message(body=f"far{i}"))  # accepted by the broker, outcome back over 3 hops
        rcv = conn.create_receiver("queue.far", credit=10)
        assert [rcv.receive(timeout=TIMEOUT).body for _ in range(3)] == ["far0", "far1", "far2"]
        # the broker goes away: the client's routed link is detached across the network
        broker.stop()
        with pytest.raises(LinkDetached) as info:
            conn.wait(lambda: False, timeout=TIMEOUT, msg="the routed link was not detached")
        assert "qd:routed-link-lost" in str(info.value)
    finally:
        conn.close()


class _Coordinator:
    """A route container that is a transaction coordinator (a real proton container in a thread,
    as the example broker has no transactions): it declares transaction ``txn-1`` and accepts
    discharges, recording what it was asked."""

    def __init__(self, port, gate=None, prefetch=10):
        """``gate``: a threading.Event the container waits for (bounded) on the first message
        sent inside a transaction, reading nothing meanwhile; ``prefetch``: its credit window."""
        from proton import Described  # noqa: PLC0415
        from proton.handlers import MessagingHandler  # noqa: PLC0415
        from proton.reactor import Container  # noqa: PLC0415
        outer = self
        self.requests = []

        class Handler(MessagingHandler):
            def __init__(self):
                super().__init__(prefetch=prefetch, auto_accept=False)

            def on_start(self, event):
                outer.acceptor = event.container.listen(f"127.0.0.1:{port}")

            def on_message(self, event):
                body = event.message.body
                descriptor = body.descriptor if isinstance(body, Described) else None
                kind = {0x31: "declare", "amqp:declare:list": "declare", 0x32: "discharge",
                        "amqp:discharge:list": "discharge"}.get(descriptor, descriptor)
                dlv = event.delivery
                if kind is None:  # a message sent inside a transaction: its state and txn-id
                    kind = (event.message.body, dlv.remote_state,
                            bytes(dlv.remote.data[0]) if dlv.remote.data else None)
                    if gate is not None:
                        gate.wait(TIMEOUT)
                outer.requests.append(kind)
                if kind == "declare":  # answer declared(txn-id)
                    dlv.local.data = [b"txn-1"]
                    dlv.update(0x33)
                else:
                    dlv.update(dlv.ACCEPTED)
                dlv.settle()

        self.container = Container(Handler())
        self.container.container_id = "coordinator.1"
        self.thread = threading.Thread(target=self.container.run, daemon=True)
        self.thread.start()

    def stop(self):
        self.container.stop()
        self.thread.join(TIMEOUT)


def _start_transaction(handler, event, url, address):
    """A transactional client's start: its connection, its sender, a transaction declared."""
    handler.conn = event.container.connect(url)
    handler.sender = event.container.create_sender(handler.conn, address)
    event.container.declare_transaction(handler.conn, handler=handler)


def _coordinator_router(router_factory, port):
    """A router whose $coordinator and queue link routes lead to the coordinator on port."""
    router = router_factory(f"""
        connector {{
            name: txn
            host: 127.0.0.1
            port: {port}
            role: route-container
        }}
        linkRoute {{
            prefix: $coordinator
            direction: in
            connection: txn
        }}
        linkRoute {{
            prefix: queue
            direction: in
            connection: txn
        }}
        """)
    wait_active(router, count=2)
    return router


def test_coordinator_link_route_declares_and_discharges(router_factory):
    from proton.handlers import MessagingHandler, TransactionHandler  # noqa: PLC0415
    from proton.reactor import Container  # noqa: PLC0415
    from conftest import free_port  # noqa: PLC0415
    port = free_port()
    coordinator = _Coordinator(port)
    try:
        router = _coordinator_router(router_factory, port)
        events = []

        class Client(MessagingHandler, TransactionHandler):
            def on_start(self, event):
                _start_transaction(self, event, router.url, "queue.tx")

            def on_transaction_declared(self, event):
                events.append(("declared", event.transaction.id))
                event.transaction.send(self.sender, Message(body="in txn"))
                event.transaction.commit()

            def on_transaction_committed(self, event):
                events.append(("committed",))
                self.conn.close()

            def on_transaction_declare_failed(self, event):
                events.append(("declare failed",))
                self.conn.close()

        client = Container(Client())
        thread = threading.Thread(target=client.run, daemon=True)
        thread.start()
        thread.join(TIMEOUT)
        if thread.is_alive():
            client.stop()
            thread.join(TIMEOUT)
        assert events == [("declared", b"txn-1"), ("committed",)]
        # the declare, the message with its transactional state (0x34, txn-1), the discharge
        # (the message and the discharge travel on different links: either may come first)
        assert coordinator.requests[0] == "declare"
        assert sorted(map(str, coordinator.requests[1:])) == sorted(
            map(str, [("in txn", 0x34, b"txn-1"), "discharge"]))
    finally:
        coordinator.stop()


def test_transactional_state_reaches_the_container_for_deliveries_the_router_held(
        router_factory):
    """The route container stops reading (its socket fills, the router holds the sender's
    further deliveries in the core and the worker); every message sent inside the transaction
    still reaches it with its transactional state once it reads again."""
    from proton.handlers import MessagingHandler, TransactionHandler  # noqa: PLC0415
    from proton.reactor import Container  # noqa: PLC0415
    from conftest import free_port  # noqa: PLC0415
    count, size = 200, 64 * 1024
    port = free_port()
    gate = threading.Event()
    coordinator = _Coordinator(port, gate=gate, prefetch=count)
    client = None
    try:
        router = _coordinator_router(router_factory, port)
        events = []

        class Client(MessagingHandler, TransactionHandler):
            def on_start(self, event):
                self.txn = None
                _start_transaction(self, event, router.url, "queue.held")
                self.sent = 0

            def on_transaction_declared(self, event):
                self.txn = event.transaction
                self.on_sendable(event)

            def on_sendable(self, event):
                while self.txn is not None and self.sent < count and self.sender.credit > 0:
                    self.txn.send(self.sender, Message(body=f"{self.sent:06d}" + "x" * size))
                    self.sent += 1

            def on_accepted(self, event):  # committed once the container has them all
                self.accepted = getattr(self, "accepted", 0) + 1
                if self.accepted == count:
                    events.append("accepted")
                    self.txn.commit()

            def on_transaction_committed(self, event):
                events.append("committed")
                self.conn.close()

        client = Container(Client())
        thread = threading.Thread(target=client.run, daemon=True)
        thread.start()
        mgmt = Mgmt(router.url)
        try:  # until the core holds some of the sender's deliveries (the container is stuck):
            # as 1.19, they count on the link toward the container (its undeliveredCount)
            deadline = time.monotonic() + TIMEOUT
            while not any(r["linkDir"] == "out" and r["owningAddr"] == "M0queue.held"
                          and r["undeliveredCount"] > 0
                          for r in mgmt.query("router.link", ["linkDir", "owningAddr",
                                                              "undeliveredCount"])):
                assert time.monotonic() < deadline, "the router never held a delivery"
                time.sleep(0.1)
        finally:
            mgmt.close()
        gate.set()
        thread.join(TIMEOUT * 3)
        assert events == ["accepted", "committed"]
        sent = [r for r in coordinator.requests if isinstance(r, tuple)]
        assert len(sent) == count
        assert {(state, txn) for _, state, txn in sent} == {(0x34, b"txn-1")}
    finally:
        gate.set()
        if client is not None:
            client.stop()
        coordinator.stop()


def test_a_thousand_concurrent_routed_links(router_factory, c_broker):
    broker = c_broker("broker.many")
    router = router_factory(route_config(broker))
    wait_active(router)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    mgmt = Mgmt(router.url)
    try:
        receivers = [conn.create_receiver(f"queue.many{i}", credit=1) for i in range(1000)]
        assert all(r.link.remote_source.address == f"queue.many{i}"
                   for i, r in enumerate(receivers))
        routed = [r for r in mgmt.query("router.link", ["owningAddr"])
                  if (r["owningAddr"] or "").startswith("M0queue.many")]
        # each client link and its mirror toward the broker, owned as 1.19 names it
        assert len(routed) == 2000
        direct = BlockingConnection(f"amqp://{broker.address}", timeout=TIMEOUT)
        try:
            direct.create_sender("queue.many999").send(Message(body="last"))
        finally:
            direct.close()
        assert receivers[999].receive(timeout=TIMEOUT).body == "last"
        conn.close()
        deadline = time.monotonic() + TIMEOUT
        while [r for r in mgmt.query("router.link", ["owningAddr"])
               if r["owningAddr"] == "Dqueue"]:
            assert time.monotonic() < deadline, "routed links left behind"
            time.sleep(0.2)
    finally:
        conn.close()
        mgmt.close()


def test_sighup_reload_adds_and_removes_link_routes(router_factory, c_broker):
    import signal  # noqa: PLC0415
    broker = c_broker("broker.reload")
    router = router_factory(route_config(broker))
    wait_active(router)
    conf = router.proc.conf_path
    text = conf.read_text()
    start = text.index("linkRoute {")
    # both queue routes go; a pattern route to the same broker comes
    conf.write_text(text[:start] + f"""
linkRoute {{
    name: lr.orders
    pattern: orders.*
    direction: in
    containerId: {broker.container_id}
}}
""")
    router.proc.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + TIMEOUT
    while True:
        client = Mgmt(router.url)
        try:
            rows = client.query("router.config.linkRoute", ["name", "operStatus"])
        finally:
            client.close()
        if rows == [{"name": "lr.orders", "operStatus": "active"}]:
            break
        assert time.monotonic() < deadline, f"reload not applied: {rows}"
        time.sleep(0.2)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        conn.create_sender("orders.new").send(Message(body="routed"))  # the broker accepts it
        conn.create_receiver("queue.gone", credit=1)  # no link route any more: message-routed
    finally:
        conn.close()


def test_dynamic_receiver_routed_by_its_dynamic_node_properties(router_factory):
    """A dynamic source naming ``x-opt-qd.address`` in its dynamic-node-properties is routed
    by that address (as 1.19 does); the route container (a second router) gives it its own
    temporary address, which the client sees and can be sent to."""
    from proton.reactor import DynamicNodeProperties  # noqa: PLC0415
    r2 = router_factory(router_id="R2")
    r1 = router_factory(f"""
        connector {{
            name: r2
            host: 127.0.0.1
            port: {r2.port}
            role: route-container
        }}
        linkRoute {{
            prefix: queue
            direction: out
            connection: r2
        }}
        """, router_id="R1")
    wait_active(r1, count=1)
    conn = BlockingConnection(r1.url, timeout=TIMEOUT)
    direct = BlockingConnection(r2.url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver(None, dynamic=True, credit=1,
                                   options=DynamicNodeProperties({"x-opt-qd.address":
                                                                  "queue.dyn"}))
        address = rcv.link.remote_source.address
        assert address and "temp." in address and "R2" in address  # R2's, not R1's
        snd = direct.create_sender(address)
        sent = []
        sender = threading.Thread(target=lambda: sent.append(
            snd.send(Message(body="to the dynamic node"), timeout=TIMEOUT)))
        sender.start()
        try:
            assert rcv.receive(timeout=TIMEOUT).body == "to the dynamic node"
            rcv.accept()
            conn.wait(lambda: not sender.is_alive(), timeout=TIMEOUT, msg="not settled")
        finally:
            sender.join(TIMEOUT + 5)
        assert sent and sent[0].remote_state == sent[0].ACCEPTED
    finally:
        conn.close()
        direct.close()


def _prefixed_routes(broker=None):
    """queue.* routed to the broker as ext.* (delExternalPrefix queue., addExternalPrefix ext.),
    on every router of the network, the broker's connector only where ``broker`` is given."""
    where = f"connection: broker" if broker is not None else "containerId: broker.prefixed"
    text = "".join(f"""
        linkRoute {{
            prefix: queue
            direction: {direction}
            {where}
            delExternalPrefix: queue.
            addExternalPrefix: ext.
        }}
        """ for direction in ("in", "out"))
    if broker is not None:
        text += f"""
        connector {{
            name: broker
            host: 127.0.0.1
            port: {broker.port}
            role: route-container
        }}
        """
    return text


def test_external_prefix_is_rewritten_by_the_router_next_to_the_container(router_factory,
                                                                           c_broker):
    """1.19: the same link routes with add/delExternalPrefix on both routers; the router that
    forwards the attach to another router keeps the client's address, only the one that hands
    it to the container rewrites it (queue.far -> ext.far), and the answer is rewritten back
    once::

        client ── A ── C ── broker
    """
    from test_network import Net  # noqa: PLC0415
    broker = c_broker("broker.prefixed")
    net = Net(router_factory)
    net.add("C", extra=_prefixed_routes(broker))
    net.add("A", connect_to=(("C", 1),), extra=_prefixed_routes())
    wait_remote(net["A"])
    conn = BlockingConnection(net["A"].url, timeout=TIMEOUT)
    try:
        snd = conn.create_sender("queue.far")
        assert snd.link.remote_target.address == "queue.far"  # rewritten back, once
        for i in range(3):
            snd.send(Message(body=f"far{i}"))  # the broker accepted each one
        rcv = conn.create_receiver("queue.far", credit=10)
        assert rcv.link.remote_source.address == "queue.far"
        assert [rcv.receive(timeout=TIMEOUT).body for _ in range(3)] == ["far0", "far1", "far2"]
    finally:
        conn.close()
    # the broker holds them under the rewritten name: a client of the broker itself sees them
    direct = BlockingConnection(f"amqp://127.0.0.1:{broker.port}", timeout=TIMEOUT)
    try:
        snd = direct.create_sender("ext.far")
        snd.send(Message(body="direct"))
        rcv = direct.create_receiver("ext.far", credit=10)
        assert rcv.receive(timeout=TIMEOUT).body == "direct"
    finally:
        direct.close()
