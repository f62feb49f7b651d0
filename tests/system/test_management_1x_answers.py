"""What 1.19's tools rely on, against a launched router over AMQP (no 1.x install needed):
the connection's open properties and protocol, 1.19's statuses for closing and deleting a
connection, the management node addressed as ``org.amqp.management``/``self``, allocator pools,
link counters never null, and a 10,000-row QUERY paged at 500."""
from __future__ import annotations

import socket

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection, SyncRequestResponse

from conftest import default_vhost_policy

TIMEOUT = 10
T = "org.apache.qpid.dispatch."


_CLIENTS: dict = {}


def call(conn: BlockingConnection, props: dict, body=None) -> tuple:
    rr = _CLIENTS.get(id(conn))
    if rr is None or rr.connection is not conn:
        rr = _CLIENTS[id(conn)] = SyncRequestResponse(conn, "$management")
    reply = rr.call(Message(properties=props, body=body))
    return reply.properties["statusCode"], reply.properties["statusDescription"], reply.body


def rows(body: dict) -> list[dict]:
    return [dict(zip(body["attributeNames"], r)) for r in body["results"]]


def test_connection_properties_protocol_and_close(router):
    client = BlockingConnection(router.url, timeout=TIMEOUT,
                                properties={"product": "victim", "x-num": 5})
    mgmt = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        _, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "connection"},
                          {"attributeNames": ["identity", "properties", "protocol"]})
        found = [r for r in rows(body) if r["properties"].get("product") == "victim"]
        assert len(found) == 1 and found[0]["properties"] == {"product": "victim", "x-num": 5}
        assert {r["protocol"] for r in rows(body)} == {"amqp"}
        victim = found[0]["identity"]
        status, description, _ = call(mgmt, {"operation": "DELETE", "type": T + "connection",
                                             "identity": victim})
        assert (status, description) == (403, "Forbidden")
        status, _, _ = call(mgmt, {"operation": "UPDATE", "type": T + "connection",
                                   "identity": victim}, {"adminStatus": "deleted"})
        assert status == 200
        with pytest.raises(ConnectionException):  # the router closes it
            client.wait(lambda: False, timeout=TIMEOUT)
    finally:
        mgmt.close()
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closed by the router, as asked
            pass


def test_node_requests_allocators_and_link_counters(router):
    mgmt = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        node = {"type": "org.amqp.management", "name": "self"}
        status, _, types = call(mgmt, {**node, "operation": "GET-TYPES"})
        assert status == 200 and len(types) == 29
        status, description, _ = call(mgmt, {"operation": "NO-SUCH"})
        assert status == 501 and description.startswith(
            "Operation 'NO-SUCH' not implemented for 'org.apache.qpid.dispatch.management' [")
        status, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "allocator"},
                               {"attributeNames": ["identity", "totalAllocFromHeap"]})
        pools = dict(body["results"])
        assert status == 200 and pools["allocator/qdr_connection_t"] >= 1
        status, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "router.link"},
                               {"attributeNames": ["deliveriesDelayed1Sec",
                                                   "deliveriesDelayed10Sec"]})
        assert status == 200 and body["results"] and all(
            None not in r for r in body["results"])
        _, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "router"},
                          {"attributeNames": ["memoryUsage"]})
        assert body["results"][0][0] > 0
    finally:
        mgmt.close()


def test_ten_thousand_row_query_pages(router_factory):
    """10,000 configured addresses, read with QUERY count/offset 500 (as the tools page) and
    in one QUERY: never a 500."""
    extra = "".join(f"address {{\n    prefix: p{i}\n}}\n" for i in range(10000))
    router = router_factory(extra)
    mgmt = BlockingConnection(router.url, timeout=60)
    try:
        seen = []
        offset = 0
        while True:
            status, _, body = call(mgmt, {"operation": "QUERY", "offset": offset, "count": 500,
                                          "entityType": T + "router.config.address"},
                                   {"attributeNames": ["prefix"]})
            assert status == 200
            seen += [r[0] for r in body["results"]]
            if len(body["results"]) < 500:
                break
            offset += 500
        assert len(seen) == 10000 and len(set(seen)) == 10000
        status, _, body = call(mgmt, {"operation": "QUERY",
                                      "entityType": T + "router.config.address"},
                               {"attributeNames": ["prefix"]})
        assert status == 200 and len(body["results"]) == 10000, (status, _)
        # every attribute: more AMQP values than proton itself encodes in one message (a
        # proton client cannot decode it all either, hence the paging): still answered
        status, description, _ = call(mgmt, {"operation": "QUERY",
                                             "entityType": T + "router.config.address"},
                                      {"attributeNames": []})
        assert status == 200, description
    finally:
        mgmt.close()


