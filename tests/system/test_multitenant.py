"""multiTenant listeners: the open's hostname (the vhost) scopes addresses, so two tenants using
the same address never see each other's messages (as Qpid Dispatch 1.x: addresses live as
``<vhost>/<address>`` inside the router, which qdstat -a shows)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from proton import Delivery, Endpoint, Message
from proton.reactor import AtMostOnce, DynamicNodeProperties
from proton.utils import BlockingConnection, LinkDetached

from clients import collect
from conftest import free_port

T = 5.0
ONE_X = os.environ.get("QDROUTERD_1X", "")


def test_two_tenants_on_one_listener(router_factory):
    port = free_port()
    router = router_factory(f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            multiTenant: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """)
    a = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=T, virtual_host="tenant.a")
    b = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=T, virtual_host="tenant.b")
    recv_a = a.create_receiver("orders")
    recv_b = b.create_receiver("orders")
    send_a = a.create_sender("orders", options=AtMostOnce())
    anon_b = b.create_sender(None, options=AtMostOnce())
    for i in range(3):
        send_a.send(Message(body=f"a{i}"))
        anon_b.send(Message(address="orders", body=f"b{i}"))
    assert [recv_a.receive(timeout=T).body for _ in range(3)] == ["a0", "a1", "a2"]
    assert [recv_b.receive(timeout=T).body for _ in range(3)] == ["b0", "b1", "b2"]
    out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                          f"127.0.0.1:{router.port}", "-t", "5", "-a"],
                         capture_output=True, text=True, timeout=30).stdout
    assert "tenant.a/orders" in out and "tenant.b/orders" in out
    for vhost in ("tenant.a", "tenant.b"):  # 1.19's Connection Opened names the tenant
        router.proc.wait_for_line(f"vhost={vhost} encrypted=no auth=", timeout=T)
    a.close()
    b.close()


# ---- what 1.19 keeps outside a tenant's space, one router (ours, and 1.19 with QDROUTERD_1X) --
TENANT = "tenant.a"


def tenant_listener(port: int) -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            multiTenant: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """


@pytest.fixture(params=["ours", "1.x"])
def kind(request):
    if request.param == "1.x" and (not ONE_X or not os.access(
            os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK)):
        pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")
    return request.param


def start(kind: str, router_factory, tmp_path, extra: str = ""):
    """A router of ``kind`` with a multiTenant listener: (its plain url, the tenant url)."""
    port = free_port()
    if kind == "ours":
        r = router_factory(tenant_listener(port) + extra)
        return r, r.url, f"amqp://127.0.0.1:{port}"
    from test_autolinks_1x import start_1x
    r = start_1x(tmp_path, f"X{free_port()}", tenant_listener(port) + extra)
    return r, r.url, f"amqp://127.0.0.1:{port}"


@pytest.fixture
def routers():
    started: list = []
    yield started
    for r in started:
        if getattr(r, "one_x", False):
            r.proc.stop()


def test_a_tenants_reply_address_and_local_addresses_are_not_in_its_space(
        kind, routers, router_factory, tmp_path):
    """A dynamic receiver's address (``_topo/...``) and ``_local/`` addresses are routed as
    they are: a tenant replying to its own dynamic address reaches it, and a tenant's
    ``_local/svc`` receiver is the router's ``_local/svc`` for every connection."""
    r, url, tenant_url = start(kind, router_factory, tmp_path)
    routers.append(r)
    t = BlockingConnection(tenant_url, timeout=T, virtual_host=TENANT)
    plain = BlockingConnection(url, timeout=T)
    try:
        reply = t.create_receiver(None, dynamic=True)
        reply_to = reply.remote_source.address
        assert "_topo/" in reply_to and TENANT not in reply_to
        anon = t.create_sender(None, options=AtMostOnce())
        anon.send(Message(address=reply_to, body="to my reply address"), timeout=T)
        msg = reply.receive(timeout=T)
        assert (msg.body, msg.address) == ("to my reply address", reply_to)
        svc = t.create_receiver("_local/svc", credit=10)
        plain.create_sender("_local/svc", options=AtMostOnce()).send(
            Message(body="from outside"), timeout=T)
        anon.send(Message(address="_local/svc", body="anonymous"), timeout=T)
        outside = plain.create_receiver("_local/out", credit=10)
        anon.send(Message(address="_local/out", body="from the tenant"), timeout=T)
        assert collect([t, plain], [svc, outside], expect=3, idle=1.0) == [
            ["from outside", "anonymous"], ["from the tenant"]]
    finally:
        t.close()
        plain.close()


