"""Built-in addresses as Qpid Dispatch 1.19 lists them (``qdstat -a``, router.address).

Checked on our router, and on a real 1.x router when ``QDROUTERD_1X`` names one (the same
assertions hold for both, which is how the rows were compared):

* every router: ``L$_management_internal`` (local, closest, in-process), which answers
  management requests sent to ``_local/$_management_internal`` as ``$management`` does;
* interior mode: the routing protocol's addresses ``qdhello``, ``qdrouter`` (local and topo,
  flood) and ``qdrouter.ma`` (local and topo, multicast), in-process;
* a dynamic (temporary) address is balanced, and the agent's replies to it count as
  from-process deliveries (``deliveriesFromContainer``), not ingress.

Not listed here: ``_$qd.edge_heartbeat`` (every mode; test_edge_fidelity.py),
``_$qd.addr_lookup`` and ``_$qd.edge_addr_tracking`` (edge mode).
"""
from __future__ import annotations

import pytest
from proton import Message
from proton.utils import BlockingConnection

from test_admin_status_policy import request
from test_no_path_drain import _one_x_router

TIMEOUT = 10.0
ATTRS = ["key", "distribution", "inProcess", "subscriberCount", "deliveriesIngress",
         "deliveriesFromContainer"]


def query(url: str, node: str = "$management", times: int = 1) -> dict:
    """QUERY router.address through ``node`` (``times`` times on one connection and reply
    address): key -> row, of the last answer."""
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        reply = conn.create_receiver(None, dynamic=True)
        snd = conn.create_sender(node)
        for _ in range(times):
            rows = _query(snd, reply)
        return rows
    finally:
        conn.close()


def _query(snd, reply) -> dict:
    snd.send(Message(reply_to=reply.remote_source.address,
                     properties={"operation": "QUERY", "type": "org.amqp.management",
                                 "name": "self",
                                 "entityType": "org.apache.qpid.dispatch.router.address"},
                     body={"attributeNames": ATTRS}), timeout=TIMEOUT)
    answer = reply.receive(timeout=TIMEOUT)
    assert answer.properties["statusCode"] == 200, answer.properties
    rows = [dict(zip(answer.body["attributeNames"], r)) for r in answer.body["results"]]
    return {row["key"]: row for row in rows}


@pytest.fixture(params=["ours", "1.x"])
def make_router(request, router_factory, tmp_path):
    """make(mode) -> a router of this kind in that mode."""
    started = []

    def make(mode: str):
        if request.param == "ours":
            return router_factory(mode=mode)
        proc, router = _one_x_router(tmp_path, mode)
        started.append(proc)
        return router

    yield make
    for proc in started:
        proc.stop()


@pytest.mark.parametrize("mode", ["standalone", "interior"])
def test_builtin_addresses(make_router, mode):
    r = make_router(mode)
    rows = query(r.url)
    internal = rows["L$_management_internal"]
    assert (internal["distribution"], internal["inProcess"]) == ("closest", 1)
    control = {"Lqdhello": "flood", "Lqdrouter": "flood", "Tqdrouter": "flood",
               "Lqdrouter.ma": "multicast", "Tqdrouter.ma": "multicast"}
    for key, dist in control.items():
        if mode == "interior":
            assert (rows[key]["distribution"], rows[key]["inProcess"]) == (dist, 1), key
        else:
            assert key not in rows
    # the reply address of two queries: balanced, the first answer from the agent
    temp = [row for key, row in query(r.url, times=2).items() if "temp." in key]
    assert [(row["distribution"], row["deliveriesFromContainer"], row["deliveriesIngress"])
            for row in temp] == [("balanced", 1, 0)]


def test_management_internal_address_answers(make_router):
    """GET-TYPES sent to ``_local/$_management_internal`` is answered as on ``$management``.
    (1.19 answers a QUERY of the core's own entity types there, e.g. router.address, with no
    rows: its core agent only intercepts ``$management``; this router answers them.)"""
    r = make_router("standalone")
    status, _, body = request(r.url, None, {"operation": "GET-TYPES",
                                            "type": "org.amqp.management", "name": "self"},
                              node="_local/$_management_internal")
    assert status == 200 and "org.apache.qpid.dispatch.router.address" in body