def test_router_counters_leave_out_the_agents_replies(router):
    """Measured on 1.19: 10 pre-settled messages and 3 management requests between two reads
    of the router's counters add 13 to ingress and egress and 10 to pre-settled (its agent's
    replies enter through no link)."""
    from proton.reactor import AtMostOnce
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    names = ["deliveriesIngress", "deliveriesEgress", "presettledDeliveries"]

    def counters():
        _, _, body = call(conn, {"operation": "QUERY", "entityType": T + "router"},
                          {"attributeNames": names})
        return body["results"][0]
    try:
        receiver = conn.create_receiver("counted", credit=10)
        sender = conn.create_sender("counted", options=AtMostOnce())
        before = counters()
        for i in range(10):
            sender.send(Message(body=i))
        for _ in range(10):
            receiver.receive(timeout=TIMEOUT)
        counters()
        counters()
        after = counters()
        assert [a - b for a, b in zip(after, before)] == [13, 13, 10]
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_read_of_the_wrong_type_and_without_a_name_as_1_19(router_of_kind, kind):
    """An entity read under another type is a 400 naming both types; a READ with neither name
    nor identity is refused in the words of the agent that serves the type (1.19's core agent
    for its types, its Python agent with the type prefix for the others)."""
    router = router_of_kind(kind)
    mgmt = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        status, description, _ = call(mgmt, {"operation": "READ", "type": T + "listener",
                                             "name": "log/DEFAULT"})
        assert (status, description) == (400, f"Entity type '{T}log' does not extend "
                                              f"requested type '{T}listener'")
        status, description, _ = call(mgmt, {"operation": "READ", "type": T + "vhost",
                                             "identity": "log/DEFAULT"})
        assert (status, description) == (400, f"Entity type '{T}log' does not extend "
                                              f"requested type '{T}vhost'")
        status, description, _ = call(mgmt, {"operation": "READ", "type": T + "log",
                                             "name": "log/NO-SUCH"})
        assert (status, description) == (404, "No entity with name=log/NO-SUCH")
        for short, answer in (("listener", (400, f"{T}listener: No name or identity provided")),
                              ("router.config.linkRoute", (400, "No name or identity provided")),
                              ("router.config.address", (400, "No name or identity provided")),
                              ("router.config.binding",
                               (400, "No binding name or identity provided")),
                              ("connection", (400, "Name not supported. Identity required")),
                              ("router.address", (404, "Not Found"))):
            status, description, _ = call(mgmt, {"operation": "READ", "type": T + short})
            assert (status, description) == answer, short
    finally:
        mgmt.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_query_without_a_type_shows_the_router_as_configured(router_of_kind, kind):
    """1.19 answers a QUERY without a type from its Python agent, whose router entity holds its
    settings and counts of 0; the typed QUERY has the core's live counts."""
    router = router_of_kind(kind)
    mgmt = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        _, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "router"},
                          {"attributeNames": ["linkCount"]})
        assert body["results"][0][0] >= 2  # the agent's own request and reply links
        status, _, body = call(mgmt, {"operation": "QUERY"},
                               {"attributeNames": ["type", "linkCount", "addrCount", "mode",
                                                   "helloIntervalSeconds", "acceptedDeliveries"]})
        [row] = [r for r in body["results"] if r[0] == T + "router"]
        assert status == 200 and row[1:] == [0, 0, "standalone", 1, None]
    finally:
        mgmt.close()


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_core_agent_refusals_of_the_router_and_console_as_1_19(router_of_kind, kind):
    """1.19's core agent refuses READ, CREATE and DELETE of its router type named in full,
    whatever the name or identity (403 Forbidden), DELETE of a connection and every request
    about the console type; a READ of the router under its short type or no type is answered
    by its Python agent: the settings with a value, counts of 0. A QUERY of the type named in
    full (its core agent) shows the router as identity "1", named by its id."""
    router = router_of_kind(kind)
    mgmt = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        _, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "router"},
                          {"attributeNames": ["identity", "name", "id"]})
        [[core_identity, name, rid]] = body["results"]
        assert (core_identity, name) == ("1", rid)  # the core agent's one router
        _, _, body = call(mgmt, {"operation": "QUERY", "entityType": "router"},
                          {"attributeNames": ["identity"]})
        [[identity]] = body["results"]
        assert identity == f"router/{rid}"
        for props, answer in (
                ({"operation": "READ", "type": T + "router", "identity": identity}, None),
                ({"operation": "READ", "type": T + "router", "name": identity}, None),
                ({"operation": "READ", "entityType": T + "router", "identity": identity}, None),
                ({"operation": "READ", "type": T + "router", "name": "log/DEFAULT"}, None),
                ({"operation": "READ", "type": T + "router"}, None),
                ({"operation": "CREATE", "type": T + "router", "name": "r2"}, None),
                ({"operation": "DELETE", "type": T + "router", "identity": identity}, {}),
                ({"operation": "DELETE", "type": T + "connection", "identity": "no-such"}, {}),
                ({"operation": "QUERY", "entityType": T + "console"},
                 {"attributeNames": [], "results": []}),
                ({"operation": "READ", "type": T + "console", "name": "c"}, None)):
            status, description, body = call(mgmt, props, {})
            assert (status, description, body) == (403, "Forbidden", answer), props
        for props in ({"type": "router", "identity": identity}, {"identity": identity},
                      {"type": T + "router", "entityType": T + "log", "name": identity}):
            status, _, body = call(mgmt, {"operation": "READ", **props})
            assert status == 200 and body["identity"] == identity, props
            assert body["linkCount"] == 0 and body["mode"] == "standalone"
            assert None not in body.values() and "acceptedDeliveries" not in body
    finally:
        mgmt.close()


