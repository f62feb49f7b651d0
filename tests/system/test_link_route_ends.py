"""How a routed link pair ends, as 1.19 ends it; each case runs on our router and on a real
1.19 (``QDROUTERD_1X``, see test_mixed_1x.py; skipped without it), which is where the
expected behaviour comes from.

``client ── R ── broker``: R has a ``route-container`` listener the broker connects to and
link routes ``lr`` both ways; the broker is a bare proton engine (tests/bigmsg.py's Peer) that
answers the router's attaches as a broker does.
"""
from __future__ import annotations

import textwrap

import proton
import pytest

import bigmsg
from conftest import free_port
from test_streaming import TIMEOUT, _answer_attach
from test_streaming_fidelity import ONE_X

MB = 1000 * 1000


def _config(broker_port: int) -> str:
    return textwrap.dedent(f"""
        listener {{
            name: brk
            host: 127.0.0.1
            port: {broker_port}
            role: route-container
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        linkRoute {{
            prefix: lr
            direction: in
            connection: brk
        }}
        linkRoute {{
            prefix: lr
            direction: out
            connection: brk
        }}
        """)


class Routed:
    """A router of ``kind`` and a broker connected to its route-container listener."""

    def __init__(self, router, broker: bigmsg.Peer, one_x: bool) -> None:
        self.router = router
        self.port = router.port
        self.broker = broker
        self.one_x = one_x


