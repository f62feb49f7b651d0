"""``allowAdminStatusUpdate``: a vhost policy group that may not close connections.

As Qpid Dispatch 1.19: a management UPDATE of a connection's ``adminStatus`` is answered 403
"You are not allowed to perform this operation." when the policy group of the connection the
request came in on has ``allowAdminStatusUpdate: false``, and the target connection stays up;
from a group that allows it (the default) the connection is closed (200). Run against our router
and, when ``QDROUTERD_1X`` names one, a real 1.x router with the same configuration (the same
assertions hold for both). Real clients, loopback, bounded waits.
"""
from __future__ import annotations

import json
import textwrap

import pytest
from proton import Endpoint, Message
from proton import ConnectionException
from proton.utils import BlockingConnection, ConnectionClosed

from test_no_path_drain import _one_x_router

TIMEOUT = 10.0
GROUP = {"remoteHosts": "*", "sources": "*", "targets": "*", "allowAnonymousSender": True,
         "allowDynamicSource": True}
VHOSTS = [  # 1.19's policyDir format (its configuration file syntax has no nested maps)
    ["vhost", {"hostname": "$default", "allowUnknownUser": True,
               "groups": {"$default": GROUP}}],
    ["vhost", {"hostname": "locked.vh", "allowUnknownUser": True,
               "groups": {"$default": {**GROUP, "allowAdminStatusUpdate": False}}}],
]


def policy_section(tmp_path) -> str:
    pdir = tmp_path / "policies"
    pdir.mkdir(exist_ok=True)
    (pdir / "vhosts.json").write_text(json.dumps(VHOSTS))
    return textwrap.dedent(f"""
        policy {{
            enableVhostPolicy: true
            defaultVhost: $default
            policyDir: {pdir}
        }}
        """)


@pytest.fixture(params=["ours", "1.x"])
def router(request, router_factory, tmp_path):
    if request.param == "ours":
        yield router_factory(extra=policy_section(tmp_path))
        return
    proc, r = _one_x_router(tmp_path, extra=policy_section(tmp_path))
    try:
        yield r
    finally:
        proc.stop()


def request(url: str, vhost, properties: dict, body=None, node: str = "$management") -> tuple:
    """(status, description, body) of one management request to ``node`` made on a
    connection to ``vhost`` (None: the default)."""
    conn = BlockingConnection(url, timeout=TIMEOUT, virtual_host=vhost)
    try:
        reply = conn.create_receiver(None, dynamic=True)
        snd = conn.create_sender(node)
        snd.send(Message(reply_to=reply.remote_source.address, properties=properties,
                         body=body), timeout=TIMEOUT)
        answer = reply.receive(timeout=TIMEOUT)
        return (int(answer.properties["statusCode"]), answer.properties["statusDescription"],
                answer.body)
    finally:
        conn.close()


def identity_of(url: str, container: str) -> str:
    status, _, body = request(url, None, {
        "operation": "QUERY", "type": "org.amqp.management", "name": "self",
        "entityType": "org.apache.qpid.dispatch.connection"},
        {"attributeNames": ["identity", "container"]})
    assert status == 200
    return next(str(i) for i, c in body["results"] if c == container)


def close_request(url: str, vhost, identity: str) -> tuple:
    return request(url, vhost, {"operation": "UPDATE",
                                "type": "org.apache.qpid.dispatch.connection",
                                "identity": identity}, {"adminStatus": "deleted"})


def test_policy_forbids_closing_a_connection(router):
    victim = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        identity = identity_of(router.url, victim.conn.container)
        status, description, body = close_request(router.url, "locked.vh", identity)
        assert (status, description) == (403, "You are not allowed to perform this operation.")
        assert not body
        victim.container.timeout = 0.2
        victim.container.process()
        assert not victim.conn.state & Endpoint.REMOTE_CLOSED
        # the default group may: the connection is closed
        status, _, _ = close_request(router.url, None, identity)
        assert status == 200
        with pytest.raises((ConnectionClosed, ConnectionException)):
            victim.wait(lambda: victim.conn.state & Endpoint.REMOTE_CLOSED, timeout=TIMEOUT)
    finally:
        try:
            victim.close()
        except Exception:  # noqa: BLE001 - the router closed it
            pass