def host_name() -> str:
    """1.19's rule for its router entity's hostName: the host's name looked up by address."""
    try:
        return socket.gethostbyaddr(socket.gethostname())[0]
    except OSError:
        return ""


ROUTER_AS_CONFIGURED = {  # a standalone router of defaults, two worker threads
    "type": T + "router", "mode": "standalone", "area": "0", "workerThreads": 2,
    "allowResumableLinkRoute": True, "allowUnsettledMulticast": False,
    "defaultDistribution": "balanced", "helloIntervalSeconds": 1, "helloMaxAgeSeconds": 3,
    "raIntervalFluxSeconds": 4, "raIntervalSeconds": 30, "remoteLsMaxAgeSeconds": 60,
    "saslConfigName": "qdrouterd", "linkCount": 0, "addrCount": 0, "nodeCount": 0}


@pytest.mark.parametrize("kind", ["ours", "1.x"])
@pytest.mark.parametrize("mode, attrs, changed", [
    ("standalone", "", {}),
    ("interior", "area: 7\nmetadata: m1\ntimestampsInUTC: true\nsaslConfigName: sc\n"
                 "helloIntervalSeconds: 2",
     {"mode": "interior", "metadata": "m1", "timestampsInUTC": True, "saslConfigName": "sc",
      "helloIntervalSeconds": 2})], ids=["defaults", "interior-set"])
def test_router_read_under_its_short_type_as_1_19(router_of_kind, kind, mode, attrs, changed):
    """The router read under its short type or no type, and its row in a QUERY without a type,
    are 1.19's Python agent's entity: the attributes of 1.19's schema that have a value (its
    placeholder ``area`` "0" whatever is configured, ``hostName`` the host's name, no
    ``timestampsInUTC`` unless set), none of this router's own settings (``metrics*``: the type
    named in full still shows them)."""
    if kind == "ours":
        router = router_of_kind(kind, mode=mode, router_attrs=attrs, workers=2)
    else:
        router = router_of_kind(kind, mode=mode, router_attrs="workerThreads: 2\n" + attrs)
    mgmt = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        _, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "router"},
                          {"attributeNames": ["id"]})
        [[rid]] = body["results"]
        identity = f"router/{rid}"
        if kind == "ours":  # its own settings stay in the type named in full
            _, _, body = call(mgmt, {"operation": "QUERY", "entityType": T + "router"},
                              {"attributeNames": ["metricsIntervalSeconds"]})
            assert body["results"] == [[10]]
        expected = {**ROUTER_AS_CONFIGURED, "id": rid, "identity": identity, "name": identity,
                    "hostName": host_name(), **changed}
        for props in ({"type": "router", "identity": identity}, {"identity": identity}):
            status, _, body = call(mgmt, {"operation": "READ", **props})
            assert (status, body) == (200, expected), props
        status, _, body = call(mgmt, {"operation": "QUERY"}, {"attributeNames": []})
        assert status == 200 and "metricsDir" not in body["attributeNames"]
        [row] = [r for r in rows(body) if r["type"] == T + "router"]
        assert {k: v for k, v in row.items() if v is not None} == expected
    finally:
        mgmt.close()


PATTERN_POLICY = default_vhost_policy({"allowDynamicSource": True, "allowAnonymousSender": True},
                                      {"enableVhostNamePatterns": True})


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_updates_and_creates_1_19_refuses(router_of_kind, kind):
    """A log's outputFile '' (500, the file cannot be opened), an exchange without a name
    (400) and a vhost pattern that 1.19 rewrites into one it has (#.#.0.0 -> #.0.0; 500)."""
    router = router_of_kind(kind, PATTERN_POLICY)
    mgmt = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        status, description, _ = call(mgmt, {"operation": "UPDATE", "type": T + "log",
                                             "name": "log/DEFAULT"}, {"outputFile": ""})
        assert (status, description) == (500, "CError: Configuration: Failed to open log "
                                              "file ''")
        status, description, _ = call(mgmt, {"operation": "CREATE",
                                             "type": T + "router.config.exchange"},
                                      {"address": "ex1"})
        assert (status, description) == (400, "exchange requires a unique name")
        groups = {"$default": {"remoteHosts": "*", "sources": "*", "targets": "*"}}
        for name, hostname, answer in (
                ("v1", "#.0.0", (201, "Created")),
                ("v2", "#.#.0.0", (500, "PolicyError: Policy for vhost '#.#.0.0' alias "
                                        "'#.#.0.0' optimized pattern conflicts with existing "
                                        "pattern")),
                ("v3", "*.0.0", (201, "Created")),
                ("v4", "a.#.0.0", (201, "Created"))):
            status, description, _ = call(mgmt, {"operation": "CREATE", "type": T + "vhost",
                                                 "name": name},
                                          {"hostname": hostname, "allowUnknownUser": True,
                                           "groups": groups})
            assert (status, description) == answer, hostname
    finally:
        mgmt.close()
