"""The route container ends the session of a routed link (issue 28, item 13d).

::

    client ── router (linkRoute lr in/out) ── route-container connector ── container

What Qpid Dispatch 1.19 does, and ours must (each test runs against ours and, with
``QDROUTERD_1X`` naming a 1.x install, against 1.19 with the same configuration):

* the container's ``end`` is answered with an ``end``; the client's routed link is detached
  (closed) with ``qd:routed-link-lost`` "Connectivity to the peer container was lost";
* the client's next routed attach, even with the same link name once the old link is closed
  (its detach written before the new attach), goes out on a NEW session toward the container,
  and messages flow on it;
* a client that attaches the same name again WITHOUT closing the detached link breaks AMQP
  (the name is still attached on its session): the router closes its connection with
  ``amqp:invalid-field`` "link name already attached: L1" (proton's check, in both routers).
"""
import threading

import pytest
from proton import Endpoint, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection, ConnectionClosed, LinkDetached

from clients import pump_until
from conftest import free_port
from test_link_routes import TIMEOUT, wait_active

LOST = ("qd:routed-link-lost", "Connectivity to the peer container was lost")


def routes(port):
    return f"""
        connector {{
            name: rc
            host: 127.0.0.1
            port: {port}
            role: route-container
        }}
        linkRoute {{
            prefix: lr
            direction: in
            connection: rc
        }}
        linkRoute {{
            prefix: lr
            direction: out
            connection: rc
        }}
        """


class SessionEndingContainer:
    """The route container: accepts routed links, records (body, session number) of what it
    receives (a session's number: the count of the peer's begins when it was opened), and
    ends every session it has when :meth:`end_sessions` is called (from another thread)."""

    def __init__(self, port):
        outer = self
        self.received = []
        self.begins = 0
        self._end = threading.Event()
        self._ended = threading.Event()

        class Handler(MessagingHandler):
            def on_start(self, event):
                event.container.listen(f"127.0.0.1:{port}")
                event.container.schedule(0.05, self)
                self.conns = []
                self.numbers = {}

            def on_connection_opening(self, event):
                self.conns.append(event.connection)

            def on_session_opening(self, event):
                outer.begins += 1
                self.numbers[event.session._impl] = outer.begins
                event.session.open()

            def on_link_opening(self, event):
                event.link.source.copy(event.link.remote_source)
                event.link.target.copy(event.link.remote_target)

            def on_message(self, event):
                outer.received.append((event.message.body,
                                       self.numbers.get(event.link.session._impl)))

            def on_timer_task(self, event):
                if outer._end.is_set():
                    outer._end.clear()
                    for conn in self.conns:
                        ssn = conn.session_head(Endpoint.LOCAL_ACTIVE)
                        while ssn:
                            nxt = ssn.next(Endpoint.LOCAL_ACTIVE)
                            ssn.close()
                            ssn = nxt
                    outer._ended.set()
                event.container.schedule(0.05, self)

        self.container = Container(Handler())
        self.container.container_id = "session.ender"
        self.thread = threading.Thread(target=self.container.run, daemon=True)
        self.thread.start()

    def end_sessions(self):
        self._ended.clear()
        self._end.set()
        assert self._ended.wait(TIMEOUT), "the container did not end its sessions"

    def stop(self):
        self.container.stop()
        self.thread.join(TIMEOUT)


@pytest.fixture
def container():
    port = free_port()
    c = SessionEndingContainer(port)
    yield port, c
    c.stop()


def _start(router_of_kind, kind, port):
    router = router_of_kind(kind, routes(port))
    wait_active(router, timeout=30)
    return router


def _lose_l1(conn, container):
    """L1 carries m1 on the container's first session; the container ends it; the client's
    L1 is detached: its condition."""
    l1 = conn.create_sender("lr.q", name="L1")
    l1.send(Message(body="m1"), timeout=TIMEOUT)
    assert container.received == [("m1", 1)]
    container.end_sessions()
    try:
        pump_until([conn], lambda: l1.link.state & Endpoint.REMOTE_CLOSED, timeout=TIMEOUT,
                   what="the detach of L1")
    except LinkDetached:
        pass  # the BlockingConnection reports the detach it waited for
    cond = l1.link.remote_condition
    return l1, (cond.name, cond.description) if cond else None


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_next_routed_attach_opens_a_new_session(router_of_kind, container, kind):
    port, rc = container
    router = _start(router_of_kind, kind, port)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        l1, condition = _lose_l1(conn, rc)
        assert condition == LOST
        l1.close()
        # the client's detach must be out before its next attach of the name: proton writes
        # the attaches of one pass before its detaches
        pump_until([conn], lambda: not conn.conn.transport.pending(),
                   what="the client's detach of L1 written")
        again = conn.create_sender("lr.q", name="L1")  # the same name, the old link closed
        again.send(Message(body="m2"), timeout=TIMEOUT)
        other = conn.create_sender("lr.q", name="L2")
        other.send(Message(body="m3"), timeout=TIMEOUT)
        assert rc.received == [("m1", 1), ("m2", 2), ("m3", 2)]
        assert rc.begins == 2
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_same_name_without_closing_the_lost_link_is_refused(router_of_kind, container, kind):
    port, rc = container
    router = _start(router_of_kind, kind, port)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        _lose_l1(conn, rc)
        with pytest.raises(ConnectionClosed) as info:
            conn.create_sender("lr.q", name="L1").send(Message(body="m2"), timeout=TIMEOUT)
        cond = info.value.connection.remote_condition
        assert (cond.name, cond.description) == ("amqp:invalid-field",
                                                 "link name already attached: L1")
    finally:
        try:
            conn.close()
        except ConnectionClosed:
            pass
