"""multiTenant listeners: the open's hostname (the vhost) scopes addresses, so two tenants using
the same address never see each other's messages (as Qpid Dispatch 1.x: addresses live as
``<vhost>/<address>`` inside the router, which qdstat -a shows)."""
from __future__ import annotations

import subprocess
import sys

from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from conftest import free_port

T = 5.0


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
