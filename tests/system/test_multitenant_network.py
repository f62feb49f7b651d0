"""multiTenant listeners across routers: the tenant's address goes with what one router sends
on to another, as Qpid Dispatch 1.19 sends it (ours, and mixed with a real 1.19 router when
``QDROUTERD_1X`` names its install prefix).

* an anonymous sender's message: its ``to`` is the client's own; the router it entered puts
  the tenant's address (``tenant.a/orders``) in ``x-opt-qd.to`` for the next router, which
  delivers it to that tenant's receivers only (the receiving client sees its ``to`` as sent,
  and no router annotation);
* a link-routed attach: forwarded with the tenant's address (``tenant.a/queue.y``), which is
  what the broker behind the other router is asked for.

Topologies as in test_network.py (``A --1-> B``: A connects to B). Real routers and proton
clients on loopback; every wait bounded.
"""
from __future__ import annotations

import os

import pytest
from proton import Delivery, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from clients import collect, pump_until
from conftest import free_port
from test_multitenant import open_routed_sender, tenant_listener
from test_network import Net, remote_seen

T = 10.0
TENANT = "tenant.a"
ONE_X = os.environ.get("QDROUTERD_1X", "")


def _needs_1x():
    if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
        pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to run the mixed "
                    "multiTenant tests")


@pytest.fixture
def net(router_factory, tmp_path):
    from test_mixed_1x import MixedNet
    n = MixedNet(router_factory, tmp_path)
    yield n
    n.stop_all()


def add(net, name: str, kind: str, connect_to: tuple = (), extra: str = ""):
    """Router ``name`` (ours or 1.x) with a multiTenant listener: its tenant url."""
    port = free_port()
    if kind == "1.x":
        net.add_1x(name, connect_to=connect_to, extra=tenant_listener(port) + extra)
    else:
        net.add(name, connect_to=connect_to, extra=tenant_listener(port) + extra)
    return f"amqp://127.0.0.1:{port}"


def known(net, r, address: str) -> None:
    """``r`` knows another router has a destination for the mobile ``address``."""
    from test_mixed_1x import remote_seen as remote_seen_any
    if getattr(r, "one_x", False):
        remote_seen_any(r, address)
    else:
        remote_seen(r, address)


KINDS = [("ours", "ours"), ("ours", "1.x"), ("1.x", "ours")]


@pytest.mark.parametrize("sender_kind, receiver_kind", KINDS)
def test_an_anonymous_tenant_message_reaches_the_tenant_on_another_router(
        net, sender_kind, receiver_kind):
    """A --1-> B: the receivers on B (tenant.a and tenant.b, same address), an anonymous
    tenant.a sender on A."""
    if "1.x" in (sender_kind, receiver_kind):
        _needs_1x()
    b_url = add(net, "B", receiver_kind)
    a_url = add(net, "A", sender_kind, connect_to=(("B", 1),))
    ra = BlockingConnection(b_url, timeout=T, virtual_host=TENANT)
    rb = BlockingConnection(b_url, timeout=T, virtual_host="tenant.b")
    sc = BlockingConnection(a_url, timeout=T, virtual_host=TENANT)
    try:
        mine = ra.create_receiver("orders", credit=20)
        other = rb.create_receiver("orders", credit=20)
        known(net, net["A"], f"{TENANT}/orders")
        anon = sc.create_sender(None)
        sent = [anon.link.send(Message(address="orders", body=f"m{i}")) for i in range(3)]
        assert collect([ra, rb, sc], [mine, other], expect=3, idle=1.0) == [
            ["m0", "m1", "m2"], []]
        pump_until([ra, rb, sc], lambda: all(d.remote_state for d in sent), T, "outcomes")
        assert [d.remote_state for d in sent] == [Delivery.ACCEPTED] * 3
        # presettled the same way
        anon = sc.create_sender(None, name="presettled", options=AtMostOnce())
        anon.send(Message(address="orders", body="p"), timeout=T)
        pump_until([ra, rb, sc], lambda: len(mine.fetcher.incoming) > 0, T, "it arrives")
        msg, _ = mine.fetcher.incoming.popleft()
        # what the tenant's client sees: its own 'to', and no router annotation
        assert (msg.body, msg.address) == ("p", "orders")
        assert "x-opt-qd.to" not in (msg.annotations or {})
    finally:
        for c in (ra, rb, sc):
            c.close()


@pytest.mark.parametrize("client_kind, broker_kind", KINDS)
def test_a_tenants_link_routed_attach_reaches_the_broker_with_the_tenants_address(
        net, c_broker, client_kind, broker_kind):
    """A --1-> B, the broker behind B; both routers route ``tenant.a/queue``. A tenant.a
    sender on A attaches ``queue.y``: the broker's queue is ``tenant.a/queue.y``, where a
    client on B's plain listener finds the message."""
    if "1.x" in (client_kind, broker_kind):
        _needs_1x()
    broker = c_broker("broker.mtn")
    routes = "".join(f"""
        linkRoute {{
            prefix: {TENANT}/queue
            direction: {d}
            {{where}}
        }}
        """ for d in ("in", "out"))
    connector = f"""
        connector {{
            name: broker
            host: 127.0.0.1
            port: {broker.port}
            role: route-container
        }}
        """
    add(net, "B", broker_kind, extra=connector + routes.replace("{where}", "connection: broker"))
    a_url = add(net, "A", client_kind, connect_to=(("B", 1),),
                extra=routes.replace("{where}", ""))
    sc = open_routed_sender(a_url, "queue.y")  # (retried until A knows B's route)
    rc = None
    try:
        snd = sc.snd
        assert snd.remote_target.address == f"{TENANT}/queue.y"
        dlv = snd.send(Message(body="for the tenant's queue"))
        sc.wait(lambda: dlv.remote_state == Delivery.ACCEPTED, timeout=T, msg="accepted")
        rc = BlockingConnection(net["B"].url, timeout=T)
        rcv = rc.create_receiver(f"{TENANT}/queue.y")
        assert rcv.receive(timeout=T).body == "for the tenant's queue"
    finally:
        sc.close()
        if rc is not None:
            rc.close()