@pytest.fixture(params=["ours", pytest.param("1.x", marks=pytest.mark.skipif(
    not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare"))])
def routed(request, router_factory, tmp_path):
    broker_port = free_port()
    config = _config(broker_port)
    one_x = request.param != "ours"
    if one_x:
        from test_autolinks_1x import start_1x  # noqa: PLC0415 - the 1.x launcher
        router = start_1x(tmp_path, f"X{free_port()}", config)
    else:
        router = router_factory(config)
    broker = bigmsg.Peer(broker_port, "broker")
    try:
        bigmsg.pump([broker], lambda: broker.conn.state & proton.Endpoint.REMOTE_ACTIVE, 10)
        if not one_x:
            router.proc.wait_for_line("Link Route Activated", timeout=10)
        yield Routed(router, broker, one_x)
    finally:
        broker.close()
        if one_x:
            router.proc.stop()


class PartReader:
    """The broker's end of a routed link: reads what arrives, notes the delivery's end."""

    def __init__(self, link) -> None:
        self.link = link
        self.received = 0
        self.aborted = False
        self.complete = False

    def work(self) -> None:
        d = self.link.current
        if d is None:
            return
        if d.aborted:
            self.aborted = True
            d.settle()
            return
        data = self.link.recv(1 << 20)
        while data:
            self.received += len(data)
            data = self.link.recv(1 << 20)
        if not d.partial:
            self.complete = True


def test_sender_detached_mid_delivery_aborts_it_at_the_broker(routed):
    """The client's sender detaches (closes) its link with a delivery half sent: the broker
    gets that delivery aborted, then the detach."""
    broker = routed.broker
    sp = bigmsg.Peer(routed.port, "client")
    snd = bigmsg.BigSender(sp, "lr.half", 20 * MB, raw=True)
    link = _answer_attach(broker, [sp])
    link.flow(10)
    reader = PartReader(link)
    # half of it on its way, then the client stops and closes the link
    bigmsg.pump([sp, broker], lambda: reader.received >= 2 * MB, TIMEOUT, [snd, reader])
    assert not reader.complete
    snd.done = True  # (sends no more)
    snd.link.close()
    bigmsg.pump([sp, broker], lambda: link.state & proton.Endpoint.REMOTE_CLOSED, TIMEOUT,
                [reader])
    reader.work()
    assert reader.aborted, "the broker's half delivery was not aborted before the detach"
    assert not reader.complete
    sp.close()


def _known_routes(router) -> set:
    from test_link_routes import Mgmt  # noqa: PLC0415
    client = Mgmt(router.url)
    try:
        return {a["key"] for a in client.query("router.address", ["key", "remoteCount"])
                if a["remoteCount"]}
    finally:
        client.close()


@pytest.mark.parametrize("kind", ["ours", pytest.param("1.x", marks=pytest.mark.skipif(
    not ONE_X, reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare"))])
def test_sender_detached_mid_delivery_across_two_routers(router_factory, tmp_path, kind):
    """client ── A ── B ── broker: the same, the routed pair crossing two routers."""
    import time  # noqa: PLC0415
    from test_mixed_1x import MixedNet, converged  # noqa: PLC0415
    broker_port = free_port()
    net = MixedNet(router_factory, tmp_path)
    broker = None
    try:
        add = net.add if kind == "ours" else net.add_1x
        add("B", extra=_config(broker_port))
        broker = bigmsg.Peer(broker_port, "broker")
        bigmsg.pump([broker], lambda: broker.conn.state & proton.Endpoint.REMOTE_ACTIVE, 10)
        a = add("A", connect_to=(("B", 1),))
        # A routes toward B once it has a path to B, which can come a tick after the
        # addresses B announced (the path is computed on the tick after the link state)
        converged(net, "AB")
        deadline = time.monotonic() + TIMEOUT
        while not {"Clr", "Dlr"} <= _known_routes(a):
            assert time.monotonic() < deadline, "A did not learn B's link routes"
            time.sleep(0.2)
        sp = bigmsg.Peer(a.port, "client")
        snd = bigmsg.BigSender(sp, "lr.half", 20 * MB, raw=True)
        link = _answer_attach(broker, [sp], timeout=TIMEOUT)
        link.flow(10)
        reader = PartReader(link)
        bigmsg.pump([sp, broker], lambda: reader.received >= 2 * MB, TIMEOUT, [snd, reader])
        snd.done = True
        snd.link.close()
        bigmsg.pump([sp, broker], lambda: link.state & proton.Endpoint.REMOTE_CLOSED, TIMEOUT,
                    [reader])
        reader.work()
        assert reader.aborted, "the broker's half delivery was not aborted before the detach"
        assert not reader.complete
        sp.close()
    finally:
        if broker is not None:
            broker.close()
        net.stop_all()


def _link_ends(peer: bigmsg.Peer) -> list:
    """The detach/close events of links ``peer`` has seen since last asked, in order:
    "detach" (closed=false) or "close"."""
    seen = []
    collector = peer.collector
    while True:
        event = collector.peek()
        if event is None:
            return seen
        if event.type == proton.Event.LINK_REMOTE_DETACH:
            seen.append("detach")
        elif event.type == proton.Event.LINK_REMOTE_CLOSE:
            seen.append("close")
        collector.pop()


def test_the_brokers_close_answers_the_clients_detach(routed):
    """The client detaches its routed link without closing it; the broker answers with a
    close: the client gets that close (1.19 relays the broker's answer; it does not answer the
    client's detach itself)."""
    broker = routed.broker
    broker.collector = proton.Collector()
    broker.conn.collect(broker.collector)
    cp = bigmsg.Peer(routed.port, "client")
    cp.collector = proton.Collector()
    cp.conn.collect(cp.collector)
    snd = cp.session.sender("detaching")
    snd.target.address = "lr.detach"
    snd.open()
    link = _answer_attach(broker, [cp])
    bigmsg.pump([cp, broker], lambda: snd.state & proton.Endpoint.REMOTE_ACTIVE, TIMEOUT)
    _link_ends(cp), _link_ends(broker)
    at_broker, at_client = [], []

    def seen() -> bool:
        at_broker.extend(_link_ends(broker))
        at_client.extend(_link_ends(cp))
        return bool(at_broker)

    snd.detach()
    bigmsg.pump([cp, broker], seen, 30)
    assert at_broker == ["detach"]
    assert at_client == []  # nothing yet: the answer is the broker's
    link.close()
    bigmsg.pump([cp, broker], seen and (lambda: seen() and bool(at_client)), 30)
    assert at_client == ["close"]
    cp.close()