def open_routed_sender(url: str, address: str, vhost: str = TENANT) -> BlockingConnection:
    """A connection of ``vhost`` with a sender on ``address`` attached (``.snd``), retried
    until the link route has a destination (its connector may still be connecting). Not a
    BlockingSender: that refuses an answer whose target differs from what it asked, and a
    tenant's routed attach is answered with the tenant's address."""
    deadline = time.monotonic() + 6 * T
    while True:
        conn = BlockingConnection(url, timeout=T, virtual_host=vhost)
        snd = conn.container.create_sender(conn.conn, address)
        try:
            conn.wait(lambda: not snd.state & Endpoint.REMOTE_UNINIT, timeout=T,
                      msg="the answer")
            if snd.state & Endpoint.REMOTE_ACTIVE and snd.remote_target.address:
                conn.wait(lambda: snd.credit > 0, timeout=T, msg="credit")
                conn.snd = snd
                return conn
        except LinkDetached:  # refused: no route yet
            pass
        conn.close()
        assert time.monotonic() < deadline, f"{address} was never link-routed"
        time.sleep(0.25)


def test_a_tenants_link_routed_attach_carries_the_tenants_address(
        kind, routers, router_factory, tmp_path, c_broker):
    """The broker is asked for ``tenant.a/queue.x``: a client outside the tenant reaches
    that queue by its full name, and the tenant's sender is answered with it."""
    broker = c_broker("broker.mt")
    route = f"""
        connector {{
            name: broker
            host: 127.0.0.1
            port: {broker.port}
            role: route-container
        }}
        linkRoute {{
            prefix: {TENANT}/queue
            direction: in
            connection: broker
        }}
        linkRoute {{
            prefix: {TENANT}/queue
            direction: out
            connection: broker
        }}
        """
    r, url, tenant_url = start(kind, router_factory, tmp_path, route)
    routers.append(r)
    t = open_routed_sender(tenant_url, "queue.x")
    plain = None
    try:
        snd = t.snd
        # the answer is the broker's: it was asked for the tenant's address
        assert snd.remote_target.address == f"{TENANT}/queue.x"
        dlv = snd.send(Message(body="queued by the tenant"))
        t.wait(lambda: dlv.remote_state == Delivery.ACCEPTED, timeout=T, msg="accepted")
        plain = BlockingConnection(url, timeout=T)
        rcv = plain.create_receiver(f"{TENANT}/queue.x")
        assert rcv.receive(timeout=T).body == "queued by the tenant"
        # a dynamic receiver routed by its dynamic-node-properties address: in the tenant's
        # space too, so it reaches the broker (not a temporary address of the router's)
        dyn = t.create_receiver(None, dynamic=True, options=DynamicNodeProperties(
            {"x-opt-qd.address": "queue.d"}))
        assert "_topo/" not in (dyn.remote_source.address or "")
    finally:
        t.close()
        if plain is not None:
            plain.close()


TENANT_POLICY = """
policy {
    maxConnections: 100
    enableVhostPolicy: true
    defaultVhost: $default
}
vhost {
    hostname: $default
    allowUnknownUser: true
    groups: {
        "$default": {
            "remoteHosts": "*",
            "sources": "*",
            "targets": "*",
            "allowAnonymousSender": true,
            "allowDynamicSource": true
        }
    }
}
vhost {
    hostname: tenant.a
    allowUnknownUser: true
    groups: {
        "$default": {
            "users": "*",
            "remoteHosts": "*",
            "sources": "*",
            "targets": "tenant.a/allowed",
            "allowAnonymousSender": true
        }
    }
}
"""


def test_a_tenants_anonymous_message_is_approved_by_the_tenants_address(
        kind, routers, router_factory, tmp_path):
    """1.19's vhost policy approves an anonymous message of a multiTenant connection by the
    tenant's address (``tenant.a/allowed``), not by its 'to' (``allowed``)."""
    r, url, tenant_url = start(kind, router_factory, tmp_path, TENANT_POLICY)
    routers.append(r)
    t = BlockingConnection(tenant_url, timeout=T, virtual_host=TENANT)
    try:
        rcv = t.create_receiver("allowed", credit=10)
        anon = t.create_sender(None)
        ok = anon.link.send(Message(address="allowed", body="in"))
        denied = anon.link.send(Message(address="tenant.a/allowed", body="out"))
        assert collect([t], [rcv], expect=1, idle=1.0) == [["in"]]
        t.wait(lambda: ok.remote_state and denied.remote_state, timeout=T, msg="outcomes")
        assert ok.remote_state == Delivery.ACCEPTED
        assert denied.remote_state == Delivery.REJECTED
        assert denied.remote.condition.name == "amqp:unauthorized-access"
    finally:
        t.close()
