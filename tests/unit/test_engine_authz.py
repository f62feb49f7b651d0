"""A client authenticated by an authServicePlugin's service, in the engine (both builds):
its transport is made without SASL (the worker relayed it), its user and mechanism are the
service's, and the addresses the service granted police its links and messages as 1.19 does
(denied attaches: amqp:unauthorized-access "link disallowed by local policy"; an anonymous
sender's message to an address not granted: REJECTED "policy violation on target")."""
from __future__ import annotations

import itertools

import proton
import pytest
from proton import Message

import memrouter
from common import ipc
from conftest import compiled_engine
from router_io import engine as engine_py
from router_io.auth_service import AuthGrant

RELAYED = {**memrouter.LISTENER, "saslPlugin": "auth", "saslMechanisms": "PLAIN"}
ALICE = AuthGrant("alice", True, ("orders", "pub.*", "${user}.in"), ("orders", "audit"))


@pytest.fixture(params=["python", "cython"])
def engine_cls(request):
    cls = engine_py.WorkerEngine if request.param == "python" else compiled_engine()
    if cls is None:
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    return cls


class Recorder(memrouter.MemRouter):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands: list = []

    def on_commands(self, commands: list) -> None:
        self.commands.extend(commands)


class RelayedClient(memrouter.Client):
    """What the engine gets after the worker's relay: AMQP without SASL, and the grant."""

    def __init__(self, router: memrouter.MemRouter, grant: AuthGrant) -> None:
        self.transport = proton.Transport()  # no SASL layer: the relay did SASL
        self.connection = proton.Connection()
        self.connection.container = "relayed"
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.server = router.engine.new_connection(dict(RELAYED), "mem:relayed", "in")
        self.server.auth_grant = ("PLAIN", grant)
        self.connection.open()
        self.session = self.connection.session()
        self.session.open()
        self._tags = itertools.count(1)
        router.clients.append(self)
        router.run()


def refused(link: proton.Link) -> str:
    cond = link.remote_condition
    return f"{cond.name}: {cond.description}" if cond else ""


def test_the_engine_transport_of_a_relayed_listener_has_no_sasl(engine_cls):
    r = Recorder(engine_cls=engine_cls)
    c = RelayedClient(r, ALICE)
    assert c.server.sasl is None and c.server.guard is None
    assert c.connection.state & proton.Endpoint.REMOTE_ACTIVE
    opened = [cmd for cmd in r.commands if type(cmd) is ipc.ConnOpened]
    assert opened and opened[0].user == "alice" and opened[0].sasl == "PLAIN"
    assert opened[0].encrypted[5] is True  # isAuthenticated


def test_granted_and_forbidden_links(engine_cls):
    r = Recorder(engine_cls=engine_cls)
    c = RelayedClient(r, ALICE)
    allowed = [c.sender("orders"), c.sender("pub.news"), c.sender("alice.in"),
               c.receiver("orders"), c.receiver("audit"), c.receiver(None, dynamic=True),
               c.sender(None)]
    denied = [c.sender("audit"), c.sender("bob.in"), c.receiver("pub.news"),
              c.receiver("elsewhere")]
    r.run()
    for link in allowed:
        assert link.state & proton.Endpoint.REMOTE_ACTIVE, link.name
        assert not link.state & proton.Endpoint.REMOTE_CLOSED, link.name
    for link in denied:
        assert link.state & proton.Endpoint.REMOTE_CLOSED, link.name
        assert refused(link) == ("amqp:unauthorized-access: link disallowed by local "
                                 "policy"), link.name


def test_anonymous_sender_reaches_granted_targets_only(engine_cls):
    r = Recorder(engine_cls=engine_cls)
    c = RelayedClient(r, ALICE)
    rcv = c.receiver("orders")
    snd = c.sender(None)
    r.run()
    ok = c.send(snd, "granted", to="orders")
    no = c.send(snd, "forbidden", to="elsewhere")
    r.run()
    assert [m.body for _, m in c.receive_all(rcv)] == ["granted"]
    assert no.remote_state == proton.Delivery.REJECTED
    assert no.remote.condition.name == "amqp:unauthorized-access"
    assert no.remote.condition.description == "policy violation on target"
    assert ok.remote_state != proton.Delivery.REJECTED


def test_user_id_must_be_the_services_user(engine_cls):
    r = Recorder(engine_cls=engine_cls)
    c = RelayedClient(r, ALICE)
    rcv = c.receiver("orders")
    snd = c.sender("orders")
    r.run()
    dlv = snd.delivery(b"1")
    snd.send(Message(body="x", user_id=b"mallory").encode())
    snd.advance()
    r.run()
    assert dlv.remote_state == proton.Delivery.REJECTED
    assert dlv.remote.condition.description == "user_id proxy violation"
    assert c.receive_all(rcv) == []


def test_no_address_authz_restricts_nothing(engine_cls):
    r = Recorder(engine_cls=engine_cls)
    c = RelayedClient(r, AuthGrant("bob", False))
    links = [c.sender("anything"), c.receiver("anything")]
    r.run()
    for link in links:
        assert link.state & proton.Endpoint.REMOTE_ACTIVE
        assert not link.state & proton.Endpoint.REMOTE_CLOSED
    assert c.server.policy is None


def test_with_a_vhost_policy_the_grant_replaces_the_groups_addresses(engine_cls):
    """As 1.19: the user group's settings apply (here maxSenders), but the addresses are the
    service's, not the group's sources/targets."""
    r = Recorder(engine_cls=engine_cls)
    r.engine.set_policy({"enableVhostPolicy": True, "defaultVhost": "$default"}, [
        {"hostname": "$default", "allowUnknownUser": True,
         "groups": {"$default": {"remoteHosts": "*", "sources": "group-only",
                                 "targets": "group-only", "maxSenders": 2}}}])
    c = RelayedClient(r, ALICE)
    assert c.connection.state & proton.Endpoint.REMOTE_ACTIVE
    assert c.server.policy_vhost == "$default"
    first = c.sender("orders")
    group_only = [c.sender("group-only"), c.receiver("group-only")]  # (refused: not counted)
    second = c.sender("pub.x")
    over_limit = c.sender("orders")
    r.run()
    for link in (first, second):
        assert not link.state & proton.Endpoint.REMOTE_CLOSED, link.name
    assert refused(over_limit).startswith("amqp:resource-limit-exceeded")
    for link in group_only:
        assert refused(link) == ("amqp:unauthorized-access: link disallowed by local "
                                 "policy"), link.name
